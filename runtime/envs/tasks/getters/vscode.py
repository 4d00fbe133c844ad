"""VS Code getters with OSWorld's names: `vscode_config` runs a command of the task's
evaluation extension from the command palette, then reads the file it writes."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime.envs.tasks.getters.basic import get_vm_file
from runtime.envs.tasks.getters.context import EvalContext, Getter
from runtime.errors import TaskError

__all__ = ["GETTERS", "get_vscode_config"]

_SETTLE = 1.0  # seconds for the extension to write its file, as OSWorld waits


async def get_vscode_config(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """Run `vscode_extension_command` through ctrl+shift+p in the focused VS Code window,
    then fetch `path` as `dest` (None when the command wrote nothing)."""
    command = str(config["vscode_extension_command"])
    for action in (
        {"action": "key", "text": "ctrl+shift+p"},
        {"action": "type", "text": command},
        {"action": "key", "text": "Return"},
    ):
        result = await ctx.controller.step(action)
        if not result.ok:
            raise TaskError(f"vscode_config: could not run {command!r}: {result.error}")
    await asyncio.sleep(_SETTLE)
    return await get_vm_file(ctx, {"path": config["path"], "dest": config["dest"]})


GETTERS: dict[str, Getter] = {"vscode_config": get_vscode_config}
