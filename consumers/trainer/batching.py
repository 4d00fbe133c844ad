"""From `segment-ready` and `reward` records to GRPO groups, samples and micro-batches: pure.

The join (`GroupBook`): segments and rewards are collected per group and trajectory.

- Only rewards of the configured judge version count; others are ignored.
- A request (`request_id`, else `<group>/<sample index>`) takes its first trajectory: the
  one whose reward was written first (event time, then trajectory id), so the choice does
  not depend on which partition happened to be read first. Another trajectory for the
  same request (a redelivered request played again) is ignored.
- A group is complete when all `group_size` requests have their reward and every scored
  trajectory has all its segments (`num_segments` of them, indices 0..n−1). An unscored
  trajectory (an environment failure) needs no segments: it leaves the group.
- Complete groups wait in completion order; records of a group finished (trained, or
  closed with nothing to train) are ignored when they arrive late.
- A record that can never fit its group is refused (ValueError: the trainer dead-letters
  it): its group size differs from its group's, or its group expired before it came.
- An incomplete group idle too long expires (`expire`): it is finished untrained and the
  caller reports every record it held (`GroupState.records`) with `GroupState.missing()`.
- Every record of a group is held until the group is finished and the result is safe
  (checkpoint written, policy update acknowledged): `low_watermark` reports the oldest.

`plan_group` turns a complete group into samples: advantages over the scored rollouts
(`grpo.group_advantages`), staleness (drop before normalising, or down-weight), SFT's
threshold. `pack_micro_batches` packs samples into micro-batches under a padded-token
budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from consumers.trainer.backends.base import MicroBatch, Sample
from consumers.trainer.grpo import group_advantages
from topics.events import Reward, SegmentReady

__all__ = [
    "SegmentData",
    "RewardData",
    "TrajectoryState",
    "GroupState",
    "GroupBook",
    "PlanConfig",
    "GroupPlan",
    "plan_group",
    "pack_micro_batches",
    "request_key",
    "summarize",
    "TP",
]

TP = Hashable  # a (topic, partition) pair: aiokafka's TopicPartition or a plain tuple
_EXPIRED_MEMORY = 10_000  # expired groups remembered, to refuse their stragglers


def request_key(group_id: str, request_id: str, sample_index: int) -> str:
    """The request a trajectory answers: its request id, else `<group>/<sample index>`."""
    return request_id or f"{group_id}/{sample_index}"


@dataclass(frozen=True, eq=False)
class SegmentData:
    """A compact copy of a SegmentReady (numpy arrays instead of Python lists)."""

    trajectory_id: str
    index: int
    num_segments: int
    ids: np.ndarray  # int32
    mask: np.ndarray  # bool
    logprobs: np.ndarray  # float32
    image_refs: tuple[str, ...]
    image_sizes: tuple[tuple[int, int], ...]
    temperature: float
    top_p: float
    policy_version: int
    sampled: bool = True  # False: scripted responses without logprobs (SFT only)
    tp: TP = None
    offset: int = -1

    @classmethod
    def from_event(cls, event: SegmentReady, tp: TP = None, offset: int = -1) -> SegmentData:
        """Copy a segment event; raise ValueError when its fields do not line up."""
        n = len(event.input_ids)
        if len(event.loss_mask) != n or len(event.logprobs) != n:
            raise ValueError(
                f"segment {event.dedup_id()}: {n} ids, {len(event.loss_mask)} mask entries, "
                f"{len(event.logprobs)} logprobs"
            )
        if event.loss_mask and event.loss_mask[0]:
            raise ValueError(f"segment {event.dedup_id()}: position 0 cannot be trained")
        if len(event.image_sizes) != len(event.image_refs):
            raise ValueError(
                f"segment {event.dedup_id()}: {len(event.image_refs)} images but "
                f"{len(event.image_sizes)} sizes"
            )
        if not 0 <= event.segment_index < max(event.num_segments, 1):
            raise ValueError(
                f"segment {event.dedup_id()}: index {event.segment_index} of {event.num_segments}"
            )
        return cls(
            trajectory_id=event.trajectory_id,
            index=event.segment_index,
            num_segments=event.num_segments,
            ids=np.asarray(event.input_ids, dtype=np.int32),
            mask=np.asarray(event.loss_mask, dtype=bool),
            logprobs=np.asarray(event.logprobs, dtype=np.float32),
            image_refs=tuple(event.image_refs),
            image_sizes=tuple((int(w), int(h)) for w, h in event.image_sizes),
            temperature=float(event.temperature),
            top_p=float(event.top_p),
            policy_version=int(event.policy_version),
            sampled=bool(event.sampled),
            tp=tp,
            offset=offset,
        )


@dataclass(frozen=True)
class RewardData:
    """The part of a Reward the trainer uses."""

    trajectory_id: str
    request: str
    score: float
    scored: bool
    policy_version: int
    ts_ms: int  # when the judge wrote it: the first reward of a request wins
    tp: TP = None
    offset: int = -1


@dataclass
class TrajectoryState:
    """What has arrived of one trajectory."""

    trajectory_id: str
    segments: dict[int, SegmentData] = field(default_factory=dict)
    num_segments: int | None = None
    reward: RewardData | None = None
    unusable: bool = False  # its screenshots are missing: treated as an environment failure

    def has_all_segments(self) -> bool:
        """Whether every segment 0..num_segments−1 has arrived."""
        return self.num_segments is not None and len(self.segments) == self.num_segments

    def complete(self) -> bool:
        """Rewarded, and (if scored) with all its segments."""
        if self.reward is None:
            return False
        return not self.reward.scored or self.has_all_segments()

    def sampled(self) -> bool:
        """Whether every segment holds sampled responses with their logprobs."""
        return all(s.sampled for s in self.segments.values())

    def policy_version(self) -> int:
        """The oldest policy version that generated any of it."""
        versions = [s.policy_version for s in self.segments.values()]
        if self.reward is not None:
            versions.append(self.reward.policy_version)
        return min(versions) if versions else 0


@dataclass
class GroupState:
    """One GRPO group being collected."""

    group_id: str
    group_size: int
    task_id: str = ""
    trajectories: dict[str, TrajectoryState] = field(default_factory=dict)
    chosen: dict[str, str] = field(default_factory=dict)  # request -> trajectory id
    first_offset: dict[TP, int] = field(default_factory=dict)  # oldest held record per tp
    last_offset: dict[TP, int] = field(default_factory=dict)  # newest record read per tp
    last_seen: float = 0.0  # when this process last read a record of it (its clock)

    def complete(self) -> bool:
        """All requests rewarded, every scored chosen trajectory with all its segments."""
        if len(self.chosen) < self.group_size:
            return False
        return all(self.trajectories[t].complete() for t in self.chosen.values())

    def members(self) -> list[TrajectoryState]:
        """The chosen trajectory of each request, in request order."""
        return [self.trajectories[self.chosen[r]] for r in sorted(self.chosen)]

    def missing(self) -> str:
        """What keeps the group from completing, in words."""
        rewarded = len(self.chosen)
        cut_short = sum(
            1
            for t in self.chosen.values()
            if self.trajectories[t].reward is not None and not self.trajectories[t].complete()
        )
        parts = []
        if rewarded < self.group_size:
            parts.append(f"{self.group_size - rewarded} of {self.group_size} rewards never came")
        if cut_short:
            parts.append(f"{cut_short} scored trajectories lack segments")
        return "; ".join(parts) or "nothing"

    def records(self) -> list[tuple[TP, int, str]]:
        """(partition, offset, trajectory id) of every record held for this group."""
        out = []
        for traj in self.trajectories.values():
            out += [(s.tp, s.offset, traj.trajectory_id) for s in traj.segments.values()]
            if traj.reward is not None:
                out.append((traj.reward.tp, traj.reward.offset, traj.trajectory_id))
        return sorted(out, key=lambda r: (str(r[0]), r[1]))

    def duplicates(self) -> int:
        """Trajectories read for this group that no request chose."""
        chosen = set(self.chosen.values())
        return sum(1 for t in self.trajectories if t not in chosen)

    def _note(self, tp: TP, offset: int, now: float) -> None:
        self.first_offset[tp] = min(self.first_offset.get(tp, offset), offset)
        self.last_offset[tp] = max(self.last_offset.get(tp, offset), offset)
        self.last_seen = now


class GroupBook:
    """The join of segments and rewards into groups; see the module docstring."""

    def __init__(self, judge_version: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.judge_version = judge_version
        self.clock = clock  # seconds; idle groups expire by it
        self.pending: dict[str, GroupState] = {}
        self.ready: list[str] = []  # complete pending groups, in completion order
        self.held: dict[str, GroupState] = {}  # finished, records held until released
        self.finished: dict[str, dict[TP, int]] = {}  # group -> newest offset read per tp
        # Groups this process expired, newest last (bounded): group -> why. Kept apart from
        # `finished` (pruned by position) so a straggler hours later is still recognised.
        self.expired: dict[str, str] = {}
        self.floors: dict[TP, int] = {}  # below these offsets everything was finished
        self.next_offset: dict[TP, int] = {}
        self.counters: dict[str, int] = {}
        self.tokens_held = 0  # token ids of held segments (a memory gauge)

    def count(self, name: str, n: int = 1) -> None:
        """Add to a counter."""
        self.counters[name] = self.counters.get(name, 0) + n

    # -- intake ---------------------------------------------------------------------------
    def _admit(self, group_id: str, tp: TP, offset: int) -> bool:
        """Note a record's position; False when it must be ignored (finished before)."""
        self.next_offset[tp] = max(self.next_offset.get(tp, 0), offset + 1)
        if offset < self.floors.get(tp, -1):
            self.count("records_below_floor")
            return False
        if group_id in self.finished:
            last = self.finished[group_id]
            last[tp] = max(last.get(tp, offset), offset)
        if group_id in self.expired:
            self.count("records_after_expiry")
            raise ValueError(
                f"group {group_id} expired before this record came ({self.expired[group_id]})"
            )
        if group_id in self.finished:
            self.count("records_late")
            return False
        return True

    def _group(self, group_id: str, group_size: int, task_id: str) -> GroupState:
        group = self.pending.get(group_id)
        if group is None:
            group = self.pending[group_id] = GroupState(group_id, max(1, group_size), task_id)
        elif group.group_size != group_size:  # one request wrote both: they cannot disagree
            raise ValueError(
                f"group {group_id} has {group.group_size} members (its first record says so), "
                f"this record says {group_size}"
            )
        return group

    def add_segment(
        self,
        event: SegmentReady,
        tp: TP = None,
        offset: int = -1,
        check: Callable[[SegmentReady], None] | None = None,
    ) -> str:
        """Take a segment; return "held", "late" or "duplicate".

        Raises ValueError for a malformed segment (`check` may add its own refusals).
        """
        if not self._admit(event.group_id, tp, offset):
            return "late"
        if not event.group_id:
            raise ValueError(f"segment {event.dedup_id()} has no group id")
        segment = SegmentData.from_event(event, tp, offset)
        if check is not None:
            check(event)
        group = self._group(event.group_id, event.group_size, event.task_id)
        group._note(tp, offset, self.clock())
        traj = group.trajectories.setdefault(
            event.trajectory_id, TrajectoryState(event.trajectory_id)
        )
        if segment.index in traj.segments:
            self.count("segments_duplicate")
            return "duplicate"
        traj.segments[segment.index] = segment
        traj.num_segments = traj.num_segments or segment.num_segments
        self.tokens_held += len(segment.ids)
        self.count("segments_read")
        self._check(group)
        return "held"

    def add_reward(self, event: Reward, tp: TP = None, offset: int = -1) -> str:
        """Take a reward; return "held", "other_judge", "late" or "duplicate"."""
        if event.judge_version != self.judge_version:
            self.next_offset[tp] = max(self.next_offset.get(tp, 0), offset + 1)
            self.count("rewards_other_judge")
            return "other_judge"
        if not self._admit(event.group_id, tp, offset):
            return "late"
        group = self._group(event.group_id, event.group_size, event.task_id)
        group._note(tp, offset, self.clock())
        traj = group.trajectories.setdefault(
            event.trajectory_id, TrajectoryState(event.trajectory_id)
        )
        if traj.reward is not None:
            self.count("rewards_duplicate")
            return "duplicate"
        request = request_key(event.group_id, event.request_id, event.sample_index)
        traj.reward = RewardData(
            event.trajectory_id, request, float(event.score), bool(event.scored),
            int(event.policy_version), int(event.ts_ms), tp, offset,
        )  # fmt: skip
        current = group.chosen.get(request)
        if current is not None:
            self.count("trajectories_duplicate")
        if current is None or _earlier(traj.reward, group.trajectories[current].reward):
            group.chosen[request] = event.trajectory_id
        self.count("rewards_read")
        self._check(group)
        return "held"

    def _check(self, group: GroupState) -> None:
        complete = group.complete()
        if complete and group.group_id not in self.ready:
            self.ready.append(group.group_id)
        elif not complete and group.group_id in self.ready:  # an earlier trajectory took over
            self.ready.remove(group.group_id)

    # -- finishing groups -----------------------------------------------------------------
    def take(self, group_id: str) -> GroupState:
        """Move a pending group to the held set (finished; its records stay held)."""
        group = self.pending.pop(group_id)
        if group_id in self.ready:
            self.ready.remove(group_id)
        self.held[group_id] = group
        self.finished[group_id] = dict(group.last_offset)
        return group

    def give_back(self, groups: Iterable[GroupState]) -> None:
        """Return held groups to the front of the ready queue (their step failed)."""
        back = []
        for group in groups:
            self.held.pop(group.group_id, None)
            self.finished.pop(group.group_id, None)
            self.pending[group.group_id] = group
            if group.complete():
                back.append(group.group_id)
        self.ready[:0] = [g for g in back if g not in self.ready]

    def release(self, group_ids: Iterable[str]) -> None:
        """Stop holding finished groups' records (their result is safe)."""
        for group_id in group_ids:
            group = self.held.pop(group_id, None)
            if group is not None:
                self.tokens_held -= _tokens(group)

    def expire(self, timeout_s: float) -> list[GroupState]:
        """Finish incomplete groups that received nothing for `timeout_s`; their records stay
        held until the caller has reported them and calls `release`.

        Idle time is this process's own reading time, not the events' timestamps: a trainer
        catching up on an old backlog must not expire groups whose newer records it has not
        reached yet (after a restart the wait simply starts again). A record of an expired
        group that comes later is refused (see `_admit`).
        """
        now = self.clock()
        gone = []
        for group_id, group in list(self.pending.items()):
            if group_id not in self.ready and now - group.last_seen > timeout_s:
                self.expired[group_id] = (
                    f"incomplete after {timeout_s:g} s without a record: {group.missing()}"
                )
                gone.append(self.take(group_id))
        while len(self.expired) > _EXPIRED_MEMORY:
            del self.expired[next(iter(self.expired))]
        return gone

    # -- positions ------------------------------------------------------------------------
    def low_watermark(self, tp: TP) -> int | None:
        """The oldest offset of `tp` still held (pending or finished-but-unsafe), if any."""
        held = [
            g.first_offset[tp]
            for groups in (self.pending, self.held)
            for g in groups.values()
            if tp in g.first_offset
        ]
        return min(held) if held else None

    def restart_point(self) -> dict[str, dict]:
        """Floors and finished groups a restart needs to skip exactly what is finished.

        Below a partition's floor every record belongs to a finished group (no pending group
        holds one); above it, the finished groups listed are those a re-read can meet.
        """
        floors: dict[TP, int] = dict(self.floors)
        floors.update(self.next_offset)
        for group in self.pending.values():
            for tp, offset in group.first_offset.items():
                floors[tp] = min(floors.get(tp, offset), offset)
        finished = {
            group_id: dict(last)
            for group_id, last in self.finished.items()
            if any(offset >= floors.get(tp, 0) for tp, offset in last.items())
        }
        return {"floors": floors, "finished": finished}

    def prune(self) -> None:
        """Forget finished groups no re-read can meet any more (keeps memory bounded)."""
        keep = self.restart_point()["finished"]
        for group_id in list(self.finished):
            if group_id not in keep and group_id not in self.held:
                del self.finished[group_id]

    def restore(self, floors: dict[TP, int], finished: dict[str, dict[TP, int]]) -> None:
        """Start from a checkpoint's restart point."""
        self.floors = dict(floors)
        self.finished.update({g: dict(last) for g, last in finished.items()})

    def forget_partitions(self, tps: set[TP]) -> None:
        """Drop the records of partitions this process no longer owns (re-read on return)."""
        for group_id, group in list(self.pending.items()):
            if not any(tp in tps for tp in group.first_offset):
                continue
            for traj in list(group.trajectories.values()):
                traj.segments = {i: s for i, s in traj.segments.items() if s.tp not in tps}
                if traj.reward is not None and traj.reward.tp in tps:
                    traj.reward = None
                if not traj.segments and traj.reward is None:
                    del group.trajectories[traj.trajectory_id]
                elif not traj.segments:
                    traj.num_segments = None
            group.chosen = {}
            for traj in group.trajectories.values():
                if traj.reward is None:
                    continue
                current = group.chosen.get(traj.reward.request)
                if current is None or _earlier(traj.reward, group.trajectories[current].reward):
                    group.chosen[traj.reward.request] = traj.trajectory_id
            for tp in tps:
                group.first_offset.pop(tp, None)
                group.last_offset.pop(tp, None)
            if not group.trajectories:
                del self.pending[group_id]
            if group_id in self.ready and (group_id not in self.pending or not group.complete()):
                self.ready.remove(group_id)
        for tp in tps:
            self.next_offset.pop(tp, None)
        self.tokens_held = sum(_tokens(g) for gs in (self.pending, self.held) for g in gs.values())


def _earlier(a: RewardData, b: RewardData) -> bool:
    return (a.ts_ms, a.trajectory_id) < (b.ts_ms, b.trajectory_id)


def _tokens(group: GroupState) -> int:
    return sum(len(s.ids) for t in group.trajectories.values() for s in t.segments.values())


@dataclass(frozen=True)
class PlanConfig:
    """How complete groups become samples."""

    objective: str = "grpo"  # "grpo" or "sft"
    max_lag: int | None = 4  # rollouts older than this many policy versions are stale
    staleness: str = "drop"  # "drop" (leave the group before normalising) or "downweight"
    stale_weight: float = 0.5  # downweight: weight = stale_weight ** (lag - max_lag)
    sft_threshold: float = 1.0  # sft: train trajectories whose reward is at least this
    adv_eps: float = 1e-6
    skip_equal_groups: bool = False  # grpo: leave all-equal groups out (DAPO's dynamic sampling)


@dataclass
class GroupPlan:
    """What one complete group contributes to a step, and why."""

    group_id: str
    samples: list[Sample] = field(default_factory=list)
    rollouts: int = 0  # chosen trajectories (one per request)
    env_failures: int = 0
    unsampled: int = 0  # grpo: scripted rollouts (no logprobs) leave the group
    stale_dropped: int = 0
    stale_downweighted: int = 0
    all_equal: bool = False
    advantages: list[float] = field(default_factory=list)  # one per trained rollout
    lags: list[int] = field(default_factory=list)
    below_threshold: int = 0  # sft: rollouts whose reward did not pass
    scores: list[float] = field(default_factory=list)  # the rewards of its judged rollouts


def _samples(traj: TrajectoryState, group_id: str, advantage: float, weight: float,
             sft: bool) -> list[Sample]:  # fmt: skip
    out = []
    for index in sorted(traj.segments):
        seg = traj.segments[index]
        if not seg.mask.any():
            continue
        out.append(
            Sample(
                ids=seg.ids,
                mask=seg.mask,
                old_logprobs=seg.logprobs,
                advantage=advantage,
                weight=weight,
                image_refs=seg.image_refs,
                image_sizes=seg.image_sizes,
                # SFT is cross-entropy on the raw distribution; GRPO recomputes the rollout's.
                temperature=1.0 if sft else seg.temperature,
                top_p=1.0 if sft else seg.top_p,
                trajectory_id=traj.trajectory_id,
                group_id=group_id,
            )  # fmt: skip
        )
    return out


def plan_group(group: GroupState, version: int, config: PlanConfig) -> GroupPlan:
    """Samples of a complete group for a step that updates policy `version`."""
    plan = GroupPlan(group.group_id)
    members = group.members()
    plan.rollouts = len(members)
    scores: list[float | None] = []
    weights: list[float] = []
    sft = config.objective == "sft"
    for traj in members:
        reward = traj.reward
        lag = max(0, version - traj.policy_version())
        weight = 1.0
        if reward is None or not reward.scored or traj.unusable:
            plan.env_failures += 1
            scores.append(None)
        elif not sft and not traj.sampled():
            plan.unsampled += 1  # no rollout logprobs: no importance ratio to take
            scores.append(None)
        elif not sft and config.max_lag is not None and lag > config.max_lag:
            if config.staleness == "drop":
                plan.stale_dropped += 1
                scores.append(None)
            else:
                plan.stale_downweighted += 1
                weight = config.stale_weight ** (lag - config.max_lag)
                scores.append(reward.score)
        else:
            scores.append(reward.score)
        weights.append(weight)
        if scores[-1] is not None:
            plan.lags.append(lag)
    plan.scores = [s for s in scores if s is not None]
    if sft:  # supervised data does not go stale: scripted episodes stay good examples
        for traj, score, weight in zip(members, scores, weights, strict=True):
            if score is None:
                continue
            if score < config.sft_threshold:
                plan.below_threshold += 1
                continue
            plan.samples += _samples(traj, group.group_id, 0.0, weight, sft=True)
        return plan
    result = group_advantages(scores, config.adv_eps)
    plan.all_equal = result.all_equal
    if result.kept == 0 or (result.all_equal and config.skip_equal_groups):
        return plan
    for traj, adv, weight in zip(members, result.advantages, weights, strict=True):
        if adv is None:
            continue
        plan.advantages.append(adv)
        plan.samples += _samples(traj, group.group_id, adv, weight, sft=False)
    return plan


def pack_micro_batches(
    samples: Sequence[Sample], max_tokens: int, max_rows: int
) -> list[MicroBatch]:
    """Pack samples into micro-batches of one temperature/top-p, rows × longest ≤ max_tokens.

    A sample longer than the budget goes alone. Sorting by length keeps padding small.
    """
    by_setting: dict[tuple[float, float], list[Sample]] = {}
    for s in samples:
        by_setting.setdefault((s.temperature, s.top_p), []).append(s)
    batches: list[MicroBatch] = []
    for (temperature, top_p), group in by_setting.items():
        current: list[Sample] = []
        for s in sorted(group, key=lambda s: len(s.ids)):
            longest = max([len(s.ids), *(len(c.ids) for c in current)])
            if current and (
                len(current) + 1 > max_rows or (len(current) + 1) * longest > max_tokens
            ):
                batches.append(MicroBatch(tuple(current), temperature, top_p))
                current = []
            current.append(s)
        if current:
            batches.append(MicroBatch(tuple(current), temperature, top_p))
    return batches


def summarize(values: Sequence[float], prefix: str) -> dict[str, float]:
    """Mean, std, min and max of some values under a prefix (empty: nothing)."""
    if not values:
        return {}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {f"{prefix}_mean": mean, f"{prefix}_std": std, f"{prefix}_min": min(values),
            f"{prefix}_max": max(values)}  # fmt: skip
