"""Pass rates and Wilson intervals, overall, per family and for held-out families."""

from __future__ import annotations

import math

import pytest

from cli.evaluation.stats import (
    Outcome,
    cluster_interval,
    pass_at_k,
    summarize_outcomes,
    wilson_interval,
)


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


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # 1 − C(n−c, k)/C(n, k): 3 of 8 passed, k = 2 → 1 − C(5,2)/C(8,2) = 1 − 10/28
    assert pass_at_k(8, 3, 2) == pytest.approx(1 - 10 / 28)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 4, 5) == 1.0  # fewer failures than k: some sample always passes
    with pytest.raises(ValueError, match="pass@9"):
        pass_at_k(8, 3, 9)


def test_sampled_evaluation_reports_pass_at_k_and_a_task_level_interval() -> None:
    # Task a passes 4 of 4, b 1 of 4, c 0 of 4 (one of them unscored: 3 attempts).
    outcomes = [Outcome("a", "f", 1.0, sample=i) for i in range(4)]
    outcomes += [Outcome("b", "f", float(i == 2), sample=i) for i in range(4)]
    outcomes += [Outcome("c", "g", 0.0, sample=i) for i in range(3)]
    outcomes.append(Outcome("c", "g", None, "error", sample=3))
    summary = summarize_outcomes(outcomes, threshold=1.0)
    assert summary["n"] == 11 and summary["passed"] == 5 and summary["tasks"] == 3
    assert summary["pass_rate"] == pytest.approx(5 / 11, abs=1e-4)
    # k stops at the fewest samples a task has (c: 3 scored): 1, 2 and 3.
    at = summary["pass_at_k"]
    assert set(at) == {"1", "2", "3"}
    assert at["1"] == pytest.approx((1 + 1 / 4 + 0) / 3, abs=1e-4)
    assert at["3"] == pytest.approx((1 + (1 - math.comb(3, 3) / math.comb(4, 3)) + 0) / 3, abs=1e-4)
    assert at["1"] <= at["2"] <= at["3"]
    # The interval counts tasks, not attempts: wider than Wilson's over the 11 attempts.
    low, high = summary["ci95"]
    wl, wh = wilson_interval(5, 11)
    assert low < 5 / 11 < high and high - low > wh - wl
    assert summary["families"]["g"]["pass_at_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}


def test_cluster_interval_matches_the_ratio_estimators_variance() -> None:
    counts = [(4, 4), (1, 4), (0, 4)]
    p = 5 / 12
    var = sum((c - p * n) ** 2 for c, n in counts) / 12**2 * 3 / 2
    low, high = cluster_interval(counts)
    assert (low, high) == pytest.approx((max(0.0, p - 1.959963984540054 * math.sqrt(var)),
                                         min(1.0, p + 1.959963984540054 * math.sqrt(var))))  # fmt: skip
    assert cluster_interval([(1, 4)]) == (0.0, 1.0)  # one task: no spread to estimate
