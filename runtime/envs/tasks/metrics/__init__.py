"""Metric functions by OSWorld name: `METRICS[name](result, [expected,] **options)`.

One module per app or area; a module with many metrics exports its own `METRICS` dict,
merged here. `UNAVAILABLE_METRICS` names the metrics that exist but cannot score here,
with the reason (they raise TaskError saying so).
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.envs.tasks.metrics import (
    archives,
    audio,
    basic_os,
    chrome,
    docs,
    general,
    gimp,
    images,
    kalgebra,
    ocr,
    pdf,
    scienceboard,
    settings,
    slides,
    thunderbird,
    vlc,
    vscode,
    writer,
)
from runtime.envs.tasks.metrics.judge import sandboxed_judge
from runtime.envs.tasks.metrics.table import compare_table
from runtime.envs.tasks.metrics.table_files import METRICS as TABLE_FILE_METRICS

__all__ = ["METRICS", "UNAVAILABLE_METRICS", "metric_names"]

METRICS: dict[str, Callable[..., float]] = {
    **general.METRICS,
    **basic_os.METRICS,
    **thunderbird.METRICS,
    **vscode.METRICS,
    **archives.METRICS,
    "compare_table": compare_table,
    "sandboxed_judge": sandboxed_judge,
    **TABLE_FILE_METRICS,
    **images.METRICS,
    **gimp.METRICS,
    **vlc.METRICS,
    **audio.METRICS,
    **docs.METRICS,
    **ocr.METRICS,
    **writer.METRICS,
    **slides.METRICS,
    **pdf.METRICS,
    **settings.METRICS,
    **chrome.METRICS,
    **scienceboard.METRICS,
    **kalgebra.METRICS,
}

# Names known, but that cannot run on this host, with the reason (coverage says it; the
# metric raises TaskError saying it): OCR needs Tesseract installed; ScienceBoard's checks
# of its patched apps need those builds.
UNAVAILABLE_METRICS: dict[str, str] = {
    **{name: reason for name, reason in [("compare_image_text", ocr.ocr_unavailable())] if reason},
    **scienceboard.UNAVAILABLE,
}


def metric_names() -> list[str]:
    """The names of every metric a task's `func` may use (`infeasible` is scored apart)."""
    return sorted([*METRICS, "infeasible"])
