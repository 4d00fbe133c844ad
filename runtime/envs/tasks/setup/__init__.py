"""Setup steps: OSWorld's `config` (and `evaluator.postconfig`) run against a desktop.

Each step is `{"type": ..., "parameters": {...}}` with OSWorld's names; one module of this
package per app or area defines its steps (`STEPS`). Files named by a local path or a
`file://` URL are read on the host and uploaded, so task folders travel with their inputs;
relative paths resolve against the task file's folder (see `sources`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from runtime.envs.tasks.model import Task
from runtime.envs.tasks.setup import accounts, basic, chrome, kalgebra, scienceboard
from runtime.envs.tasks.setup.sources import CLIENT_PASSWORD, DESKTOP_HOME, fetch_source
from runtime.envs.tasks.setup.step import STEP_OUTPUTS, Step
from runtime.errors import TaskError

__all__ = [
    "CLIENT_PASSWORD",
    "DESKTOP_HOME",
    "SETUP_STEPS",
    "STEP_OUTPUTS",
    "Step",
    "fetch_source",
    "run_setup",
    "run_steps",
]

log = logging.getLogger(__name__)

SETUP_STEPS: dict[str, Step] = {
    **basic.STEPS,
    **accounts.STEPS,
    **chrome.STEPS,
    **scienceboard.STEPS,
    **kalgebra.STEPS,
}


async def run_setup(controller: Any, task: Task | dict[str, Any]) -> None:
    """Run a task's `config` steps on the desktop behind controller, in order."""
    if not isinstance(task, Task):
        task = Task.from_dict(task)
    await run_steps(controller, task.config, task.base_dir)


async def run_steps(
    controller: Any,
    steps: list[dict[str, Any]],
    base_dir: Path | None,
    outputs: Path | None = None,
) -> None:
    """Run OSWorld setup steps in order; unknown step types raise TaskError.

    `outputs` is the folder for the `stdout`/`stderr` files steps ask for (an
    evaluation's postconfig passes the folder its `cache_file` getters read).
    """
    token = STEP_OUTPUTS.set(outputs)
    try:
        for i, step in enumerate(steps):
            kind = step.get("type")
            handler = SETUP_STEPS.get(kind)  # type: ignore[arg-type]
            if handler is None:
                raise TaskError(f"setup step {i}: unsupported type {kind!r}")
            log.debug("setup step %d: %s", i, kind)
            try:
                await handler(controller, step.get("parameters") or {}, base_dir)
            except KeyError as exc:
                raise TaskError(f"setup step {i} ({kind}): missing parameter {exc}") from exc
    finally:
        STEP_OUTPUTS.reset(token)
