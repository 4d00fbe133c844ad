"""The general getters: files from the desktop, the task folder or a URL, command output, the
terminal, the accessibility tree, the screen, literal rules and the agent's answer.

Like setup steps, `cloud_file` and `cache_file` read only inside the task's folder and the
desktop's home; `cloud_file`'s http(s) URLs come from the file cache (runtime/envs/tasks/files).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

from runtime.envs.desktop.wrappers import TERMINAL_LOG_DIR
from runtime.envs.tasks.getters.context import (
    EvalContext,
    FetchedFile,
    Getter,
    dest_path,
    give,
    multi_paths,
)
from runtime.envs.tasks.setup import CLIENT_PASSWORD, fetch_source
from runtime.errors import TaskError

__all__ = [
    "GETTERS",
    "terminal_text",
    "get_accessibility_tree",
    "get_agent_answer",
    "get_cache_file",
    "get_cloud_file",
    "get_list_directory",
    "get_rule",
    "get_vm_command_error",
    "get_vm_command_line",
    "get_vm_file",
    "get_vm_screen_size",
    "get_vm_terminal_output",
]

# CSI (ESC [ ... final), OSC (ESC ] ... BEL/ST), charset designations and short escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+].|\x1b[@-Z\\-_=>]"
)


async def get_vm_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """Copy files from the desktop into the cache folder; None for a missing file."""
    paths, dests, gives = multi_paths(config)
    out: list[str | None] = []
    for path, dest in zip(paths, dests, strict=True):
        data = await ctx.controller.get_file(path)
        if data is None:
            out.append(None)
            continue
        local = dest_path(ctx, dest, path)
        await asyncio.to_thread(local.write_bytes, data)
        out.append(FetchedFile(local))
    return give(out, gives)


async def get_cloud_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """Fetch files by URL (http(s) through the file cache, file://, or a path beside the task)."""
    paths, dests, gives = multi_paths(config)
    out: list[str] = []
    for url, dest in zip(paths, dests, strict=True):
        local = dest_path(ctx, dest, url)
        data = await fetch_source(ctx.controller, url, ctx.base_dir)
        await asyncio.to_thread(local.write_bytes, data)
        out.append(FetchedFile(local))
    return give(out, gives)


async def get_cache_file(ctx: EvalContext, config: dict[str, Any]) -> str:
    """A file already in the cache folder (a postconfig step's output among them), or else
    bundled beside the task file."""
    roots = [ctx.cache_dir, ctx.step_outputs, ctx.base_dir]
    return await asyncio.to_thread(_cached, config["path"], roots)


def _cached(name: str, roots: list[Path | None]) -> FetchedFile:
    for root in roots:
        if root is None:
            continue
        folder = os.path.realpath(root)
        path = os.path.realpath(os.path.join(folder, name))
        if os.path.commonpath([folder, path]) != folder:
            raise TaskError(
                f"refusing to read cache_file {name!r}: it is outside the task folder "
                "and the evaluation's cache"
            )
        if os.path.isfile(path):
            return FetchedFile(path)
    raise TaskError(f"cache_file {name!r} is neither cached nor beside the task")


async def get_rule(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """The literal `rules` object of the spec."""
    return config["rules"]


async def _run(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    command = config["command"]
    if isinstance(command, str):
        command = command.replace("{CLIENT_PASSWORD}", CLIENT_PASSWORD)
    else:
        command = [c.replace("{CLIENT_PASSWORD}", CLIENT_PASSWORD) for c in command]
    return await ctx.controller.execute(command, shell=bool(config.get("shell", False)))


async def get_vm_command_line(ctx: EvalContext, config: dict[str, Any]) -> str:
    """Standard output of a command run on the desktop."""
    return (await _run(ctx, config)).get("output") or ""


async def get_vm_command_error(ctx: EvalContext, config: dict[str, Any]) -> str:
    """Standard error of a command run on the desktop."""
    return (await _run(ctx, config)).get("error") or ""


async def get_vm_terminal_output(ctx: EvalContext, config: dict[str, Any]) -> str | None:
    """What the desktop's most recent terminal showed; None when no terminal ran.

    OSWorld reads gnome-terminal through accessibility; xterm has none, so a desktop's
    terminals log their session to TERMINAL_LOG_DIR (`xterm -l -lf DIR/NAME.log`) and
    this reads the newest log with control sequences removed. A controller that can
    read the terminal itself (`terminal_output()`) is asked first.
    """
    reader = getattr(ctx.controller, "terminal_output", None)
    if reader is not None:
        return await reader()
    listing = await ctx.controller.execute(
        f"ls -t {TERMINAL_LOG_DIR}/*.log 2>/dev/null | head -n 1", shell=True
    )
    newest = (listing.get("output") or "").strip()
    data = await ctx.controller.get_file(newest) if newest else None
    return None if data is None else terminal_text(data)


def terminal_text(raw: bytes) -> str:
    """A terminal transcript as plain text: escape sequences and carriage returns removed."""
    text = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
    return text.replace("\r\n", "\n").replace("\r", "")


async def get_accessibility_tree(ctx: EvalContext, config: dict[str, Any]) -> str:
    """The desktop's accessibility tree as OSWorld's XML text."""
    return await ctx.controller.accessibility_tree()


async def get_list_directory(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """The desktop server's listing of a directory."""
    return await ctx.controller.list_directory(config["path"])


async def get_vm_screen_size(ctx: EvalContext, config: dict[str, Any]) -> dict[str, int]:
    """The desktop's screen size as {"width", "height"}."""
    width, height = await ctx.controller.screen_size()
    return {"width": int(width), "height": int(height)}


async def get_agent_answer(ctx: EvalContext, config: dict[str, Any]) -> str | None:
    """The text of the agent's last ScienceBoard `answer` action, if any."""
    answers = [a.get("text") for a in ctx.actions if a.get("action") == "answer"]
    return str(answers[-1]) if answers else None


GETTERS: dict[str, Getter] = {
    "vm_file": get_vm_file,
    "cloud_file": get_cloud_file,
    "cache_file": get_cache_file,
    "rule": get_rule,
    "vm_command_line": get_vm_command_line,
    "vm_command_error": get_vm_command_error,
    "vm_terminal_output": get_vm_terminal_output,
    "accessibility_tree": get_accessibility_tree,
    "list_directory": get_list_directory,
    "vm_screen_size": get_vm_screen_size,
    "agent_answer": get_agent_answer,
}
