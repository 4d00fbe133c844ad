"""What the segmenter holds of one trajectory, and whether it can still be cut: pure.

A trajectory is cut once its completion and its steps 0..num_steps-1 are in. Until then its
records pin the segmenter's commit, so whatever can never be cut is recognised here and
released by the service (`consumers/segmenter/service.py`) with the reason:

- **impossible** records (`impossible`), released at once: a negative step number; a
  completion with a negative step count, more steps than its `max_steps`, a group of fewer
  than one rollout or a sample index outside its group;
- **contradictions** (`conflict`), released at once: a step numbered at or past its
  completion's step count, two different records for one step, two different completions;
- **steps missing from the log** (`gap_since`): the completion is in, steps it counts are
  not, and the log holds everything written up to the completion on the steps' partition
  (read past the completion's time, or to the partition's end); a short grace then
  releases it with the missing step numbers;
- **missing partners** (`idle_s`): nothing more of the trajectory for a bound of idle time.
  Idle is measured on two clocks and the lesser counts: the wall-clock time since its last
  record reached the segmenter, and the event time the stream has moved on since (the
  producer timestamps read on its partition of both topics, the slower topic's). The wall
  clock alone would release a completion read early while its steps still wait in a
  backlog behind it (after a restart the small completions race ahead of the steps); event
  time alone would release live trajectories when one producer's clock runs ahead.

Completions with status `error` are not checked against their steps: an episode the
desktop or engine ended early may count fewer steps than it logged, and trains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from aiokafka import TopicPartition

from runtime.bus import Record
from topics.events import RolloutStep, TrajectoryComplete

__all__ = ["HeldTrajectory", "impossible", "conflict", "same_event"]


@dataclass
class HeldTrajectory:
    """The records of one uncut trajectory, and when the last of them came."""

    request_id: str
    steps: dict[int, Record] = field(default_factory=dict)  # step number -> its record
    complete: Record | None = None
    last_seen: float = 0.0  # monotonic time its last record reached the segmenter
    last_ts_ms: int = 0  # its newest record's timestamp (the producer's clock); 0: unknown
    lowest: dict[TopicPartition, int] = field(default_factory=dict)  # oldest offset held
    # Monotonic time its steps were found short with nothing left to read before its
    # completion (None: not found so, or a record came since).
    gap_since: float | None = None

    def take(self, record: Record, now: float) -> None:
        """Hold a step or the completion."""
        event = record.event
        if isinstance(event, RolloutStep):
            self.steps[event.step] = record
        else:
            self.complete = record
        self.last_seen = now
        self.last_ts_ms = max(self.last_ts_ms, record.timestamp_ms)
        self.gap_since = None
        tp = record.tp
        self.lowest[tp] = min(self.lowest.get(tp, record.offset), record.offset)

    def records(self) -> list[Record]:
        """Every held record, the completion first."""
        held = [self.complete] if self.complete is not None else []
        return held + [self.steps[n] for n in sorted(self.steps)]

    def ready(self) -> bool:
        """True when the completion and all its steps are in (held steps never exceed it)."""
        return self.complete is not None and len(self.steps) == self.complete.event.num_steps

    def idle_s(self, now: float, stream_ms: int | None) -> float:
        """Seconds since its last record, the lesser of the wall clock and the stream's."""
        wall = now - self.last_seen
        if stream_ms is None or stream_ms <= 0 or self.last_ts_ms <= 0:
            return wall  # no event time to go by (timestamps missing, or one topic unread)
        return min(wall, (stream_ms - self.last_ts_ms) / 1000)

    def short(self) -> bool:
        """True when its completion counts steps and some of them are not held."""
        complete = self.complete
        return (
            complete is not None
            and _counts(complete.event)
            and len(self.steps) < complete.event.num_steps
        )

    def missing(self) -> str:
        """What it still waits for, in words."""
        held = _numbers(sorted(self.steps))
        if self.complete is None:
            return f"no completion; steps held: {held or 'none'}"
        n = self.complete.event.num_steps
        gone = [s for s in range(n) if s not in self.steps]
        return f"the completion says {n} steps; held: {held or 'none'}; missing: {_numbers(gone)}"


def impossible(event: RolloutStep | TrajectoryComplete) -> str | None:
    """Why this record can never be part of a trainable trajectory, or None."""
    if isinstance(event, RolloutStep):
        return f"step number {event.step} is negative" if event.step < 0 else None
    c = event
    if c.num_steps < 0:
        return f"the completion says {c.num_steps} steps"
    if c.max_steps > 0 and c.num_steps > c.max_steps:
        return f"the completion says {c.num_steps} steps, over its max_steps of {c.max_steps}"
    if c.group_size < 1:
        return f"group size {c.group_size}: a group holds at least one rollout"
    if not 0 <= c.sample_index < c.group_size:
        return f"sample index {c.sample_index} is outside its group of {c.group_size}"
    return None


def conflict(held: HeldTrajectory, record: Record) -> str | None:
    """Why `record` and what is held of its trajectory can never make one trajectory, or None."""
    event = record.event
    complete = held.complete
    if isinstance(event, RolloutStep):
        twin = held.steps.get(event.step)
        if twin is not None and not same_event(twin.event, event):
            return (f"two different records for step {event.step} "
                    f"({_where(twin)} and {_where(record)})")  # fmt: skip
        if complete is not None and _counts(complete.event) and event.step >= _n(complete):
            return (f"the completion ({_where(complete)}) says {_n(complete)} steps but step "
                    f"{event.step} ({_where(record)}) arrived")  # fmt: skip
        return None
    if complete is not None and not same_event(complete.event, event):
        return f"two different completions ({_where(complete)} and {_where(record)})"
    beyond = sorted(s for s in held.steps if s >= event.num_steps)
    if beyond and _counts(event):
        return (f"the completion ({_where(record)}) says {event.num_steps} steps but steps "
                f"{_numbers(beyond)} arrived")  # fmt: skip
    return None


def same_event(a: object, b: object) -> bool:
    """True when two events differ at most in their envelope (a re-send, not a rewrite)."""
    if type(a) is not type(b):
        return False
    blank = {"event_id": "", "producer_id": "", "ts_ms": 0}
    return msgspec.structs.replace(a, **blank) == msgspec.structs.replace(b, **blank)


def _counts(complete: TrajectoryComplete) -> bool:
    # An environment failure may count fewer steps than it logged (the desktop died mid-turn).
    return complete.status != "error"


def _n(record: Record) -> int:
    return record.event.num_steps


def _where(record: Record) -> str:
    return f"{record.topic}[{record.partition}]@{record.offset}"


def _numbers(ns: list[int]) -> str:
    """Step numbers in words, runs shortened: [0, 1, 2, 5] -> '0-2, 5'."""
    runs: list[list[int]] = []
    for n in ns:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
