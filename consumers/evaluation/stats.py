"""Pass rates with confidence intervals, overall and per task family (pure, no I/O).

A held-out evaluation plays each instance once, greedily; its pass rate is a binomial
proportion, so the 95% interval is Wilson's score interval (sensible at 0 and 1 and for
small n, unlike the normal approximation).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Outcome", "wilson_interval", "summarize_outcomes"]

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class Outcome:
    """One played instance: its task, family, score, and whether it was scored at all."""

    task_id: str
    family: str
    score: float | None  # None: an environment failure, not counted as an attempt
    status: str = ""
    reason: str = ""  # the judge's reason (an environment failure says what failed)


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of `passed` successes out of `n` (0..1 bounds)."""
    if n <= 0:
        return (0.0, 1.0)
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def _rates(outcomes: list[Outcome], threshold: float) -> dict[str, object]:
    scored = [o for o in outcomes if o.score is not None]
    passed = sum(1 for o in scored if o.score is not None and o.score >= threshold)
    low, high = wilson_interval(passed, len(scored))
    return {
        "n": len(scored),
        "passed": passed,
        "pass_rate": round(passed / len(scored), 4) if scored else None,
        "ci95": [round(low, 4), round(high, 4)],
        "unscored": len(outcomes) - len(scored),
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
