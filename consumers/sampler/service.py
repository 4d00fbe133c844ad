"""The sampler service: rewards in, Frontier Sampling state out, rollout requests ahead.

Run by `scalecua sample` (cli/sample_commands.py); `scalecua up` runs one too.

The sampler is a singleton per training run: start more than one and one is active, the
others wait as standbys and take over when it dies or leaves (a leader election on the log,
runtime/leader.py); only the active one reads `reward` and `policy-updates` (in its own
group) and writes. It

- keeps the pool of training tasks from `tasks` (new tasks join while it runs;
  tasks of any other split — `benchmark`, `heldout` — never do), restored from `task-stats` after a restart;
- folds each finished group into the task's EMA pass rate and writes `task-stats`. A group
  is finished when a reward (of the configured judge version) is in for each of its
  `group_size` requests; environment failures (`scored=False`) are not attempts, so a
  group of only failures changes no count. Rewards of unfinished groups are held, so their
  offsets stay uncommitted (the low-watermark) and a restart re-reads them;
- folds every group exactly once, across restarts and take-overs. A group's rewards are
  spread over `reward`'s partitions, and the commit of a partition waits for the oldest
  unfinished group on it, so a restart re-reads rewards of groups it already folded — all
  of a group's, or only the part on partitions whose commit had not moved. The task-stats
  record that folds a group also names it (`folded_groups`, the groups folded into the task
  within the last group timeout plus an hour); a restarted sampler loads those names and
  drops, without holding them, rewards of groups it folded already. That is enough: a
  reward can be re-read only while an older group holds its partition's commit, and every
  group is closed within the group timeout of its first reward (counted in log time, so a
  restart does not start the clock again);
- keeps the pipeline fed: it writes the next batch (B tasks × n requests) while fewer than
  `max_in_flight` of its batches are unfinished AND it is at most `max_ahead` batches ahead
  of the trainer (one `policy-updates` record per training step). Rollouts then never run
  more than that many policy versions ahead of the data the trainer consumes, which bounds
  staleness without starving the rollout workers. Unseen tasks come first (the initial
  pass: one group each), then batches chosen by the configured strategy (frontier.py).

With `refill_unusable` (pair it with the trainer's `skip_equal_groups`, DAPO's dynamic
sampling), a finished group the trainer cannot learn from — all its scored rewards equal,
or none scored — does not count towards `max_ahead`: the trainer steps on B groups that
have samples, so without the refill a batch with one all-failed group and a sampler
waiting for that step wait for each other forever (seen in the laptop recipe: B=4, one of
four groups all 0, no step in an hour).

If the sampler restarts, batches it wrote before the crash are no longer counted in
flight; their groups still finish and update the stats, and at most `max_in_flight` extra
batches may be requested meanwhile.

If the log itself is replaced (a restarted in-memory broker comes back empty), the active
sampler goes on in the new log with the pool and stats it has (runtime/leader.py keeps its
term): the batches it wrote into the old log went with it, and so did the trainer's
unfinished steps on them, so none of them counts in flight or ahead any more, and the next
batch is requested into the new log at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec
import numpy as np
from aiokafka import TopicPartition

from consumers.sampler.frontier import FrontierConfig, select
from consumers.sampler.pool import TaskPool
from runtime.bus import Record
from runtime.config import BusSettings
from runtime.leader import SingletonService
from runtime.processor import Output, Processor
from runtime.tables import TopicTable
from topics.events import PolicyUpdate, Reward, RolloutRequest, TaskEvent, TaskStats

__all__ = ["SamplerConfig", "Sampler", "open_sampler", "sampler_service"]

log = logging.getLogger(__name__)

_FOLD_MEMORY_MARGIN_S = 3600.0  # folded groups are remembered this long beyond the timeout
_FOLDED_PER_TASK = 512  # at most this many remembered per task (bounds a task-stats record)
_CATCH_UP_GRACE_S = 60.0  # a re-read group is not timed out before its other rewards are read


@dataclass(frozen=True)
class SamplerConfig:
    """How many rollouts to ask for, and how far ahead."""

    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    batch_tasks: int = 32  # B: tasks (groups) per batch
    group_size: int = 8  # n: rollouts per task
    max_steps: int = 50  # turn limit of each rollout
    max_in_flight: int = 2  # batches requested and not yet finished
    max_ahead: int = 2  # batches requested beyond the trainer's steps
    max_batches: int | None = None  # stop after this many batches (None: run on)
    initial_pass: bool = True  # unseen tasks get one group each before frontier selection
    refill_unusable: bool = False  # groups the trainer cannot use do not count as ahead
    judge_version: str = "osworld-metrics-v1"  # rewards of other versions are ignored
    group_timeout_s: float = 3 * 3600.0  # a group missing rewards this long is closed as is
    seed: int = 0
    group_id: str = "sampler"


@dataclass
class _Group:
    task_id: str
    size: int
    batch: int | None  # the batch of this sampler run that requested it, if any
    rewards: dict[int, tuple[TopicPartition, int, Reward]] = field(default_factory=dict)
    first_ms: float | None = None  # log time of its first reward: the timeout counts from it
    seen: float = field(default_factory=time.monotonic)  # when this process first held it


class Sampler(Processor):
    """Stateful processor on `reward` and `policy-updates`; see the module doc."""

    topics = ["reward", "policy-updates"]
    dedup = True

    def __init__(self, config: SamplerConfig) -> None:
        self.config = config
        self.name = config.group_id
        self.pool = TaskPool(config.frontier)
        self.rng = np.random.default_rng(config.seed)
        self.policy_version = 0
        self.trainer_steps = 0  # policy updates seen since this sampler started
        self.batches = 0  # batches written by this run
        self._written_off = 0.0  # batches' worth of groups gone with a replaced log
        self._log_run: str | None = None  # the new log it was last told of
        self._unfinished: dict[int, set[str]] = {}  # batch -> its group ids not yet finished
        self._groups: dict[str, _Group] = {}
        self._benchmark: set[str] = set()
        self._requested_unseen: set[str] = set()  # tasks whose initial-pass group is requested
        self._folded: dict[str, int] = {}  # group id -> when it was folded (wall-clock ms)
        self._folded_by_task: dict[str, dict[str, int]] = {}  # ...per task, as task-stats has it
        self._pruned = time.monotonic()
        self._run = uuid.uuid4().hex[:6]
        self.groups_finished = 0
        self.useful_groups = 0
        self.unusable_groups = 0  # this run's finished groups with fewer than 2 distinct scores
        self.unscored = 0
        self.late_rewards = 0  # rewards of groups folded already (re-read, or stragglers)

    # -- tasks and restored state ------------------------------------------------------
    def add_task(self, event: TaskEvent) -> None:
        """A task arrived on `tasks`: training tasks join the pool; benchmark, held-out or any
        other split never does (an allowlist: a split added later stays out of training)."""
        if event.split != "train":
            self._benchmark.add(event.task_id)
            self.pool.remove(event.task_id)
            return
        self._benchmark.discard(event.task_id)
        self.pool.add(event.task_id)

    def restore(self, stats: TaskStats) -> None:
        """Load a task's stats from `task-stats`: the groups folded into it, and its state if
        the task is in the pool."""
        for group_id, when in stats.folded_groups.items():
            self._folded[group_id] = when
            self._folded_by_task.setdefault(stats.task_id, {})[group_id] = when
        if stats.task_id in self.pool:
            self.pool.restore(stats)

    # -- the processor -----------------------------------------------------------------
    async def process(self, record: Record) -> list[Output]:
        """Fold a reward into its group, or note a training step."""
        event = record.event
        if isinstance(event, PolicyUpdate):
            # A restarted trainer announces its newest checkpoint again: one step, one version.
            if event.policy_version > self.policy_version:
                self.trainer_steps += 1
                self.policy_version = event.policy_version
            return []
        reward: Reward = event
        if reward.judge_version != self.config.judge_version:
            return []
        if reward.group_id in self._folded:
            self.late_rewards += 1
            return []  # folded already: dropped, not held, so it pins no commit
        group = self._groups.get(reward.group_id)
        if group is None:
            group = self._groups[reward.group_id] = _Group(reward.task_id, reward.group_size, None)
        if reward.sample_index in group.rewards:
            return []  # a second trajectory for one request (a zombie retry): first one wins
        group.rewards[reward.sample_index] = (record.tp, record.offset, reward)
        logged = record.timestamp_ms if record.timestamp_ms > 0 else time.time() * 1000
        group.first_ms = logged if group.first_ms is None else min(group.first_ms, logged)
        if len(group.rewards) < group.size:
            return []
        return self._finish(reward.group_id)

    def _finish(self, group_id: str) -> list[Output]:
        group = self._groups.pop(group_id)
        if group.batch is not None and group.batch in self._unfinished:
            self._unfinished[group.batch].discard(group_id)
            if not self._unfinished[group.batch]:
                del self._unfinished[group.batch]
        rewards = [r for _, _, r in group.rewards.values()]
        scores = [r.score for r in rewards if r.scored]
        # Still unseen after this group (all environment failures)? Then it is owed another.
        self._requested_unseen.discard(group.task_id)
        self.unscored += sum(1 for r in rewards if not r.scored)
        self.groups_finished += 1
        if len(set(scores)) > 1:
            self.useful_groups += 1
        elif group.batch is not None:
            self.unusable_groups += 1
        folded = self._remember_fold(group.task_id, group_id)
        if group.task_id not in self.pool:
            return []
        # A group of only environment failures changes no count, but is still written as
        # folded: a restart that re-reads part of it must not hold that part.
        stats = self.pool.record_group(group.task_id, scores) or self.pool.stats(group.task_id)
        stats = msgspec.structs.replace(
            stats, policy_version=self.policy_version, last_group_id=group_id,
            folded_groups=folded,
        )  # fmt: skip
        return [Output("task-stats", stats)]

    def _fold_memory_ms(self) -> float:
        """How long a folded group is remembered: a re-read can meet it only that long."""
        return 1000 * (self.config.group_timeout_s + _FOLD_MEMORY_MARGIN_S)

    def _remember_fold(self, task_id: str, group_id: str) -> dict[str, int]:
        """Note a group as folded; return the task's folded groups still worth remembering."""
        now = int(time.time() * 1000)
        self._folded[group_id] = now
        mine = self._folded_by_task.setdefault(task_id, {})
        mine[group_id] = now
        oldest = now - self._fold_memory_ms()
        kept = sorted(((w, g) for g, w in mine.items() if w >= oldest), reverse=True)
        if len(kept) > _FOLDED_PER_TASK:
            log.warning("task %s: %d groups folded within %.0f h; remembering the newest %d",
                        task_id, len(kept), self._fold_memory_ms() / 3.6e6, _FOLDED_PER_TASK)  # fmt: skip
        self._folded_by_task[task_id] = {g: w for w, g in kept[:_FOLDED_PER_TASK]}
        return dict(self._folded_by_task[task_id])

    def _prune_folded(self) -> None:
        """Forget folds older than the fold memory (their rewards cannot come back)."""
        oldest = time.time() * 1000 - self._fold_memory_ms()
        self._folded = {g: w for g, w in self._folded.items() if w >= oldest}
        for task_id, groups in list(self._folded_by_task.items()):
            kept = {g: w for g, w in groups.items() if w >= oldest}
            if kept:
                self._folded_by_task[task_id] = kept
            else:
                del self._folded_by_task[task_id]

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """The oldest reward offset of `tp` in an unfinished group."""
        offsets = [o for g in self._groups.values() for p, o, _ in g.rewards.values() if p == tp]
        return min(offsets) if offsets else None

    async def tick(self) -> list[Output]:
        """Close timed-out groups; write the next batch when the pipeline has room."""
        out: list[Output] = []
        now, now_ms = time.monotonic(), time.time() * 1000
        timeout_s = self.config.group_timeout_s
        grace = min(_CATCH_UP_GRACE_S, timeout_s)
        for group_id, group in list(self._groups.items()):
            if not group.rewards or now - group.seen <= grace:
                continue
            age = (now_ms - group.first_ms) / 1000
            if age > timeout_s:
                log.warning("group %s: %d of %d rewards after %.0f s; closing it", group_id,
                            len(group.rewards), group.size, age)  # fmt: skip
                out += self._finish(group_id)
        if now - self._pruned > 60:
            self._pruned = now
            self._prune_folded()
        if self._room():
            out += self._next_batch()
        return out

    def _ahead(self) -> float:
        """Batches requested beyond the trainer's steps."""
        ahead = self.batches - self.trainer_steps - self._written_off
        if self.config.refill_unusable:  # in batches' worth of groups the trainer will step on
            ahead -= self.unusable_groups / self.config.batch_tasks
        return ahead

    def _room(self) -> bool:
        c = self.config
        if c.max_batches is not None and self.batches >= c.max_batches:
            return False
        return len(self._unfinished) < c.max_in_flight and self._ahead() < c.max_ahead

    def _next_batch(self) -> list[Output]:
        """Choose B tasks (unseen ones first) and write n requests for each."""
        c = self.config
        chosen: list[str] = []
        if c.initial_pass:  # unseen tasks first: their group is their initial pass rate
            unseen = [t for t in self.pool.unseen() if t not in self._requested_unseen]
            chosen = unseen[: c.batch_tasks]
            self._requested_unseen.update(chosen)
        if len(chosen) < c.batch_tasks:
            picks = self.pool.ids(select(self.pool.state, c.batch_tasks, c.frontier, self.rng,
                                         step=self.batches))  # fmt: skip
            chosen += [t for t in picks if t not in chosen][: c.batch_tasks - len(chosen)]
        if not chosen:
            return []
        batch = self.batches
        self.batches += 1
        out = []
        groups = set()
        for task_id in chosen:
            group_id = f"b{batch:05d}-{self._run}-{task_id}"
            groups.add(group_id)
            self._groups[group_id] = _Group(task_id, c.group_size, batch)
            for i in range(c.group_size):
                request = RolloutRequest(
                    task_id=task_id, group_id=group_id, group_size=c.group_size,
                    sample_index=i, policy_version=self.policy_version, max_steps=c.max_steps,
                )  # fmt: skip
                out.append(Output("rollout-requests", request))
        self._unfinished[batch] = groups
        log.info("batch %d: %d tasks x %d rollouts at policy version %d", batch, len(chosen),
                 c.group_size, self.policy_version)  # fmt: skip
        return out

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Forget rewards of moved partitions: they are re-read from the last commit."""
        for group in self._groups.values():
            group.rewards = {i: r for i, r in group.rewards.items() if r[0] not in partitions}
        return []

    async def close(self) -> list[Output]:
        """Nothing to persist: partial groups are re-read after a restart."""
        return []

    async def on_new_log(self, run_id: str | None) -> None:
        """The log was replaced (a restarted broker): requests in flight went with the old one,
        and so did the trainer's steps on them; the pool and its stats stay."""
        if run_id is not None and run_id == self._log_run:
            return  # told again (by its runner and by the election) of the same new log
        self._log_run = run_id
        log.warning("sampler: a new log (run %s): %d batches in flight are forgotten; %d "
                    "tasks kept", run_id, len(self._unfinished), len(self.pool))  # fmt: skip
        self._unfinished.clear()
        self._groups.clear()
        self._requested_unseen.clear()
        self._written_off += self._ahead()  # none of them will be trained on

    def stats(self) -> dict[str, float]:
        """Counters for the runner's metrics line and /metrics."""
        return {
            "tasks": len(self.pool),
            "batches": self.batches,
            "groups_finished": self.groups_finished,
            "useful_groups": self.useful_groups,
            "unusable_groups": self.unusable_groups,
            "unscored_rollouts": self.unscored,
            "late_rewards": self.late_rewards,
            "in_flight_batches": len(self._unfinished),
            "policy_version": self.policy_version,
        }


@contextlib.asynccontextmanager
async def open_sampler(settings: BusSettings, config: SamplerConfig) -> AsyncIterator[Sampler]:
    """Load the task pool (tasks, then restored task-stats) and yield a sampler following `tasks`."""
    sampler = Sampler(config)
    tasks = await TopicTable(settings, "tasks", on_change=_on_task(sampler)).start()
    try:
        stats = await TopicTable(settings, "task-stats").start()
        await stats.stop()
        for event in stats.values():
            sampler.restore(event)
        log.info("sampler: %d tasks, %d with stats from task-stats, %d groups folded lately",
                 len(sampler.pool), len(stats), len(sampler._folded))  # fmt: skip
        yield sampler
    finally:
        await tasks.stop()


@contextlib.asynccontextmanager
async def sampler_service(
    settings: BusSettings, config: SamplerConfig, *, metrics_port: int | None = None
) -> AsyncIterator[SingletonService]:
    """Yield the sampler as a singleton: `run()` waits as a standby until elected, then loads
    the pool from the log and runs the sampler's runner while it stays elected."""
    yield SingletonService(
        settings, config.group_id, lambda: open_sampler(settings, config),
        runner_options={"metrics_port": metrics_port},
    )  # fmt: skip


def _on_task(sampler: Sampler):  # noqa: ANN202 - a callback
    def on_change(event: object) -> None:
        if isinstance(event, TaskEvent):
            sampler.add_task(event)

    return on_change
