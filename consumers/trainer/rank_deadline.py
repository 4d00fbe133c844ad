"""How long a call on the trainer's process group may take before the group is ended.

A rank that stops (SIGSTOP, a hung driver, a machine paused) leaves every other rank waiting
in a collective; gloo's own timeout is 30 minutes. Rank 0 therefore times every call it
drives by its kind (`use`, `load`, `step`, `save`, ...) and its size (a step's computed
tokens; 1 for the other kinds), and judges the one in flight against the slowest rate of
that kind so far, scaled to its size — a step twice as long is allowed twice the time:

    expected   slowest seconds per unit of the kind so far x the call's size
    late       elapsed > min(deadline, max(warn_s, 2 x expected))   warned every warn_s
    deadline   max(floor_s, factor x expected)                      the group is ended
    unmeasured a kind not timed yet (the first load, the first step): late at half of
               unmeasured_s, ended at unmeasured_s

Only calls that succeeded are timed, so a stall never raises the bar it is judged by. Pure
bookkeeping (no I/O, no threads): `consumers/trainer/ranks.py` watches a `CallClock`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from runtime.errors import ConfigError

__all__ = ["RankDeadline", "CallClock", "Verdict"]


@dataclass(frozen=True)
class RankDeadline:
    """When a call on the process group is late, and when the group is ended over it."""

    factor: float = 4.0  # deadline: this many times the call's expected time
    floor_s: float = 300.0  # the deadline is never shorter (a step's time varies)
    unmeasured_s: float = 1800.0  # deadline of a kind not timed yet (first load, first step)
    warn_s: float = 60.0  # a call is late no sooner than this; warnings repeat this often

    def __post_init__(self) -> None:
        for name in ("factor", "floor_s", "unmeasured_s", "warn_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"RankDeadline.{name} = {value!r}: a number of seconds")
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"RankDeadline.{name} = {value!r}: positive and finite")


@dataclass(frozen=True)
class Verdict:
    """Where the call in flight stands."""

    kind: str
    elapsed_s: float
    late_after_s: float
    deadline_s: float
    expected_s: float | None  # what the slowest rate so far gives its size (None: unmeasured)

    @property
    def late(self) -> bool:
        """Whether the call has run longer than its kind should."""
        return self.elapsed_s > self.late_after_s

    @property
    def expired(self) -> bool:
        """Whether the call has run past its deadline: the group is over."""
        return self.elapsed_s > self.deadline_s


@dataclass
class CallClock:
    """Times the calls rank 0 drives, by kind and size, and judges the one in flight."""

    deadline: RankDeadline = field(default_factory=RankDeadline)
    rates: dict[str, float] = field(default_factory=dict)  # kind -> slowest seconds per unit
    call: tuple[str, float, float] | None = None  # (kind, size, monotonic start) in flight

    def start(self, kind: str, size: float = 1.0) -> None:
        """A call of `kind` and `size` (units of work, > 0) was sent to the ranks."""
        self.call = (kind, max(float(size), 1e-9), time.monotonic())

    def finish(self, succeeded: bool) -> None:
        """The call in flight is over; a successful one is timed."""
        call, self.call = self.call, None
        if call is not None and succeeded:
            kind, size, started = call
            rate = (time.monotonic() - started) / size
            self.rates[kind] = max(self.rates.get(kind, 0.0), rate)

    def limits(self, kind: str, size: float = 1.0) -> tuple[float, float]:
        """(late after, deadline) in seconds for a call of `kind` and `size`."""
        rule = self.deadline
        rate = self.rates.get(kind)
        if rate is None:
            return rule.unmeasured_s / 2, rule.unmeasured_s
        expected = rate * size
        deadline = max(rule.floor_s, rule.factor * expected)
        return min(deadline, max(rule.warn_s, 2 * expected)), deadline

    def verdict(self, now: float | None = None) -> Verdict | None:
        """The call in flight judged now (None when no call is in flight)."""
        call = self.call
        if call is None:
            return None
        kind, size, started = call
        late_after, deadline = self.limits(kind, size)
        elapsed = (time.monotonic() if now is None else now) - started
        rate = self.rates.get(kind)
        expected = None if rate is None else rate * size
        return Verdict(kind, elapsed, late_after, deadline, expected)
