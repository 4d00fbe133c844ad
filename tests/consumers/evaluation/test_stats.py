"""Pass rates and Wilson intervals, overall, per family and for held-out families."""

from __future__ import annotations

import math

import pytest

from consumers.evaluation.stats import Outcome, summarize_outcomes, wilson_interval


def test_wilson_interval_matches_the_formula_and_stays_in_bounds() -> None:
    low, high = wilson_interval(30, 60)
    # p = 0.5, n = 60: centre 0.5, half-width z*sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n)
    z = 1.959963984540054
    half = z * math.sqrt(0.25 / 60 + z * z / (4 * 3600)) / (1 + z * z / 60)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert (
        wilson_interval(0, 50)[0] == pytest.approx(0.0, abs=1e-12)
        and 0.0 < wilson_interval(0, 50)[1] < 0.1
    )
    assert wilson_interval(50, 50)[1] == pytest.approx(1.0) and wilson_interval(50, 50)[0] > 0.9
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_summary_counts_passes_per_family_and_leaves_environment_failures_out() -> None:
    outcomes = [
        Outcome("a-1", "a", 1.0), Outcome("a-2", "a", 0.0), Outcome("a-3", "a", -0.2),
        Outcome("b-1", "b", 1.0), Outcome("b-2", "b", None, "error"), Outcome("c-1", "c", 1.0),
    ]  # fmt: skip
    summary = summarize_outcomes(outcomes, threshold=1.0, heldout_families=["c"])
    assert summary["n"] == 5 and summary["passed"] == 3 and summary["unscored"] == 1
    assert summary["pass_rate"] == 0.6
    low, high = summary["ci95"]
    assert low < 0.6 < high
    assert summary["families"]["a"]["pass_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert summary["families"]["b"] == {**summary["families"]["b"], "n": 1, "unscored": 1}
    assert summary["heldout_families"]["n"] == 1 and summary["heldout_families"]["passed"] == 1
    assert summary["seen_families"]["n"] == 4 and summary["seen_families"]["passed"] == 2
