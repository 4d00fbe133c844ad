"""Metric functions by OSWorld name: `METRICS[name](result, [expected,] **options)`.

One module per app or area; a module with many metrics exports its own `METRICS` dict,
merged here.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.envs.tasks.metrics import (
    archives,
    audio,
    basic_os,
    general,
    gimp,
    images,
    thunderbird,
    vlc,
    vscode,
)
from runtime.envs.tasks.metrics.docs import compare_docx_files, compare_text_file
from runtime.envs.tasks.metrics.judge import sandboxed_judge
from runtime.envs.tasks.metrics.table import compare_table
from runtime.envs.tasks.metrics.table_files import METRICS as TABLE_FILE_METRICS

__all__ = ["METRICS", "metric_names"]

METRICS: dict[str, Callable[..., float]] = {
    **general.METRICS,
    **basic_os.METRICS,
    **thunderbird.METRICS,
    **vscode.METRICS,
    **archives.METRICS,
    "compare_text_file": compare_text_file,
    "compare_docx_files": compare_docx_files,
    "compare_table": compare_table,
    "sandboxed_judge": sandboxed_judge,
    **TABLE_FILE_METRICS,
    **images.METRICS,
    **gimp.METRICS,
    **vlc.METRICS,
    **audio.METRICS,
}


def metric_names() -> list[str]:
    """The names of every metric a task's `func` may use (`infeasible` is scored apart)."""
    return sorted([*METRICS, "infeasible"])
