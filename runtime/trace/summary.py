"""Where a run's time goes: percentiles of each stage gap, per policy version (pure).

A trajectory counts under the version that played it (its first turn); `turn` takes every
turn's own latency. A gap whose later stage has not happened yet (a group not trained) is
left out, so `n` says how many trajectories reached it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runtime.trace.timeline import GAPS, Timeline

__all__ = ["ALL", "GapStats", "percentile", "gap_values", "stage_summary", "slowest"]

ALL = "all"  # the row of every version together


@dataclass(frozen=True)
class GapStats:
    """One stage gap's distribution for one policy version (ms)."""

    version: str  # "v4", or "all"
    gap: str  # a GAPS name
    n: int
    p50: float
    p90: float
    p99: float
    mean: float


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of sorted values, linearly interpolated (numpy's default)."""
    if not sorted_values:
        return math.nan
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def gap_values(timeline: Timeline) -> dict[str, list[float]]:
    """Each gap's values in one timeline (ms): one per turn for `turn`, else at most one."""
    out: dict[str, list[float]] = {g: [] for g in GAPS}
    out["turn"] = [t.latency_ms or (t.at_ms - t.started_ms) for t in timeline.turns]
    for name, value in timeline.gaps.items():
        if value is not None:
            out[name].append(value)
    return out


def _stats(version: str, gap: str, values: list[float]) -> GapStats:
    values = sorted(values)
    return GapStats(
        version=version, gap=gap, n=len(values), p50=percentile(values, 50),
        p90=percentile(values, 90), p99=percentile(values, 99), mean=sum(values) / len(values),
    )  # fmt: skip


def stage_summary(timelines: Iterable[Timeline]) -> list[GapStats]:
    """Percentiles of every gap per policy version (oldest first), then over all versions."""
    by_version: dict[int, dict[str, list[float]]] = {}
    every: dict[str, list[float]] = {g: [] for g in GAPS}
    for timeline in timelines:
        version = timeline.policy_version
        mine = by_version.setdefault(-1 if version is None else version, {g: [] for g in GAPS})
        for gap, values in gap_values(timeline).items():
            mine[gap] += values
            every[gap] += values
    rows = []
    for version in sorted(by_version):
        label = "unknown" if version < 0 else f"v{version}"
        rows += [_stats(label, g, v) for g, v in by_version[version].items() if v]
    rows += [_stats(ALL, g, v) for g, v in every.items() if v]
    return rows


def slowest(rows: Iterable[GapStats], version: str = ALL) -> GapStats | None:
    """The gap with the largest median time spent per trajectory for one version row.

    `turn` counts as a whole episode's turns (its median times turns per trajectory), so a
    stage is compared with what the turns of one episode take together.
    """
    mine = [r for r in rows if r.version == version]
    trajectories = max((r.n for r in mine if r.gap != "turn"), default=0)

    def weight(r: GapStats) -> float:
        return r.p50 * (r.n / trajectories if r.gap == "turn" and trajectories else 1.0)

    return max(mine, key=weight, default=None)
