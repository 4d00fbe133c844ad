"""Scoring a finished episode the way OSWorld does.

Order: a `fail` action decides at once (1.0 on an infeasible task, 0.0 otherwise); else
`postconfig` runs, then each func's getters and metric. With conj "and" a zero stops the
evaluation at 0.0 and the score is the mean; with "or" a one stops it at 1.0 and the
score is the max. A metric that raises on the agent's output scores 0.0 with the error
kept; a malformed task or a broken desktop raises (`breaks_evaluation`).
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtime.envs.tasks.getters import EvalContext, get_state
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.setup import run_steps
from runtime.errors import OutcomeError, ScaleCUAError, TaskError
from topics.events import METRIC_SCORES

__all__ = [
    "Evaluation",
    "FuncScore",
    "combine",
    "decided_by_actions",
    "ends_with_fail",
    "evaluate",
    "run_metric",
    "score_funcs",
    "breaks_evaluation",
]


@dataclass
class FuncScore:
    """The outcome of one metric function."""

    func: str
    score: float
    error: str | None = None


@dataclass
class Evaluation:
    """The score of an episode with the per-func details behind it."""

    score: float
    reason: str  # "metrics", "fail_on_infeasible", "fail_action", "no_fail_on_infeasible"
    funcs: list[FuncScore] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view of the evaluation."""
        return asdict(self)


def ends_with_fail(actions: list[dict[str, Any]]) -> bool:
    """True when the agent's last action declared the task infeasible (OSWorld's FAIL)."""
    return bool(actions) and str(actions[-1].get("action", "")).lower() == "fail"


def combine(scores: list[float], conj: str) -> float:
    """Combine per-func scores: mean for "and" (0 if any is 0), max for "or"."""
    if not scores:
        return 0.0
    if conj == "or":
        return max(scores)
    return 0.0 if min(scores) == 0.0 else sum(scores) / len(scores)


def decided_by_actions(task: Task, actions: list[dict[str, Any]]) -> Evaluation | None:
    """Return the score when the actions decide it without any metric (OSWorld's FAIL), else None."""
    ev = task.evaluator
    # `infeasible` is no metric: the agent's last action decides it.
    unknown = [f for f in ev.funcs if f not in METRICS and f != "infeasible"]
    if unknown:
        raise TaskError(f"task {task.id}: unknown metric {unknown[0]!r}")
    if "infeasible" in ev.funcs and not ev.is_infeasible:
        raise TaskError(f"task {task.id}: `infeasible` cannot be combined with other funcs")
    if ev.is_infeasible:
        if ends_with_fail(actions):
            return Evaluation(1.0, "fail_on_infeasible", [FuncScore("infeasible", 1.0)])
        return Evaluation(0.0, "no_fail_on_infeasible", [FuncScore("infeasible", 0.0)])
    # ScienceBoard checks the state whatever the agent ended with, and checks the ending
    # itself only where the task says which (`sb_stop`: some tasks expect FAIL).
    if ends_with_fail(actions) and task.native is None:
        return Evaluation(0.0, "fail_action")
    return None


async def evaluate(
    controller: Any,
    task: Task,
    actions: list[dict[str, Any]] | None = None,
    cache_dir: Path | None = None,
) -> Evaluation:
    """Score the desktop's final state for task after the agent played actions."""
    actions = list(actions or [])
    ev = task.evaluator
    decided = decided_by_actions(task, actions)
    if decided is not None:
        return decided
    with tempfile.TemporaryDirectory(prefix="scalecua-eval-") as tmp:
        outputs = Path(tmp) / "postconfig"
        await run_steps(controller, ev.postconfig, task.base_dir, outputs)
        ctx = EvalContext(controller, Path(cache_dir or tmp), task.base_dir, actions, outputs)
        ctx.cache_dir.mkdir(parents=True, exist_ok=True)

        async def one(i: int) -> FuncScore:
            name = ev.funcs[i]
            try:
                has_expected = ev.expecteds[i] is not None
                result = await get_state(ctx, ev.results[i])
                expected = await get_state(ctx, ev.expecteds[i]) if has_expected else None
            except Exception as exc:  # a getter choking on the agent's output is a 0
                if breaks_evaluation(exc):
                    raise
                return FuncScore(name, 0.0, f"{type(exc).__name__}: {exc}")
            return await run_metric(name, result, expected, has_expected, ev.options[i])

        return await score_funcs(len(ev.funcs), ev.conj, one)


def breaks_evaluation(error: Exception) -> bool:
    """Whether a getter's or metric's failure stops the evaluation instead of scoring 0.

    scalecua's own failures do (a broken desktop, a store, a task's setup), except an
    OutcomeError, which is the agent's doing; anything else is a getter or metric choking
    on what the agent left.
    """
    return isinstance(error, ScaleCUAError) and not isinstance(error, OutcomeError)


async def score_funcs(
    count: int, conj: str, score_one: Callable[[int], Awaitable[FuncScore]]
) -> Evaluation:
    """Score funcs 0..count-1 in order by OSWorld's rules, stopping once `conj` is decided."""
    details: list[FuncScore] = []
    for i in range(count):
        detail = await score_one(i)
        details.append(detail)
        if conj == "and" and detail.score == 0.0:
            return Evaluation(0.0, "metrics", details)
        if conj == "or" and detail.score == 1.0:
            return Evaluation(1.0, "metrics", details)
    return Evaluation(combine([d.score for d in details], conj), "metrics", details)


async def run_metric(
    name: str, result: Any, expected: Any, has_expected: bool, options: dict[str, Any]
) -> FuncScore:
    """Run one metric on fetched states; a metric choking on the agent's output scores 0."""
    try:
        if has_expected:
            value = await asyncio.to_thread(METRICS[name], result, expected, **options)
        else:
            value = await asyncio.to_thread(METRICS[name], result, **options)
    except Exception as exc:  # a metric choking on what the agent produced is a 0, not a crash
        if breaks_evaluation(exc):
            raise
        return FuncScore(name, 0.0, f"{type(exc).__name__}: {exc}")
    score = float(value)
    if math.isnan(score):
        return FuncScore(name, 0.0, "metric returned NaN")
    return FuncScore(name, min(METRIC_SCORES.high, max(METRIC_SCORES.low, score)))
