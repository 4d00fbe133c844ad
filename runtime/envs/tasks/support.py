"""Which parts of a task this implementation cannot run: setup steps, getters and metrics.

OSWorld tasks name their setup steps, getters and metrics by string; a task that names one
we do not implement would fail only when an episode reaches it. `unsupported_parts` finds
those names up front, so an importer can flag (and skip) such tasks.
"""

from __future__ import annotations

from typing import Any

from runtime.envs.tasks.getters import GETTERS
from runtime.envs.tasks.metrics import UNAVAILABLE_METRICS, metric_names
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.setup import SETUP_STEPS

__all__ = ["unsupported_parts"]


def unsupported_parts(task: Task) -> list[str]:
    """Return readable names of the task's setup steps, getters and metrics we do not implement."""
    missing: list[str] = []
    for where, steps in (("config", task.config), ("postconfig", task.evaluator.postconfig)):
        for step in steps:
            if step["type"] not in SETUP_STEPS:
                missing.append(f"{where} step `{step['type']}`")
    known_metrics = set(metric_names())
    for func in task.evaluator.funcs:
        if func not in known_metrics:
            missing.append(f"metric `{func}`")
        elif func in UNAVAILABLE_METRICS:
            missing.append(f"metric `{func}` ({UNAVAILABLE_METRICS[func]})")
    for spec in task.evaluator.results + task.evaluator.expecteds:
        for getter in _getter_specs(spec):
            if getter["type"] not in GETTERS:
                missing.append(f"getter `{getter['type']}`")
    return list(dict.fromkeys(missing))  # each name once, in order of appearance


def _getter_specs(spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return []
    return [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]
