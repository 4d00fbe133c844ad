"""The segmenter service: finished trajectories from the log, cut into `segment-ready` records.

Run by `scalecua segment` (cli/segment_commands.py); `scalecua up` runs one too.

It consumes `rollout-step` and `trajectory-complete`. Both are keyed by request id and have
the same partition count, and the group uses range assignment (`co_partitioned`), so a
trajectory's steps and its completion always reach the same member. Cross-topic order is
not guaranteed: a trajectory is cut only once its completion and all `num_steps` steps are
in. The history is rebuilt from the events and the blob store (system prompt and
observation texts; screenshots are not even decoded — rendering needs only their size,
which each step records), then cut by `consumers/segmenter/vcs.py`.

State and restarts: records wait in memory until their trajectory is cut, so the segmenter
reports the oldest offset it still holds per partition (its low-watermark) and the runner
commits only past what was cut and acknowledged. After a crash it re-reads from there and
re-emits identical segments (same ids: `(trajectory, segment index)`), which downstream
drops as duplicates. Superseded attempts — a retried request's partial trajectory, which
never completes — are dropped as soon as another attempt at the same request completes,
and so are their steps that arrive later (the first attempt to complete wins).

Nothing is held for long (`consumers/segmenter/held.py` tells the cases apart): an
impossible completion or records that contradict each other dead-letter their whole
trajectory at once; a completion whose steps are short once the log holds everything
written up to it on the steps' partition waits `missing_grace_s` (60 s) more for them and
is then dead-lettered with "steps missing from the log" and their numbers (a warning, and
the `steps_missing` metric); and a trajectory with nothing new for `idle_timeout_s` (15
minutes; the wall clock and the stream's event time must both have moved on) is
dead-lettered with what it misses, or dropped quietly if it is an attempt the worker
retried. The segmenter writes those dead letters itself (one per held record, with the
reason, the record's coordinates and bytes) so their records leave the low-watermark;
later records of such a trajectory follow it to dead-letter. An environment failure
(status `error`) trains nothing and waits for no step.

Finished work is remembered (a bounded window of trajectory ids and completed requests), so
a step or completion of a trajectory already cut or superseded is dropped instead of held
forever. After a restart, re-reading from the low-watermark brings back records of such
trajectories whose other half lies before the committed offset; the runner shows the
segmenter those older records (`remember`): anything before the committed offset belongs
to a trajectory that was no longer held, that is, finished.

Safety check: in `vcs` and `stepwise` modes with the rollout's own window, each turn's
re-rendered prompt must have the length the rollout worker recorded; a mismatch (a
different tokenizer or window) dead-letters the trajectory with the reason instead of
training on wrong tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from consumers.segmenter.held import HeldTrajectory, conflict, impossible
from consumers.segmenter.vcs import Segment, TurnRecord, segment_trajectory
from runtime.blobstore import BlobStore
from runtime.bus import Record
from runtime.errors import BlobCorrupt, BlobNotFound, RecordError
from runtime.policy.processor import PolicyProcessor
from runtime.processor import Output, Processor
from topics.events import RolloutStep, SegmentReady, TrajectoryComplete
from topics.registry import DEAD_LETTER

__all__ = ["SegmenterConfig", "Segmenter", "segments_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmenterConfig:
    """How trajectories are cut."""

    mode: str = "vcs"  # "vcs", "stepwise" or "trajectory"
    k: int = 5  # observations kept in context (paper: 5 on OSWorld, 8 on ScienceBoard)
    delta: int = 5  # observations dropped at once (paper: 5)
    # Release an uncut trajectory after this long without a record of it: 3x the rollout's
    # longest wait inside a turn (an engine call may take its --generate-timeout, 300 s).
    idle_timeout_s: float = 900.0
    # Wait this long for steps a completion counts once nothing is left to read before it:
    # a worker re-sends a step that failed within seconds (0.2 s, doubling).
    missing_grace_s: float = 60.0
    remembered: int = 100_000  # finished trajectories and requests remembered (bounded memory)
    group_id: str = "segmenter"


@dataclass(frozen=True)
class _Size:
    """A screenshot as rendering sees it: only its size."""

    size: tuple[int, int]


async def segments_of(
    complete: TrajectoryComplete,
    steps: list[RolloutStep],
    processor: PolicyProcessor,
    blobs: BlobStore,
    config: SegmenterConfig,
    text_cache: dict[str, str] | None = None,
) -> list[SegmentReady]:
    """Rebuild a finished trajectory from its events and cut it into segment-ready events."""
    steps = sorted(steps, key=lambda s: s.step)
    if [s.step for s in steps] != list(range(complete.num_steps)):
        raise RecordError(f"{complete.trajectory_id}: steps {[s.step for s in steps]} are not "
                          f"0..{complete.num_steps - 1}")  # fmt: skip
    if not steps:
        return []
    cache = text_cache if text_cache is not None else {}

    async def text(ref: str | None) -> str:
        if not ref:
            return ""
        if ref not in cache:
            cache[ref] = (await blobs.aget(ref)).decode()
        return cache[ref]

    system = await text(steps[0].system_prompt_ref)
    turns = []
    for s in steps:
        image = (
            _Size(tuple(s.observation_size)) if s.observation_ref and s.observation_size else None
        )
        turns.append(
            TurnRecord(
                screenshot=image,
                observation=await text(s.observation_text_ref),
                response_ids=s.response_ids,
                logprobs=s.response_logprobs,
                image_ref=s.observation_ref if image is not None else None,
                policy_version=s.policy_version,
            )
        )
    segments = await asyncio.to_thread(
        segment_trajectory, system, steps[0].instruction, turns, processor, config.mode,
        config.k, config.delta,
    )  # fmt: skip
    if config.mode != "trajectory" and steps[0].context_window == [config.k, config.delta]:
        _check_prompts(complete.trajectory_id, segments, steps)
    sampled = all(len(s.response_logprobs) == len(s.response_ids) for s in steps)
    return [_event(complete, seg, turns, steps, len(segments), config, sampled) for seg in segments]


def _check_prompts(trajectory_id: str, segments: list[Segment], steps: list[RolloutStep]) -> None:
    for seg in segments:
        for t, length in zip(seg.trained_turns, seg.prompt_tokens, strict=True):
            recorded = steps[t].prompt_tokens
            if recorded and recorded != length:
                raise RecordError(
                    f"{trajectory_id}: turn {t} re-renders to {length} prompt tokens but the "
                    f"rollout's prompt had {recorded}: is the segmenter's --policy (tokenizer) "
                    "the rollout's?"
                )


def _event(
    complete: TrajectoryComplete,
    seg: Segment,
    turns: list[TurnRecord],
    steps: list[RolloutStep],
    count: int,
    config: SegmenterConfig,
    sampled: bool,
) -> SegmentReady:
    return SegmentReady(
        trajectory_id=complete.trajectory_id,
        segment_index=seg.index,
        input_ids=seg.ids,
        loss_mask=seg.loss_mask,
        logprobs=seg.logprobs,
        image_refs=[turns[t].image_ref for t in seg.image_turns],
        image_sizes=[list(turns[t].screenshot.size) for t in seg.image_turns],
        task_id=complete.task_id,
        group_id=complete.group_id,
        group_size=complete.group_size,
        sample_index=complete.sample_index,
        request_id=complete.request_id,
        policy_version=min(turns[t].policy_version for t in seg.trained_turns),
        num_segments=count,
        is_last=seg.index == count - 1,
        mode=config.mode,
        temperature=steps[0].temperature,
        top_p=steps[0].top_p,
        trained_tokens=seg.trained_tokens,
        sampled=sampled,
    )


class _Recent:
    """The last `capacity` keys put, each with a value, oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self._items.get(key)

    def put(self, key: str, value: Any = None, *, replace: bool = False) -> None:
        """Remember `key` with `value`; a key put before keeps its value unless `replace`."""
        if replace:
            self._items[key] = value
        else:
            self._items.setdefault(key, value)
        if len(self._items) > self.capacity:
            del self._items[next(iter(self._items))]

    def __contains__(self, key: str) -> bool:
        return key in self._items


class Segmenter(Processor):
    """Stateful processor that turns finished trajectories into segments; see the module doc."""

    topics = ["rollout-step", "trajectory-complete"]
    co_partitioned = True
    dedup = True

    def __init__(
        self, config: SegmenterConfig, processor: PolicyProcessor, blobs: BlobStore
    ) -> None:
        self.config = config
        self.name = config.group_id
        self.processor = processor
        self.blobs = blobs
        self._held: dict[str, HeldTrajectory] = {}
        self._attempts: dict[str, set[str]] = {}  # request id -> trajectory ids held
        self._texts: dict[str, str] = {}  # blob text cache (system prompts repeat)
        # Trajectory ids finished: cut (value: its step count), dead-lettered (the reason) or
        # dropped (None).
        self._finished = _Recent(config.remembered)
        self._winners = _Recent(config.remembered)  # request id -> the attempt that completed
        self._clock: dict[TopicPartition, int] = {}  # newest record timestamp read, per partition
        # The runner's: whether a partition was read to its end (see bind_reader).
        self._read_to_end: Callable[[TopicPartition], Awaitable[bool]] | None = None
        self.cut = 0
        self.superseded = 0
        self.late = 0
        self.rejected = 0  # trajectories dead-lettered: impossible or contradictory
        self.released = 0  # trajectories dead-lettered incomplete after the idle bound
        self.steps_missing = 0  # trajectories dead-lettered for steps the log never got
        self.dead_letters = 0  # dead letters this processor wrote itself (held records)
        self.segments = 0

    async def process(self, record: Record) -> list[Output]:
        """Hold a step or a completion; cut the trajectory once it is whole."""
        event = record.event
        self._clock[record.tp] = max(self._clock.get(record.tp, 0), record.timestamp_ms)
        tid = event.trajectory_id
        request = event.request_id or tid
        if tid in self._finished:
            self._straggler(tid, event)
            return []
        winner = self._winners.get(request)
        if winner is not None and winner != tid:
            self._finish(tid)  # another attempt at the request completed
            self.superseded += 1
            return []
        problem = impossible(event)
        if problem is not None:
            if isinstance(event, RolloutStep):
                raise RecordError(f"{tid}: {problem}")  # the step alone: its trajectory may be fine
            return self._reject(tid, problem, record)  # no completion will come for its steps
        held = self._held.get(tid)
        if held is None:
            held = self._held[tid] = HeldTrajectory(request)
            self._attempts.setdefault(request, set()).add(tid)
        elif (problem := conflict(held, record)) is not None:
            return self._reject(tid, problem, record)
        elif _redelivered(held, event):
            return []  # the same record again, past the runner's dedup window: one is held
        held.take(record, time.monotonic())
        if isinstance(event, TrajectoryComplete):
            self._winners.put(request, tid)
            self._supersede(event)
            if event.status == "error":
                self._finish(tid)  # an environment failure trains nothing: wait for nothing
                return []
        if not held.ready():
            return []
        return await self._cut(tid, held, record)

    def _straggler(self, tid: str, event: RolloutStep | TrajectoryComplete) -> None:
        """Drop a record of a finished trajectory, or raise RecordError if it contradicts it."""
        gone = self._finished.get(tid)  # None: dropped; steps it was cut with; or a reason
        if isinstance(gone, str):  # the rest of a dead-lettered trajectory follows it there
            raise RecordError(f"{tid} was dead-lettered before this record came: {gone}")
        if isinstance(gone, int) and isinstance(event, RolloutStep) and event.step >= gone:
            raise RecordError(
                f"{tid}: step {event.step} came after its trajectory was finished (cut, with "
                f"the {gone} steps its completion says)"
            )
        self.late += 1  # cut or dropped already: a re-read after a restart, or a straggler

    async def _cut(self, tid: str, held: HeldTrajectory, record: Record) -> list[Output]:
        complete = held.complete.event
        steps = [r.event for r in held.steps.values()]
        try:
            events = await segments_of(
                complete, steps, self.processor, self.blobs, self.config, self._texts
            )
        except (RecordError, BlobNotFound, BlobCorrupt) as exc:
            return self._reject(tid, str(exc).removeprefix(f"{tid}: "), record)
        self._finish(tid, complete.num_steps)
        self.cut += 1
        self.segments += len(events)
        return [Output("segment-ready", e) for e in events]

    def _reject(self, tid: str, reason: str, record: Record) -> list[Output]:
        """Dead-letter a trajectory that can never be cut: what is held of it, and `record`."""
        held = self._held.get(tid)
        records = held.records() if held is not None else []
        if all(r is not record for r in records):
            records.append(record)
        log.warning("dead-lettering %s (%d records): %s", tid, len(records), reason[:300])
        self.rejected += 1
        return self._dead_letters(tid, reason, records, "process")

    def _release_missing(self, tid: str, held: HeldTrajectory) -> list[Output]:
        """Dead-letter a completed trajectory whose steps never reached the log."""
        reason = (f"steps missing from the log: {held.missing()} (none came in "
                  f"{self.config.missing_grace_s:g} s after the log held everything written up "
                  "to its completion)")  # fmt: skip
        log.warning("dead-lettering %s: %s", tid, reason)
        self.steps_missing += 1
        return self._dead_letters(tid, reason, held.records(), "incomplete")

    def _release(self, tid: str, held: HeldTrajectory, idle: float) -> list[Output]:
        """Dead-letter a trajectory whose missing records did not come within the bound."""
        reason = (f"incomplete after {idle:.0f} s without a record of it (idle timeout "
                  f"{self.config.idle_timeout_s:g} s): {held.missing()}")  # fmt: skip
        log.warning("dead-lettering %s: %s", tid, reason)
        self.released += 1
        return self._dead_letters(tid, reason, held.records(), "incomplete")

    def _dead_letters(
        self, tid: str, reason: str, records: list[Record], kind: str
    ) -> list[Output]:
        self._finish(tid, reason)
        self.dead_letters += len(records)
        text = f"{tid}: {reason}"
        letters = [r.dead_letter(kind, text, self.name) for r in records]
        return [Output(DEAD_LETTER, letter, letter.original_key) for letter in letters]

    def _supersede(self, complete: TrajectoryComplete) -> None:
        """Drop other attempts at the same request: they never complete and must not be cut."""
        for other in list(self._attempts.get(complete.request_id or complete.trajectory_id, ())):
            if other != complete.trajectory_id and other in self._held:
                held = self._held[other]
                if held.complete is None:
                    self._finish(other)
                    self.superseded += 1

    def remember(self, record: Record) -> None:
        """Note a record handled before the committed offset: its trajectory is finished."""
        event = record.event
        if not isinstance(event, RolloutStep | TrajectoryComplete):
            return
        # Nothing held was ever committed past, so the trajectory was cut or dropped; a
        # re-read half of it (held now, e.g. its completion) must not wait for the rest.
        self._finish(event.trajectory_id)
        if isinstance(event, TrajectoryComplete):
            self._winners.put(event.request_id or event.trajectory_id, event.trajectory_id)
            if event.status != "error":  # so a step past its count is still told apart
                self._finished.put(event.trajectory_id, event.num_steps, replace=True)

    def _finish(self, trajectory_id: str, outcome: int | str | None = None) -> None:
        """Forget a trajectory for good, noting how it ended (see `_straggler`)."""
        self._forget(trajectory_id)
        self._finished.put(trajectory_id, outcome)

    def _forget(self, trajectory_id: str) -> None:
        trajectory = self._held.pop(trajectory_id, None)
        if trajectory is None:
            return
        ids = self._attempts.get(trajectory.request_id, set())
        ids.discard(trajectory_id)
        if not ids:
            self._attempts.pop(trajectory.request_id, None)

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the oldest offset of `tp` a held (uncut) trajectory still needs."""
        return min((t.lowest[tp] for t in self._held.values() if tp in t.lowest), default=None)

    def bind_reader(self, read_to_end: Callable[[TopicPartition], Awaitable[bool]]) -> None:
        """Take the runner's `read_to_end`: a quiet log's end, where no later record comes."""
        self._read_to_end = read_to_end

    async def tick(self) -> list[Output]:
        """Dead-letter trajectories short of steps past the grace, or idle past the bound
        (drop retried attempts quietly)."""
        now, out = time.monotonic(), []
        for tid, held in list(self._held.items()):
            if held.short() and await self._steps_lost(held, now):
                out += self._release_missing(tid, held)
                continue
            idle = held.idle_s(now, self._stream_ms(held))
            if idle <= self.config.idle_timeout_s:
                continue
            if held.complete is None and len(self._attempts.get(held.request_id, ())) > 1:
                self._finish(tid)  # the worker retried the request: this attempt never ends
                self.superseded += 1
            else:
                out += self._release(tid, held, idle)
        return out

    async def _steps_lost(self, held: HeldTrajectory, now: float) -> bool:
        """Whether a short trajectory's grace is over: it starts once every record written
        before its completion on the steps' partition was read (one newer was read, or the
        partition's end), since its worker wrote its steps before the completion."""
        if held.gap_since is None:
            complete = held.complete
            steps = TopicPartition("rollout-step", complete.partition)  # co-partitioned
            passed = 0 < complete.timestamp_ms <= self._clock.get(steps, 0)
            if not passed and (self._read_to_end is None or not await self._read_to_end(steps)):
                return False
            held.gap_since = now
        return now - held.gap_since >= self.config.missing_grace_s

    def _stream_ms(self, held: HeldTrajectory) -> int | None:
        """Event time on the trajectory's partition: the slower of the two topics' newest."""
        partition = next(iter(held.lowest)).partition  # co-partitioned: one number for both
        clocks = [self._clock.get(TopicPartition(t, partition)) for t in self.topics]
        return None if None in clocks else min(clocks)

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: the runner re-reads from the committed low-watermark."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Forget trajectories of partitions moving elsewhere (their new owner re-reads them)."""
        for trajectory_id, t in list(self._held.items()):
            if partitions & t.lowest.keys():
                self._forget(trajectory_id)
        for tp in partitions:
            self._clock.pop(tp, None)
        return []

    async def close(self) -> list[Output]:
        """Nothing to persist: uncut trajectories are re-read after a restart."""
        return []

    def stats(self) -> dict[str, Any]:
        """Counters for logs and the dashboard."""
        return {
            "held": len(self._held),
            "cut": self.cut,
            "segments": self.segments,
            "superseded": self.superseded,
            "late": self.late,
            "rejected": self.rejected,
            "released": self.released,
            "steps_missing": self.steps_missing,
            "dead_letters": self.dead_letters,
        }


def _redelivered(held: HeldTrajectory, event: RolloutStep | TrajectoryComplete) -> bool:
    """True when an identical record is already held (conflict() has ruled out a different one)."""
    if isinstance(event, RolloutStep):
        return event.step in held.steps
    return held.complete is not None
