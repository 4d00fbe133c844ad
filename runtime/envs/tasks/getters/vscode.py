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
_PAUSE = 0.5  # between the palette's keys: OSWorld replays each as a request to its VM
_WRITE_S = 10.0  # the longest wait for the file: an extension's first command activates it


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
        await asyncio.sleep(_PAUSE)
    await asyncio.sleep(_SETTLE)
    # On a loaded machine the command (its extension activating first) can take longer than
    # OSWorld's second: the file is waited for, and a command that writes nothing is None.
    deadline = asyncio.get_running_loop().time() + _WRITE_S
    while await ctx.controller.get_file(str(config["path"])) is None:
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.5)
    return await get_vm_file(ctx, {"path": config["path"], "dest": config["dest"]})


GETTERS: dict[str, Getter] = {"vscode_config": get_vscode_config}
