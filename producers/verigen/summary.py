"""A synthesis run's figures, folded from its `synthesis` events alone (pure, no I/O).

    summary = summarize(events)            # every SynthesisEvent of one run, any order
    summary["accepted"], summary["executable_rate"], summary["usd_per_accepted"]

The executable rate is the paper's "generated judges executable": of the well-formed
candidates the rule validator saw (every round's, fixes included), the share whose setup and
verifier ran there with every sandboxed judge returning a score (`ok`), whatever the
score; `executable_rate_first` counts first proposals only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from topics.events import SynthesisEvent

__all__ = ["summarize"]

_USAGE_KEYS = ("calls", "failures", "prompt_tokens", "completion_tokens", "cost_usd", "llm_seconds")


def summarize(
    events: Iterable[SynthesisEvent], wall_seconds: float | None = None
) -> dict[str, Any]:
    """The run's counts, rates, tokens and cost; per accepted task where it matters."""
    events = list(events)
    finals = [e for e in events if e.final]
    outcome = Counter(e.stage for e in finals)
    accepted = [e for e in finals if e.stage == "accepted"]
    validated = [
        e
        for e in events
        if e.stage == "validate" and e.detail.get("checks", {}).get("schema") == "pass"
    ]
    first = [e for e in validated if e.round == 0]
    usage = {k: 0.0 for k in _USAGE_KEYS}
    for e in events:
        for k in _USAGE_KEYS:
            usage[k] += float(e.usage.get(k, 0.0))
    by_stage = Counter(e.stage for e in events if not e.final)
    passed = Counter(e.stage for e in events if not e.final and e.ok)
    reasons = Counter(_short(e.reasons[0]) for e in finals if e.stage != "accepted" and e.reasons)
    n_accepted = len(accepted)
    out: dict[str, Any] = {
        "candidates": len(finals),
        "accepted": n_accepted,
        "rejected": outcome.get("rejected", 0),
        "failed": outcome.get("failed", 0),
        "accept_rate": _rate(n_accepted, len(finals)),
        "executable_rate": _rate(
            sum(bool(e.detail.get("executable")) for e in validated), len(validated)
        ),
        "executable_rate_first": _rate(
            sum(bool(e.detail.get("executable")) for e in first), len(first)
        ),
        "validated": len(validated),
        "stages": {s: {"runs": n, "passed": passed.get(s, 0)} for s, n in sorted(by_stage.items())},
        "repairs_per_accepted": _mean([e.detail.get("repairs", 0) for e in accepted]),
        "seconds_per_accepted": _mean([e.seconds for e in accepted]),
        "usage": {k: round(v, 6) for k, v in usage.items()},
        "usd_per_accepted": round(usage["cost_usd"] / n_accepted, 6) if n_accepted else None,
        "tokens_per_accepted": (
            round((usage["prompt_tokens"] + usage["completion_tokens"]) / n_accepted)
            if n_accepted
            else None
        ),
        "task_ids": sorted(e.task_id for e in accepted),
        "top_rejections": reasons.most_common(5),
    }
    if wall_seconds is not None:
        out["wall_seconds"] = round(wall_seconds, 2)
        out["candidates_per_min"] = round(len(finals) / wall_seconds * 60, 2) if wall_seconds else 0
        out["wall_seconds_per_accepted"] = (
            round(wall_seconds / n_accepted, 2) if n_accepted else None
        )
    return out


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def _short(reason: str) -> str:
    return reason if len(reason) <= 120 else reason[:117] + "..."
