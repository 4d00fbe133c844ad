"""The shape of a setup step handler: `await step(controller, parameters, task_folder)`,
and where a step keeps the output files OSWorld's steps may ask for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

__all__ = ["STEP_OUTPUTS", "Step"]

Step = Callable[[Any, dict[str, Any], Path | None], Awaitable[None]]

# The folder an `execute`/`command` step writes its `stdout`/`stderr` files to (OSWorld's
# cache folder, where a `cache_file` getter then finds them). run_steps sets it for an
# evaluation's postconfig; it is None while a task's own setup runs.
STEP_OUTPUTS: ContextVar[Path | None] = ContextVar("step_outputs", default=None)
