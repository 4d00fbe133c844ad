"""The trainer service: `segment-ready` + `reward` -> GRPO steps -> checkpoints -> `policy-updates`.

Run by `scalecua train` (cli/train_commands.py); `scalecua up` runs one too.

One trainer runs per training job (it owns the optimizer). With a process group (`nproc`
> 1, or torchrun) this process is rank 0: the only consumer of the log, driving the other
ranks through its backend (consumers/trainer/ranks.py); nothing below changes. It is a
stateful processor on the service runner:

1. Records are joined into groups (`batching.GroupBook`: one judge version, first reward
   per request, complete when every request is rewarded and every scored trajectory has
   all its segments). Every record of an unfinished group stays held: the runner commits
   the oldest held offset per partition (the low-watermark).
2. When B complete groups with something to train are waiting, a step starts in a worker
   thread (the event loop keeps heartbeating and reading): samples are packed into
   micro-batches, the backend runs forward/backward per micro-batch and one optimizer
   step, and the checkpoint is written (`checkpoints.CheckpointStore`), with metadata
   naming the groups it trained and the restart point (below).
3. The next tick emits `PolicyUpdate(version, checkpoint_uri, metrics)`. The runner sends a
   tick's outputs and waits for their acknowledgement before the following tick, and only
   then are the step's groups released, so offsets are committed past them only after the
   update is acknowledged.

Restart: a checkpoint's metadata holds a restart point — per partition a floor (every
record below it belonged to a finished group) and the finished groups that a re-read can
still meet above it. A restarted trainer loads the newest checkpoint (weights, optimizer,
version), skips records below the floors (same log run only) and records of the finished
groups, and announces the checkpoint again (rollout workers ignore versions they have). A
kill -9 anywhere therefore trains no group twice and loses none: groups of a step whose
checkpoint was not complete were never released and are read again.

Failures: a rank of the process group that dies or falls out of step (`RankFailure`) stops
the service there, with the step's groups neither finished, released nor committed: the
restart trains them. A missing or corrupt screenshot makes its trajectory an environment
failure and the groups are planned again; the blob store or checkpoint store being down is an
infrastructure error the runner retries (the trained weights wait in memory for the
checkpoint); any other failure of a step finishes its groups untrained (counted, logged).

Numbers: a step whose loss or gradient norm is not finite is skipped by the backend (no
update; `NonFiniteStep`): its groups are finished untrained (a retry on the same weights
would fail the same way, and the gradient does not say which group did it), counted and
logged with the step's statistics, and nothing is announced. Weights that are not finite
after a step (an overflow the gradient check cannot see) are never written or announced:
the last announced version is loaded back instead. A trainer refuses to resume from a
checkpoint holding non-finite weights.

Records that can never complete a group are dead-lettered: a record that contradicts its
group (another group size), and, when an incomplete group expires (`group_timeout_s` idle,
15 minutes by default), every record it held, with what was missing; records of an
expired group that come later are dead-lettered by the runner as they arrive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from aiokafka import TopicPartition

from consumers.trainer.accounting import (
    PlanCounts,
    StepJob,
    checkpoint_metadata,
    restart_point,
    rounded,
    step_metrics,
)
from consumers.trainer.backends import (
    MicroBatch,
    NonFiniteStep,
    Sample,
    TrainerBackend,
)
from consumers.trainer.batching import (
    GroupBook,
    GroupPlan,
    GroupState,
    PlanConfig,
    pack_micro_batches,
    plan_group,
)
from consumers.trainer.checkpoints import CheckpointStore
from consumers.trainer.grpo import GRPOConfig, StepObjective, finish_stats
from consumers.trainer.ranks import RankDeadline, RankFailure
from consumers.trainer.screenshots import MissingImage, load_images
from consumers.trainer.shared_prefix import pack_shared
from runtime.blobstore import BlobStore
from runtime.bus import Record
from runtime.errors import (
    ConfigError,
    InfrastructureError,
    PolicyError,
    RecordError,
)
from runtime.policy.model import resolve_policy
from runtime.processor import Output, Processor
from topics.events import DeadLetter, PolicyUpdate, Reward, SegmentReady
from topics.registry import DEAD_LETTER

__all__ = ["TrainerConfig", "Trainer", "load_images"]

log = logging.getLogger(__name__)

_BUILTIN_POLICIES = ("tiny", "smollm2")


@dataclass(frozen=True)
class TrainerConfig:
    """What the trainer trains, on what, and how often it checkpoints."""

    policy: str = "tiny"  # base policy: initial weights and the frozen KL reference
    backend: str = "torch"
    checkpoints: str | None = None  # folder or fsspec URL (default $SCALECUA_HOME/checkpoints)
    judge_version: str = "osworld-metrics-v1"  # the only rewards trained on
    batch_groups: int = 32  # B: groups (tasks) per optimisation step (paper: 32)
    micro_batch_tokens: int = 8192  # tokens per forward pass (rows x longest; a shared prefix once)
    micro_batch_rows: int = 4  # sequences per forward pass
    # An incomplete group that received nothing for this long is dropped and its records
    # dead-lettered (None: wait forever). Members of a group finish at different times, so
    # it must exceed the longest episode plus the judge's and the segmenter's delay.
    group_timeout_s: float | None = 900.0
    max_steps: int | None = None  # stop after this many steps (None: run until stopped)
    keep_states: int = 2  # optimizer states kept (newest versions; 0: none written, a restart
    # resumes the weights with a fresh optimizer)
    # Model versions kept, the newest (0: all). At least 2: a version is written before it is
    # announced, and a restart resumes from the last announced one.
    keep_checkpoints: int = 0
    max_held_tokens: int = 50_000_000  # pause reading above this while a step can free memory
    group_id: str = "trainer"  # consumer group (one trainer per group: a second one is refused)
    # Across ranks: when a call on the process group is late, and when it ends the group.
    rank_deadline: RankDeadline = field(default_factory=RankDeadline)
    plan: PlanConfig = field(default_factory=PlanConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)

    @property
    def uses_reference(self) -> bool:
        """Whether the KL term needs the frozen reference policy."""
        return self.plan.objective == "grpo" and self.grpo.kl_coef != 0.0


class _NonFiniteWeights(PolicyError):
    """A step left weights that are NaN or infinite: they must not be written or announced."""


def _spec(policy: str) -> str:
    """A policy spec that means the same after a restart: a built-in name or an absolute path."""
    if policy in _BUILTIN_POLICIES:
        return policy
    return str(Path(policy.removeprefix("file://")).expanduser().resolve())


class Trainer(Processor):
    """Processor that trains the policy on complete groups; see the module docstring."""

    topics = ["segment-ready", "reward"]
    dedup = True  # a redelivered segment or reward is dropped by its id

    def __init__(
        self,
        config: TrainerConfig,
        backend: TrainerBackend,
        blobs: BlobStore,
        store: CheckpointStore,
        run_id: str | None = None,
    ) -> None:
        if config.batch_groups < 1:
            raise ConfigError("a batch holds at least one group")
        if config.plan.objective not in ("grpo", "sft"):
            raise ConfigError(f"unknown objective {config.plan.objective!r}: grpo or sft")
        if config.plan.staleness not in ("drop", "downweight"):
            raise ConfigError(f"unknown staleness rule {config.plan.staleness!r}")
        if config.keep_checkpoints == 1 or config.keep_checkpoints < 0:
            raise ConfigError(
                f"keep_checkpoints = {config.keep_checkpoints}: keep 0 (all) or at least 2 "
                "(a restart resumes from the last announced version while the next is written)"
            )
        self.config = config
        self.name = config.group_id
        self.backend = backend
        self.blobs = blobs
        self.store = store
        self.run_id = run_id
        self.book = GroupBook(config.judge_version)
        self.planned = PlanCounts()  # what the groups planned so far came to
        self.version = 0  # the policy version the weights in memory are
        self.steps = 0
        self.base_policy = ""
        self.last_step: dict[str, float] = {}
        self.on_done: Callable[[], None] | None = None  # called once max_steps are done
        self.role_lost: asyncio.Event | None = None  # set if another trainer took the group
        self._job: StepJob | None = None
        self._weights_spoiled = False  # a step left weights that are not finite
        self._release: list[str] = []  # groups whose policy update was sent last tick
        self._outbox: list[Output] = []
        self._image_tokens: dict[tuple[int, int], int] = {}
        self._pruned = time.monotonic()

    # -- start ----------------------------------------------------------------------------
    def load(self) -> None:
        """Load the newest checkpoint (else the base policy) and its restart point; blocking."""
        self.store.clean_partial()
        latest = self.store.latest()
        if latest is None:
            base = resolve_policy(self.config.policy)
            self.base_policy = _spec(self.config.policy)
            self.backend.load(base, reference=base if self.config.uses_reference else None)
            log.info("trainer: starting from %s at version 0", base)
            return
        meta = latest.metadata
        self.base_policy = meta.get("base_policy", self.config.policy)
        if self.base_policy != _spec(self.config.policy):
            log.warning("trainer: %s holds a run of base policy %s (not %s); continuing it",
                        self.store.root, self.base_policy, self.config.policy)  # fmt: skip
        base = resolve_policy(self.base_policy)
        with (
            self.store.local_model(latest.version) as weights,
            self.store.local_state(latest.version) as state,
        ):
            self.backend.load(
                weights,
                reference=base if self.config.uses_reference else None,
                optimizer_state=state,
            )
        bad = self.backend.nonfinite_parameters()
        if bad:
            raise PolicyError(
                f"checkpoint {latest.uri} holds {bad} weights that are NaN or infinite: it is "
                "neither resumed nor announced; move it out of the checkpoint folder to "
                "resume from the version before it"
            )
        self.version = latest.version
        self.steps = int(meta.get("step", latest.version))
        same_run = meta.get("run_id") == self.run_id and self.run_id is not None
        floors, finished = restart_point(meta.get("restart", {}), same_run)
        self.book.restore(floors, finished)
        self._outbox.append(
            Output("policy-updates", PolicyUpdate(
                policy_version=latest.version, checkpoint_uri=latest.uri,
                metrics=meta.get("metrics", {}),
            ))
        )  # fmt: skip
        log.info("trainer: resuming from %s (version %d, %s run, %d finished groups remembered)",
                 latest.uri, latest.version, "same" if same_run else "another",
                 len(finished))  # fmt: skip

    # -- the processor --------------------------------------------------------------------
    async def process(self, record: Record) -> list[Output]:
        """Add a segment or reward to its group; training happens in tick()."""
        event = record.event
        try:
            if isinstance(event, SegmentReady):
                self.book.add_segment(event, record.tp, record.offset, check=self._check_images)
            elif isinstance(event, Reward):
                self.book.add_reward(event, record.tp, record.offset)
        except ValueError as exc:
            raise RecordError(str(exc)) from exc
        return []

    def _check_images(self, event: SegmentReady) -> None:
        """Refuse a segment whose image placeholders do not match its images' sizes."""
        processor = self.backend.processor
        if not processor.is_multimodal:
            if event.image_refs:
                raise ValueError(f"segment {event.dedup_id()} has images; the policy is text-only")
            return
        expected = 0
        for width, height in event.image_sizes:
            key = (int(width), int(height))
            if key not in self._image_tokens:
                self._image_tokens[key] = processor.image_token_count(*key)
            expected += self._image_tokens[key]
        found = event.input_ids.count(processor.image_token_id)
        if found != expected:
            raise ValueError(
                f"segment {event.dedup_id()}: {found} image tokens, but its {len(event.image_sizes)}"
                f" image(s) at their sizes make {expected}"
            )

    def wants(self) -> int:
        """Pause reading while memory is full and a step can free some (else never: no deadlock)."""
        can_free = self._job is not None or len(self.book.ready) >= self.config.batch_groups
        return 0 if can_free and self.book.tokens_held > self.config.max_held_tokens else 1000

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """The oldest offset of `tp` any unfinished or unannounced group holds."""
        return self.book.low_watermark(tp)

    async def tick(self) -> list[Output]:
        """Release announced groups, finish a done step, expire idle groups, start a step."""
        if self.role_lost is not None and self.role_lost.is_set():
            # This process stalled past its session and another trainer now holds the group:
            # stop before writing anything more (nothing unacknowledged is committed).
            raise ConfigError(f"another trainer took over group {self.config.group_id!r} on "
                              "this log; this one stops")  # fmt: skip
        check = getattr(self.backend, "check", None)
        if check is not None:  # a rank of the trainer's process group died: stop here
            check()
        if self._release:
            # The runner acknowledged last tick's policy update (or dead letters) before
            # calling us again.
            self.book.release(self._release)
            self._release = []
        job = self._job
        if job is not None and job.task is not None and job.task.done():
            await self._finish(job)
        if self._weights_spoiled:  # a step left non-finite weights: the last good ones first
            await asyncio.to_thread(self._reload)  # StorageError: the runner retries the tick
            self._weights_spoiled = False
        if self.config.group_timeout_s:
            for group in self.book.expire(self.config.group_timeout_s):
                self._dead_letter_expired(group)
        if self._job is None and not self.finished_steps():
            self._maybe_launch()
        if time.monotonic() - self._pruned > 60:  # groups finished without a step add up too
            self._pruned = time.monotonic()
            self.book.prune()
        return self._drain()

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: state comes back as records are re-read."""

    async def on_new_log(self, run_id: str | None) -> None:
        """The log was replaced (a restarted broker): positions of the old log mean nothing."""
        self.run_id = run_id  # restart points written from now on name the new run
        self.book.floors.clear()  # offsets of the old log: they would skip the new log's records
        self.book.next_offset.clear()

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Forget unfinished groups' records of partitions moving away (the trainer is a singleton)."""
        self.book.forget_partitions(set(partitions))
        return self._drain()

    async def close(self) -> list[Output]:
        """Let a running step finish and checkpoint, and announce it."""
        job = self._job
        if job is not None and job.task is not None:
            log.info("trainer: waiting for step %d to finish before stopping", job.version)
            await asyncio.wait({job.task})
            await self._finish(job)
        return self._drain()

    def announced(self) -> None:
        """The newest checkpoint is on `policy-updates` already: do not announce it again."""
        self._outbox = [o for o in self._outbox if not isinstance(o.event, PolicyUpdate)]

    def _dead_letter_expired(self, group: GroupState) -> None:
        """Report every record an expired group held; release them once that is acknowledged."""
        why = self.book.expired[group.group_id]
        records = group.records()
        self.book.count("groups_expired")
        self.book.count("records_expired", len(records))
        log.warning("trainer: group %s expired, %s; %d records dead-lettered", group.group_id,
                    why, len(records))  # fmt: skip
        for tp, offset, trajectory_id in records:
            letter = DeadLetter.about(
                source_topic=tp.topic, partition=tp.partition, offset=offset,
                error=f"group {group.group_id} expired {why} (the record itself is intact; "
                      "its bytes stay on the log at this offset)",
                error_type="expired", service=self.name, key=trajectory_id.encode(),
                value_kept=False,
            )  # fmt: skip
            self._outbox.append(Output(DEAD_LETTER, letter))
        # Like a step's groups: released on the next tick, after the runner acknowledged
        # the dead letters, so no commit passes records whose report could still be lost.
        self._release.append(group.group_id)

    def _drain(self) -> list[Output]:
        out, self._outbox = self._outbox, []
        return out

    def finished_steps(self) -> bool:
        """Whether the trainer has taken its `max_steps` (never, without a bound)."""
        return self.config.max_steps is not None and self.steps >= self.config.max_steps

    # -- steps ----------------------------------------------------------------------------
    def _maybe_launch(self) -> None:
        chosen: list[tuple[GroupState, GroupPlan]] = []
        for group_id in list(self.book.ready):
            group = self.book.pending[group_id]
            plan = plan_group(group, self.version, self.config.plan)
            if not plan.samples:  # nothing to train (all failed, stale, below threshold)
                self.book.take(group_id)
                self.book.release([group_id])
                self.planned += PlanCounts.of(plan, trained=False)
                continue
            chosen.append((group, plan))
            if len(chosen) == self.config.batch_groups:
                break
        if len(chosen) < self.config.batch_groups:
            return
        counts = PlanCounts()
        for group, plan in chosen:
            self.book.take(group.group_id)
            counts += PlanCounts.of(plan, trained=True)
        self.planned += counts
        samples = [s for _, plan in chosen for s in plan.samples]
        job = StepJob(
            version=self.version + 1,
            groups=[g for g, _ in chosen],
            plans=[p for _, p in chosen],
            batches=self._pack(samples),
            tokens=sum(s.tokens for s in samples),
            restart=self.book.restart_point(),
            counts=counts,
        )
        job.task = asyncio.create_task(self._run(job))
        self._job = job

    def _pack(self, samples: list[Sample]) -> list[MicroBatch]:
        """Micro-batches under the token budget; a backend that shares prefixes computes a
        group's common prompt once, so its passes are budgeted (and laid out) for that."""
        pack = pack_shared if self.backend.shares_prefixes else pack_micro_batches
        return pack(samples, self.config.micro_batch_tokens, self.config.micro_batch_rows)

    async def _run(self, job: StepJob) -> None:
        """Train, then write the checkpoint; errors are kept on the job for tick()."""
        try:
            await asyncio.to_thread(self._train, job)
            job.trained = True
            job.uri = await asyncio.to_thread(self._save, job)
        except Exception as exc:  # handled by _finish on the event loop
            job.error = exc

    def _train(self, job: StepJob) -> None:
        config = self.config
        loss_fn = StepObjective(config.plan.objective, job.tokens, config.grpo)
        result = self.backend.step(job.batches, loss_fn, lambda s: load_images(self.blobs, s))
        bad = self.backend.nonfinite_parameters()
        if bad:
            raise _NonFiniteWeights(f"the step left {bad} weights NaN or infinite")
        job.metrics = step_metrics(job, result)

    def _save(self, job: StepJob) -> str:
        started = time.monotonic()
        config = self.config
        metadata = checkpoint_metadata(
            job, base_policy=self.base_policy, objective=config.plan.objective,
            judge_version=config.judge_version, run_id=self.run_id, backend=self.backend.name,
            config={"grpo": asdict(config.grpo), "plan": asdict(config.plan),
                    "batch_groups": config.batch_groups},
        )  # fmt: skip
        uri = self.store.write(
            job.version, self.backend.save,
            self.backend.save_state if self.config.keep_states > 0 else None, metadata,
            self.config.keep_states, self.config.keep_checkpoints,
        )  # fmt: skip
        job.metrics["checkpoint_s"] = time.monotonic() - started
        return uri

    async def _finish(self, job: StepJob) -> None:
        """Act on a finished step: announce it, or give its groups back, or finish them."""
        if isinstance(job.error, RankFailure):
            # The group is over: nothing of this step is finished, released or given back;
            # the runner stops without committing past its groups, and a restart trains them.
            raise job.error
        if not job.trained:
            self._job = None
            error = job.error
            if isinstance(error, MissingImage):
                self._mark_unusable(job.groups, error.trajectory_id)
                self.book.count("rollouts_missing_images")
                log.warning("trainer: %s; its trajectory leaves its group", error)
                self.book.give_back(job.groups)
                self.planned -= job.counts  # planned and counted again
                return
            if isinstance(error, InfrastructureError):
                self.book.give_back(job.groups)
                self.planned -= job.counts  # planned and counted again
                raise error  # the runner retries with backoff, then halts
            if isinstance(error, NonFiniteStep | _NonFiniteWeights):
                self._skip_nonfinite(job, error)
                return
            log.error("trainer: step %d failed, its %d groups are dropped untrained: %r",
                      job.version, len(job.groups), error, exc_info=error)  # fmt: skip
            self.book.count("groups_failed", len(job.groups))
            self.planned -= PlanCounts(groups_trained=len(job.groups))
            self.book.release([g.group_id for g in job.groups])
            return
        if job.uri is None:
            job.error = None
            job.uri = await asyncio.to_thread(self._save, job)  # StorageError: runner retries
        self._job = None
        self.version = job.version
        self.steps += 1
        job.metrics["step_time_s"] = time.monotonic() - job.started
        self.last_step = dict(job.metrics)
        self._release += [g.group_id for g in job.groups]
        self.book.prune()
        self._outbox.append(
            Output("policy-updates", PolicyUpdate(
                policy_version=job.version, checkpoint_uri=job.uri, metrics=job.metrics,
                groups=sorted(g.group_id for g in job.groups),
                advantages={s.trajectory_id: s.advantage for p in job.plans for s in p.samples}
                if self.config.plan.objective == "grpo" else {},  # SFT has no advantages
            ))
        )  # fmt: skip
        line = {"service": self.name, "step": job.version, **rounded(job.metrics)}
        log.info("step %s", orjson.dumps(line).decode())
        if self.finished_steps() and self.on_done is not None:
            self.on_done()

    def _skip_nonfinite(self, job: StepJob, error: Exception) -> None:
        """Drop a step whose numbers were not finite; keep (or load back) the last weights."""
        # The update was applied: the next tick loads the last announced weights back,
        # before any step can start from these.
        self._weights_spoiled = isinstance(error, _NonFiniteWeights)
        self.book.count("steps_nonfinite")
        self.book.count("groups_nonfinite", len(job.groups))
        self.planned -= PlanCounts(groups_trained=len(job.groups))
        self.book.release([g.group_id for g in job.groups])
        parts = getattr(error, "parts", [])
        line = {
            "service": self.name, "step": job.version, "reason": str(error),
            "policy_version": self.version, "groups": sorted(g.group_id for g in job.groups),
            **rounded(finish_stats(parts) if parts else {}),
        }  # fmt: skip
        log.error("step skipped, not finite: %s; its groups are dropped untrained and version "
                  "%d stays", orjson.dumps(line).decode(), self.version)  # fmt: skip

    def _reload(self) -> None:
        """Load the last announced weights (and optimizer state) back, or the base policy."""
        reference = resolve_policy(self.base_policy) if self.config.uses_reference else None
        if self.version == 0:
            self.backend.load(resolve_policy(self.base_policy), reference=reference)
            return
        with (
            self.store.local_model(self.version) as weights,
            self.store.local_state(self.version) as state,
        ):
            self.backend.load(weights, reference=reference, optimizer_state=state)

    @staticmethod
    def _mark_unusable(groups: list[GroupState], trajectory_id: str) -> None:
        for group in groups:
            traj = group.trajectories.get(trajectory_id)
            if traj is not None:
                traj.unusable = True

    # -- metrics --------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Counters and gauges of the trainer, and the last step's main numbers."""
        out: dict[str, float] = {
            "policy_version": self.version,
            "steps": self.steps,
            "groups_pending": len(self.book.pending),
            "groups_ready": len(self.book.ready),
            "tokens_held": self.book.tokens_held,
            "step_running": int(self._job is not None),
            **self.book.counters,
            **self.planned.as_dict(),
        }
        group_stats = getattr(self.backend, "group_stats", None)
        if group_stats is not None:  # the process group's call in flight, and late ranks
            out.update(group_stats())
        for key in ("loss", "kl", "entropy", "clip_frac", "tokens", "step_time_s"):
            if key in self.last_step:
                out[f"last_{key}"] = self.last_step[key]
        return out
