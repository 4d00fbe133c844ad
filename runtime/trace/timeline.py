"""One trajectory's life on the log, stage by stage: pure functions, no I/O.

Every fact is on the log already, keyed by trajectory, request or group:

    request ─► turn 0 … turn n−1 ─► complete ─┬─► reward
                                              └─► segments ─► trained ─► announced

- the request (`rollout-requests`): task, the sampler's batch (its number is in the group
  id), the policy version it asked for, and why the task was drawn, from the `task-stats`
  the sampler had written before it: unseen (its initial pass), inside the candidate pool
  (the top `pool_factor` × B live tasks by weight) or outside it, with its EMA then;
- each turn (`rollout-step`), the completion (`trajectory-complete`), the rewards
  (`reward`), the segments (`segment-ready`);
- the trainer's step that consumed the group and its announcement (`policy-updates`: the
  update that names the group, with the trajectory's advantage), and the task's EMA after
  the group was folded (`task-stats`).

Times are the events' own clocks (`ts_ms`: the producer's wall clock when it made the
event). A turn's record is made when the turn ends; it started `latency_ms` before. The
trainer's update is made when the step's checkpoint is written: its step began
`step_time_s` earlier and training ended `checkpoint_s` before it.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.trace.stages import (
    GAP_LABELS,
    GAPS,
    Attempt,
    Completion,
    Member,
    Request,
    Score,
    SegmentRow,
    Segments,
    TaskAfter,
    Timeline,
    Training,
    Turn,
)
from topics.events import (
    PolicyUpdate,
    Reward,
    RolloutRequest,
    RolloutStep,
    SegmentReady,
    TaskStats,
    TrajectoryComplete,
)

__all__ = [
    "GAPS",
    "GAP_LABELS",
    "SegmentFact",
    "TraceLog",
    "LogIndex",
    "Request",
    "Turn",
    "Attempt",
    "Completion",
    "Score",
    "SegmentRow",
    "Segments",
    "Training",
    "TaskAfter",
    "Member",
    "Timeline",
    "build_timeline",
    "build_timelines",
    "resolve_trajectory",
    "group_named",
    "timeline_dict",
    "action_text",
    "batch_of",
]

_BATCH = re.compile(r"^b(\d+)-([0-9A-Za-z]+)-")  # the sampler's group ids: b<batch>-<run>-<task>


@dataclass(frozen=True)
class SegmentFact:
    """What a trace needs of one `segment-ready` record (its token lists left out)."""

    trajectory_id: str
    segment_index: int
    ts_ms: int
    tokens: int
    images: int
    trained_tokens: int
    policy_version: int = 0
    num_segments: int = 1
    mode: str = "vcs"
    group_id: str = ""
    task_id: str = ""

    @classmethod
    def of(cls, event: SegmentReady) -> SegmentFact:
        """Return the facts of one segment event."""
        return cls(
            trajectory_id=event.trajectory_id, segment_index=event.segment_index,
            ts_ms=event.ts_ms, tokens=len(event.input_ids), images=len(event.image_refs),
            trained_tokens=event.trained_tokens or sum(event.loss_mask),
            policy_version=event.policy_version, num_segments=event.num_segments,
            mode=event.mode, group_id=event.group_id, task_id=event.task_id,
        )  # fmt: skip


@dataclass
class TraceLog:
    """The records a trace reads, topic by topic (any order; redelivered duplicates allowed)."""

    requests: list[RolloutRequest] = field(default_factory=list)
    steps: list[RolloutStep] = field(default_factory=list)
    completes: list[TrajectoryComplete] = field(default_factory=list)
    rewards: list[Reward] = field(default_factory=list)
    segments: list[SegmentFact] = field(default_factory=list)
    task_stats: list[TaskStats] = field(default_factory=list)
    updates: list[PolicyUpdate] = field(default_factory=list)
    run_id: str = ""


# -- the index ----------------------------------------------------------------------------


def _request_of(trajectory_id: str) -> str:
    return trajectory_id.split("@", 1)[0]


def batch_of(group_id: str) -> tuple[int, str] | None:
    """Return (batch number, sampler run) of a sampler's group id, or None."""
    m = _BATCH.match(group_id)
    return (int(m.group(1)), m.group(2)) if m else None


class LogIndex:
    """The records of a TraceLog indexed by trajectory, request, group and task."""

    def __init__(self, log: TraceLog, pool_factor: int = 3) -> None:
        self.run_id = log.run_id
        self.pool_factor = pool_factor  # the sampler's candidate pool is pool_factor × B tasks
        self.requests: dict[tuple[str, int], RolloutRequest] = {}
        for r in sorted(log.requests, key=lambda r: r.ts_ms):
            self.requests.setdefault((r.group_id, r.sample_index), r)
        self.steps: dict[str, dict[int, RolloutStep]] = defaultdict(dict)
        for s in sorted(log.steps, key=lambda s: s.ts_ms):
            self.steps[s.trajectory_id].setdefault(s.step, s)
        self.completes: dict[str, TrajectoryComplete] = {}
        for c in sorted(log.completes, key=lambda c: c.ts_ms):
            self.completes.setdefault(c.trajectory_id, c)
        self.rewards: dict[str, list[Reward]] = defaultdict(list)
        seen: set[str] = set()
        for w in sorted(log.rewards, key=lambda w: w.ts_ms):
            if w.dedup_id() not in seen:
                seen.add(w.dedup_id())
                self.rewards[w.trajectory_id].append(w)
        self.segments: dict[str, dict[int, SegmentFact]] = defaultdict(dict)
        for g in sorted(log.segments, key=lambda g: g.ts_ms):
            self.segments[g.trajectory_id].setdefault(g.segment_index, g)
        self.updates = sorted(log.updates, key=lambda u: (u.policy_version, u.ts_ms))
        self.trained_by: dict[str, PolicyUpdate] = {}
        for u in self.updates:
            for group_id in u.groups:
                self.trained_by.setdefault(group_id, u)
        self._stats: dict[str, list[TaskStats]] = defaultdict(list)
        for t in sorted(log.task_stats, key=lambda t: t.ts_ms):
            self._stats[t.task_id].append(t)
        self._stats_ts = {k: [t.ts_ms for t in v] for k, v in self._stats.items()}
        # trajectories of each request, and groups of each sampler batch
        self.attempts: dict[str, set[str]] = defaultdict(set)
        for tid in [*self.steps, *self.completes, *self.rewards, *self.segments]:
            self.attempts[_request_of(tid)].add(tid)
        self.batch_groups: dict[tuple[int, str], set[str]] = defaultdict(set)
        self.batch_ms: dict[tuple[int, str], int] = {}  # when each batch's first request was made
        for (group_id, _), r in self.requests.items():
            if (b := batch_of(group_id)) is not None:
                self.batch_groups[b].add(group_id)
                self.batch_ms[b] = min(self.batch_ms.get(b, r.ts_ms), r.ts_ms)
        self._pools: dict[tuple[int, str], tuple[int, dict[str, int], int]] = {}

    def trajectory_ids(self) -> list[str]:
        """Every trajectory with a turn or a completion, oldest first."""
        first = {t: min(s.ts_ms for s in steps.values()) for t, steps in self.steps.items()}
        for t, c in self.completes.items():
            first.setdefault(t, c.ts_ms)
        return sorted(first, key=lambda t: (first[t], t))

    def stats_before(self, task_id: str, ts_ms: int) -> TaskStats | None:
        """The task's newest stats written at or before `ts_ms`."""
        stamps = self._stats_ts.get(task_id, [])
        i = bisect.bisect_right(stamps, ts_ms)
        return self._stats[task_id][i - 1] if i else None

    def stats_folding(self, task_id: str, group_id: str) -> TaskStats | None:
        """The task's first stats that folded `group_id` in."""
        for t in self._stats.get(task_id, []):
            if t.last_group_id == group_id or group_id in t.folded_groups:
                return t
        return None

    def pool_at(self, batch: tuple[int, str], ts_ms: int) -> tuple[int, dict[str, int], int]:
        """(live tasks, rank by weight of each, pool size) when a batch was drawn."""
        if batch not in self._pools:
            live = []
            for task_id in self._stats:
                stats = self.stats_before(task_id, ts_ms)
                if stats is not None and stats.state == "active" and stats.ema_pass_rate >= 0:
                    live.append((-stats.weight, task_id))
            ranks = {task_id: i + 1 for i, (_, task_id) in enumerate(sorted(live))}
            size = min(len(live), self.pool_factor * max(1, len(self.batch_groups[batch])))
            self._pools[batch] = (len(live), ranks, size)
        return self._pools[batch]


# -- building -----------------------------------------------------------------------------


def action_text(action: dict[str, Any] | None, error: str | None = None) -> str:
    """The action as the policy gave it (compact JSON), or why it gave none."""
    if action is None:
        return f"no action: {error}" if error else "no action"
    name = str(action.get("action", "?"))
    rest = {k: v for k, v in action.items() if k != "action"}
    text = f"{name} {json.dumps(rest, ensure_ascii=False, separators=(',', ':'))}" if rest else name
    return f"{text} (refused: {error})" if error else text


def _request(index: LogIndex, req: RolloutRequest) -> Request:
    batch = batch_of(req.group_id)
    before = index.stats_before(req.task_id, req.ts_ms)
    known = before is not None and before.ema_pass_rate >= 0
    live, rank, size = 0, None, 0
    if batch is None:
        drawn = "unknown"
    elif not known:
        drawn = "initial pass"
    else:
        live, ranks, size = index.pool_at(batch, index.batch_ms[batch])
        rank = ranks.get(req.task_id)
        n_batch = len(index.batch_groups[batch])
        if live <= n_batch:
            drawn = "every live task"
        elif rank is None:
            drawn = "unknown"
        else:
            drawn = "pool" if rank <= size else "outside the pool"
    return Request(
        at_ms=req.ts_ms, policy_version=req.policy_version, max_steps=req.max_steps,
        batch=batch[0] if batch else None,
        batch_tasks=len(index.batch_groups[batch]) if batch else 1, drawn=drawn,
        pool_rank=rank, live_tasks=live, pool_size=size,
        ema=before.ema_pass_rate if known and before else None,
        weight=before.weight if known and before else None,
        groups_counted=before.attempts if before else 0,
    )  # fmt: skip


def _turn(step: RolloutStep) -> Turn:
    refs = {"screenshot": step.observation_ref, "a11y": step.a11y_ref,
            "text": step.observation_text_ref}  # fmt: skip
    seen = [kind for kind, ref in refs.items() if ref]
    return Turn(
        step=step.step, started_ms=step.ts_ms - step.latency_ms, at_ms=step.ts_ms,
        latency_ms=step.latency_ms, policy_version=step.policy_version, observation=seen,
        screenshot=step.observation_ref, screenshot_size=list(step.observation_size),
        action=step.action, action_text=action_text(step.action, step.action_error),
        action_error=step.action_error, response_text=step.response_text,
        tokens=len(step.response_ids), prompt_tokens=step.prompt_tokens,
        finish_reason=step.finish_reason, timings_ms=dict(step.timings_ms),
        worker_id=step.worker_id,
    )  # fmt: skip


def _completion(index: LogIndex, c: TrajectoryComplete) -> Completion:
    others = sorted(index.attempts[_request_of(c.trajectory_id)] - {c.trajectory_id})
    retries = []
    for tid in others:
        other = index.completes.get(tid)
        steps = index.steps.get(tid, {})
        retries.append(Attempt(
            trajectory_id=tid,
            attempt=other.attempt if other else next((s.attempt for s in steps.values()), 0),
            status=other.status if other else "unfinished",
            error=other.error if other else None,
            at_ms=other.ts_ms if other else None,
        ))  # fmt: skip
    return Completion(
        at_ms=c.ts_ms, status=c.status, num_steps=c.num_steps, max_steps=c.max_steps,
        seconds=c.seconds, error=c.error, answer=c.answer, artifacts=dict(c.artifacts),
        policy_version=c.policy_version, policy_version_last=c.policy_version_last,
        attempt=c.attempt, worker_id=c.worker_id,
        retries=sorted(retries, key=lambda a: a.attempt),
    )  # fmt: skip


def _segments(facts: dict[int, SegmentFact]) -> Segments | None:
    if not facts:
        return None
    rows = [facts[i] for i in sorted(facts)]
    return Segments(
        first_ms=min(f.ts_ms for f in rows), at_ms=max(f.ts_ms for f in rows), count=len(rows),
        expected=rows[0].num_segments, mode=rows[0].mode, tokens=sum(f.tokens for f in rows),
        trained_tokens=sum(f.trained_tokens for f in rows), images=sum(f.images for f in rows),
        rows=[SegmentRow(f.segment_index, f.tokens, f.images, f.trained_tokens,
                         f.policy_version) for f in rows],
    )  # fmt: skip


def _training(update: PolicyUpdate, trajectory_id: str) -> Training:
    m = update.metrics
    checkpoint_ms = 1000 * float(m.get("checkpoint_s", 0.0))
    step_ms = 1000 * float(m.get("step_time_s", 0.0))
    return Training(
        version=update.policy_version, step_started_ms=update.ts_ms - step_ms,
        trained_ms=update.ts_ms - checkpoint_ms, announced_ms=update.ts_ms,
        advantage=update.advantages.get(trajectory_id), groups=int(m.get("groups", 0)),
        rollouts=int(m.get("rollouts", 0)), loss=m.get("loss"), step_time_s=m.get("step_time_s"),
        checkpoint_uri=update.checkpoint_uri,
    )  # fmt: skip


def _latest_attempt(index: LogIndex, request_id: str) -> str | None:
    """The trajectory a request ended with: the rewarded one, else the newest attempt."""
    tids = index.attempts.get(request_id, set())
    if not tids:
        return None

    def rank(tid: str) -> tuple[bool, int, int]:
        c = index.completes.get(tid)
        steps = index.steps.get(tid, {})
        attempt = c.attempt if c else next((s.attempt for s in steps.values()), 0)
        last = c.ts_ms if c else max((s.ts_ms for s in steps.values()), default=0)
        return (bool(index.rewards.get(tid)), attempt, last)

    return max(sorted(tids), key=rank)


def _group(index: LogIndex, group_id: str, size: int, update: PolicyUpdate | None) -> list[Member]:
    members = []
    for i in range(size):
        tid = _latest_attempt(index, f"{group_id}/{i}")
        if tid is None:
            members.append(Member("", i, "not started", None, None, None, 0, None, 0))
            continue
        c = index.completes.get(tid)
        rewards = index.rewards.get(tid, [])
        steps = index.steps.get(tid, {})
        version = c.policy_version if c else (steps[min(steps)].policy_version if steps else None)
        members.append(Member(
            trajectory_id=tid, sample_index=i, status=c.status if c else "unfinished",
            score=rewards[0].score if rewards else None,
            scored=rewards[0].scored if rewards else None,
            advantage=update.advantages.get(tid) if update else None,
            num_steps=c.num_steps if c else len(steps), policy_version=version,
            attempts=len(index.attempts.get(f"{group_id}/{i}", ())),
        ))  # fmt: skip
    return members


def _gap(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else later - earlier


def _gaps(t: Timeline) -> dict[str, float | None]:
    first_turn = t.turns[0].started_ms if t.turns else None
    last_turn = t.turns[-1].at_ms if t.turns else None
    complete = t.completion.at_ms if t.completion else None
    training = t.training
    return {
        "request_to_first_turn": _gap(first_turn, t.request.at_ms if t.request else None),
        "last_turn_to_complete": _gap(complete, last_turn),
        "complete_to_reward": _gap(t.rewards[0].at_ms if t.rewards else None, complete),
        "complete_to_segments": _gap(t.segments.at_ms if t.segments else None, complete),
        "segments_to_trained": _gap(
            training.trained_ms if training else None, t.segments.at_ms if t.segments else None
        ),
        "trained_to_announced": _gap(
            training.announced_ms if training else None, training.trained_ms if training else None
        ),
    }


def build_timeline(index: LogIndex, trajectory_id: str) -> Timeline | None:
    """The timeline of one trajectory, or None when the log has no record of it."""
    steps = index.steps.get(trajectory_id, {})
    complete = index.completes.get(trajectory_id)
    rewards = index.rewards.get(trajectory_id, [])
    facts = index.segments.get(trajectory_id, {})
    if not (steps or complete or rewards or facts):
        return None
    first = steps[min(steps)] if steps else None
    request_id = (complete.request_id if complete else "") or (first.request_id if first else "")
    request_id = request_id or _request_of(trajectory_id)
    group_id = (complete.group_id if complete else "") or (first.group_id if first else "")
    group_id = group_id or request_id.rpartition("/")[0]
    sample = complete.sample_index if complete else int(request_id.rpartition("/")[2] or 0)
    req = index.requests.get((group_id, sample))
    task_id = (complete.task_id if complete else "") or (first.task_id if first else "")
    task_id = task_id or (req.task_id if req else "")
    size = complete.group_size if complete else (req.group_size if req else 1)
    update = index.trained_by.get(group_id)
    # Its group's step trained this trajectory if it names it, or (a step that names no
    # trajectory: SFT, older trainers) if it is the segmented final attempt at its request.
    trained = update is not None and (
        trajectory_id in update.advantages
        if update.advantages
        else bool(facts) and _latest_attempt(index, request_id) == trajectory_id
    )
    folded = index.stats_folding(task_id, group_id)
    timeline = Timeline(
        trajectory_id=trajectory_id, request_id=request_id, group_id=group_id, task_id=task_id,
        sample_index=sample, group_size=size,
        attempt=complete.attempt if complete else (first.attempt if first else 0),
        run_id=index.run_id, instruction=first.instruction if first else "",
        request=_request(index, req) if req else None,
        turns=[_turn(steps[i]) for i in sorted(steps)],
        completion=_completion(index, complete) if complete else None,
        rewards=[Score(w.ts_ms, w.score, w.judge_version, w.reason, w.metric_score, w.scored,
                       w.status) for w in rewards],
        segments=_segments(facts),
        training=_training(update, trajectory_id) if update and trained else None,
        task_after=TaskAfter(folded.ts_ms, folded.ema_pass_rate, folded.weight, folded.attempts,
                             folded.state) if folded else None,
        group=_group(index, group_id, size, update),
        gaps={},
    )  # fmt: skip
    timeline.gaps.update(_gaps(timeline))
    return timeline


def build_timelines(index: LogIndex) -> list[Timeline]:
    """The timeline of every trajectory on the log, oldest first."""
    out = [build_timeline(index, tid) for tid in index.trajectory_ids()]
    return [t for t in out if t is not None]


def resolve_trajectory(index: LogIndex, name: str) -> list[str]:
    """Trajectory ids `name` names: itself, a request's final attempt, or a unique prefix."""
    known = set(index.attempts.get(_request_of(name), set()))
    if name in known:
        return [name]
    if (latest := _latest_attempt(index, name)) is not None:
        return [latest]
    every = sorted({t for tids in index.attempts.values() for t in tids})
    return [t for t in every if t.startswith(name)]


def group_named(name: str) -> str | None:
    """The group a trajectory or request id names (None for anything else: read every group)."""
    if "/" not in name:
        return None
    return name.split("@", 1)[0].rpartition("/")[0] or None


def timeline_dict(timeline: Timeline) -> dict[str, Any]:
    """A timeline as JSON-ready data: its fields, and its stages in the order they happened."""
    stages = [{"stage": name, "at_ms": at} for name, at in timeline.stages()]
    return {**asdict(timeline), "stages": stages}
