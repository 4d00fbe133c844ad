"""Getters: OSWorld's `result`/`expected` specs turned into values a metric can compare.

A getter spec is `{"type": NAME, ...config}`; `get_state(ctx, spec)` dispatches on `type` to
an async function of one of this package's modules (one module per app or area, each with
its own `GETTERS`). File getters return a host path under the evaluation's cache folder or
the task's folder (None when the file is missing), as OSWorld's do, typed `FetchedFile`:
only such paths reach a sandboxed judge as files; a path a task writes into a `rule` stays
a string.
"""

from __future__ import annotations

from typing import Any

from runtime.envs.desktop.wrappers import TERMINAL_LOG_DIR
from runtime.envs.tasks.getters import (
    accounts,
    basic,
    chrome,
    chrome_profile,
    gimp,
    impress,
    info,
    kalgebra,
    rules,
    scienceboard,
    vlc,
    vscode,
)
from runtime.envs.tasks.getters.basic import terminal_text
from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter
from runtime.errors import TaskError

__all__ = [
    "GETTERS",
    "TERMINAL_LOG_DIR",
    "EvalContext",
    "FetchedFile",
    "get_state",
    "terminal_text",
]

GETTERS: dict[str, Getter] = {
    **basic.GETTERS,
    **info.GETTERS,
    **rules.GETTERS,
    **vscode.GETTERS,
    **accounts.GETTERS,
    **gimp.GETTERS,
    **vlc.GETTERS,
    **scienceboard.GETTERS,
    **kalgebra.GETTERS,
    **impress.GETTERS,
    **chrome.GETTERS,
    **chrome_profile.GETTERS,
}


async def get_state(ctx: EvalContext, spec: dict[str, Any] | list[dict[str, Any]] | None) -> Any:
    """Evaluate one getter spec (or a list of them, giving a list of values)."""
    if spec is None:
        return None
    if isinstance(spec, list):
        return [await get_state(ctx, one) for one in spec]
    getter = GETTERS.get(spec.get("type"))  # type: ignore[arg-type]
    if getter is None:
        raise TaskError(f"unsupported getter type {spec.get('type')!r}")
    try:
        return await getter(ctx, spec)
    except KeyError as exc:
        raise TaskError(f"getter {spec['type']}: missing config key {exc}") from exc
