"""Metric functions by OSWorld name: `METRICS[name](result, [expected,] **options)`.

One module per app or area; a module with many metrics exports its own `METRICS` dict,
merged here.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.envs.tasks.metrics import chrome
from runtime.envs.tasks.metrics.docs import compare_docx_files, compare_text_file
from runtime.envs.tasks.metrics.general import (
    check_include_exclude,
    check_json,
    diff_text_file,
    exact_match,
    file_contains,
    file_exists,
    fuzzy_match,
    is_in_list,
    literal_match,
)
from runtime.envs.tasks.metrics.judge import sandboxed_judge
from runtime.envs.tasks.metrics.table import compare_table

__all__ = ["METRICS", "metric_names"]

METRICS: dict[str, Callable[..., float]] = {
    "exact_match": exact_match,
    "is_in_list": is_in_list,
    "literal_match": literal_match,
    "check_include_exclude": check_include_exclude,
    "fuzzy_match": fuzzy_match,
    "check_json": check_json,
    "diff_text_file": diff_text_file,
    "file_contains": file_contains,
    "file_exists": file_exists,
    "compare_text_file": compare_text_file,
    "compare_docx_files": compare_docx_files,
    "compare_table": compare_table,
    "sandboxed_judge": sandboxed_judge,
    **chrome.METRICS,
}


def metric_names() -> list[str]:
    """The names of every metric a task's `func` may use (`infeasible` is scored apart)."""
    return sorted([*METRICS, "infeasible"])
