"""Pass rates with confidence intervals, overall and per task family (pure, no I/O).

A held-out evaluation plays each instance once, greedily; its pass rate is a binomial
proportion, so the 95% interval is Wilson's score interval (sensible at 0 and 1 and for
small n, unlike the normal approximation).

An evaluation that samples each instance n times (temperature > 0) also reports pass@k for
k = 1, 2, 4, ... ≤ n: the chance that at least one of k samples passes, by the unbiased
estimator 1 − C(n−c, k)/C(n, k) per task (c of its n samples passed), averaged over tasks
(Chen et al., 2021). pass@n of the policy before RL bounds what RL that mostly sharpens
its sampling can reach in pass@1. Its pass rate is then the share of passing attempts, and
the interval is a cluster (ratio-estimator) normal interval over tasks: attempts of one
task are not independent, so Wilson's interval over attempts would be too narrow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "Outcome",
    "wilson_interval",
    "cluster_interval",
    "pass_at_k",
    "summarize_outcomes",
    "Z95",
]

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class Outcome:
    """One played instance: its task, family, score, and whether it was scored at all."""

    task_id: str
    family: str
    score: float | None  # None: an environment failure, not counted as an attempt
    status: str = ""
    reason: str = ""  # the judge's reason (an environment failure says what failed)
    sample: int = 0  # which of the task's samples this is (0 when it is played once)


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of `passed` successes out of `n` (0..1 bounds)."""
    if n <= 0:
        return (0.0, 1.0)
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def cluster_interval(counts: list[tuple[int, int]], z: float = Z95) -> tuple[float, float]:
    """95% interval of Σc/Σn over tasks given (passed c, attempts n) each, tasks independent."""
    counts = [(c, n) for c, n in counts if n > 0]
    total = sum(n for _, n in counts)
    if len(counts) < 2:
        return (0.0, 1.0)
    p = sum(c for c, _ in counts) / total
    # The ratio estimator's variance: residuals summed per task, so a task's correlated
    # attempts count once; T/(T−1) is the small-sample correction.
    t = len(counts)
    var = sum((c - p * n) ** 2 for c, n in counts) / total**2 * t / (t - 1)
    half = z * math.sqrt(var)
    return (max(0.0, p - half), min(1.0, p + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with c passing samples out of n (k ≤ n)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, n = {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _per_task(scored: list[Outcome], threshold: float) -> list[tuple[int, int]]:
    tasks: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in scored:
        tasks[o.task_id][0] += int(o.score is not None and o.score >= threshold)
        tasks[o.task_id][1] += 1
    return [(c, n) for c, n in tasks.values()]


def _pass_at(counts: list[tuple[int, int]]) -> dict[str, float]:
    """pass@k for k = 1, 2, 4, ... up to the fewest samples any task has."""
    if not counts:
        return {}
    fewest = min(n for _, n in counts)
    ks = [2**i for i in range(fewest.bit_length()) if 2**i <= fewest]
    if fewest not in ks:
        ks.append(fewest)
    return {str(k): round(sum(pass_at_k(n, c, k) for c, n in counts) / len(counts), 4) for k in ks}


def _rates(outcomes: list[Outcome], threshold: float) -> dict[str, object]:
    scored = [o for o in outcomes if o.score is not None]
    passed = sum(1 for o in scored if o.score is not None and o.score >= threshold)
    counts = _per_task(scored, threshold)
    sampled = any(n > 1 for _, n in counts)
    low, high = cluster_interval(counts) if sampled else wilson_interval(passed, len(scored))
    return {
        "n": len(scored),
        "passed": passed,
        "pass_rate": round(passed / len(scored), 4) if scored else None,
        "ci95": [round(low, 4), round(high, 4)],
        "unscored": len(outcomes) - len(scored),
        "tasks": len(counts),
        "pass_at_k": _pass_at(counts),
    }


def summarize_outcomes(
    outcomes: Iterable[Outcome], threshold: float = 1.0, heldout_families: Iterable[str] = ()
) -> dict[str, object]:
    """Overall and per-family pass rates; held-out families also reported on their own."""
    outcomes = list(outcomes)
    families: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        families[o.family].append(o)
    held = set(heldout_families)
    summary: dict[str, object] = {
        **_rates(outcomes, threshold),
        "threshold": threshold,
        "families": {f: _rates(os, threshold) for f, os in sorted(families.items())},
    }
    if held:
        seen = [o for o in outcomes if o.family not in held]
        unseen = [o for o in outcomes if o.family in held]
        summary["seen_families"] = _rates(seen, threshold)
        summary["heldout_families"] = _rates(unseen, threshold)
    return summary
