"""The deadline of a call on the trainer's process group, from the calls of its kind so far."""

from __future__ import annotations

import pytest

from consumers.trainer.rank_deadline import CallClock, RankDeadline
from runtime.errors import ConfigError


def test_a_call_is_judged_by_the_slowest_rate_of_its_kind_scaled_to_its_size() -> None:
    clock = CallClock(RankDeadline(factor=4.0, floor_s=10.0, unmeasured_s=100.0, warn_s=3.0))
    assert clock.verdict() is None  # nothing in flight
    assert clock.limits("step", 500) == (50.0, 100.0)  # not timed yet: late at half, ends at 100
    clock.rates["step"] = 0.002  # seconds per token: 1 s for 500 tokens
    assert clock.limits("step", 500) == (3.0, 10.0)  # late past max(warn, 2 x 1 s); floor 10 s
    assert clock.limits("step", 10_000) == (40.0, 80.0)  # a step 20 x longer: 20 s expected
    clock.start("step", 10_000)
    started = clock.call[2]
    on_time, late, over = (clock.verdict(started + t) for t in (30.0, 41.0, 81.0))
    assert not on_time.late and late.late and not late.expired and over.expired
    assert over.expected_s == pytest.approx(20.0) and over.kind == "step"
    clock.finish(succeeded=False)  # a failed (or stalled) call never raises the bar
    assert clock.rates["step"] == 0.002 and clock.call is None
    clock.start("save")
    clock.finish(succeeded=True)
    assert 0.0 <= clock.rates["save"] < 1.0


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_deadline_setting_is_a_positive_finite_number_of_seconds(bad: object) -> None:
    with pytest.raises(ConfigError, match="RankDeadline.floor_s"):
        RankDeadline(floor_s=bad)  # type: ignore[arg-type]
