"""Recorded trajectories replayed as new ones: the fleet's pure part (no I/O).

A `Recording` is one finished trajectory of an archived run: its `rollout-step` events in
turn order and its `trajectory-complete`. Replaying it for a new rollout request gives the
same turns (response tokens and logprobs, actions, screenshot and text references, the
judge's artifacts) under the request's identity: a new trajectory id, the request's task,
group, sample index and policy version, fresh event ids and timestamps, and a producer id
that names the fleet, so nobody mistakes a replayed event for a played one. Everything a
downstream service reads to do its work is the recording's own, so the judge scores it and
the segmenter cuts it exactly as it did the original.

`Recordings` picks, for each request, the next recording of its task in turn (round robin),
and `ThinkTime` draws the pause before each turn: a real environment's turn takes the
policy's generation and the desktop's action (the paper: 50 turns in ~540 s, ~10.8 s
each), divided by a time compression so that a few hundred simulated environments can
offer the load of thousands.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from topics.events import RolloutRequest, RolloutStep, TrajectoryComplete

__all__ = [
    "Recording",
    "Recordings",
    "ThinkTime",
    "assemble",
    "new_trajectory_id",
    "replay_step",
    "replay_complete",
    "PAPER_TURN_S",
]

# The paper's pace: a 50-turn rollout takes about 540 s.
PAPER_TURN_S = 540.0 / 50


@dataclass(frozen=True)
class Recording:
    """One finished trajectory: its steps in turn order and its completion."""

    steps: tuple[RolloutStep, ...]
    complete: TrajectoryComplete

    @property
    def task_id(self) -> str:
        """The task the trajectory played."""
        return self.complete.task_id


def assemble(
    steps: Iterable[RolloutStep], completions: Iterable[TrajectoryComplete]
) -> tuple[list[Recording], dict[str, int]]:
    """Pair steps with their completions; return the whole recordings and why others were left.

    A trajectory is whole when it completed with a status other than `error` and every one of
    its `num_steps` turns is present exactly once (a superseded attempt never completes).
    """
    by_trajectory: dict[str, dict[int, RolloutStep]] = {}
    for step in steps:
        by_trajectory.setdefault(step.trajectory_id, {}).setdefault(step.step, step)
    whole: list[Recording] = []
    left = {"error": 0, "steps_missing": 0, "no_steps": 0}
    for complete in completions:
        if complete.status == "error":
            left["error"] += 1
            continue
        turns = by_trajectory.get(complete.trajectory_id, {})
        if complete.num_steps == 0:
            left["no_steps"] += 1
            continue
        if any(i not in turns for i in range(complete.num_steps)):
            left["steps_missing"] += 1
            continue
        ordered = tuple(turns[i] for i in range(complete.num_steps))
        whole.append(Recording(ordered, complete))
    whole.sort(key=lambda r: (r.task_id, r.complete.trajectory_id))
    return whole, left


class Recordings:
    """Recordings by task, handed out in turn for each request of that task."""

    def __init__(self, recordings: Iterable[Recording]) -> None:
        self._by_task: dict[str, list[Recording]] = {}
        for recording in recordings:
            self._by_task.setdefault(recording.task_id, []).append(recording)
        self._next: dict[str, int] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_task.values())

    def tasks(self) -> list[str]:
        """The task ids with at least one recording."""
        return sorted(self._by_task)

    def steps_per_trajectory(self) -> float:
        """The mean number of turns of a recording."""
        total = [len(r.steps) for v in self._by_task.values() for r in v]
        return sum(total) / len(total) if total else 0.0

    def pick(self, task_id: str) -> Recording | None:
        """Return the next recording of `task_id`, or None if the task has none."""
        recordings = self._by_task.get(task_id)
        if not recordings:
            return None
        i = self._next.get(task_id, 0)
        self._next[task_id] = (i + 1) % len(recordings)
        return recordings[i]


@dataclass(frozen=True)
class ThinkTime:
    """The pause before each turn: `turn_s` seconds ± `jitter` (a share), over `compression`."""

    turn_s: float = PAPER_TURN_S
    jitter: float = 0.3
    compression: float = 1.0

    def __post_init__(self) -> None:
        if self.turn_s < 0 or not 0 <= self.jitter < 1 or self.compression <= 0:
            raise ValueError(
                f"think time needs turn_s >= 0, 0 <= jitter < 1 and compression > 0, not "
                f"{self.turn_s}, {self.jitter}, {self.compression}"
            )

    @property
    def mean_s(self) -> float:
        """The mean pause in seconds after compression."""
        return self.turn_s / self.compression

    def draw(self, rng: random.Random) -> float:
        """Return one pause, uniform in mean × [1 − jitter, 1 + jitter]."""
        return self.mean_s * rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)

    def offered_steps_per_s(self, environments: int) -> float:
        """The turns per second `environments` busy environments write at this pace."""
        return environments / self.mean_s if self.mean_s > 0 else float("inf")


def new_trajectory_id(request: RolloutRequest) -> str:
    """Return a fresh trajectory id for a request (as a rollout worker's first attempt)."""
    return f"{request.trajectory()}@0{uuid.uuid4().hex[:7]}"


def replay_step(
    step: RolloutStep, request: RolloutRequest, trajectory_id: str, worker_id: str, producer: str
) -> RolloutStep:
    """Return a recorded turn as a turn of `trajectory_id`, played for `request`, written now."""
    return msgspec.structs.replace(
        step, trajectory_id=trajectory_id, task_id=request.task_id, group_id=request.group_id,
        request_id=request.trajectory(), attempt=0, policy_version=request.policy_version,
        worker_id=worker_id, **_fresh_envelope(producer),
    )  # fmt: skip


def replay_complete(
    recording: Recording,
    request: RolloutRequest,
    trajectory_id: str,
    worker_id: str,
    producer: str,
    seconds: float,
) -> TrajectoryComplete:
    """Return a recording's completion as the end of `trajectory_id`, played for `request`."""
    return msgspec.structs.replace(
        recording.complete, trajectory_id=trajectory_id, task_id=request.task_id,
        group_id=request.group_id, group_size=request.group_size,
        sample_index=request.sample_index, request_id=request.trajectory(), attempt=0,
        max_steps=request.max_steps, policy_version=request.policy_version,
        policy_version_last=request.policy_version, seconds=seconds, worker_id=worker_id,
        **_fresh_envelope(producer),
    )  # fmt: skip


def _fresh_envelope(producer: str) -> dict[str, object]:
    # A new event id and time: the replayed event is a new event, not a copy of the old one.
    return {"event_id": uuid.uuid4().hex, "ts_ms": time.time_ns() // 1_000_000,
            "producer_id": producer}  # fmt: skip
