"""Setup steps: OSWorld's `config` (and `evaluator.postconfig`) run against a desktop.

Each step is `{"type": ..., "parameters": {...}}` with OSWorld's names. Files named by a
local path or a `file://` URL are read on the host and uploaded, so task folders travel
with their inputs; relative paths resolve against the task file's folder.

A task's setup is as untrusted as its judge (VeriGen writes both), so a local path or
`file://` URL may name only a file in the task's own folder (after resolving symlinks), or
one in the desktop's home (`/home/user/...`), which is read through the desktop with its
rights. Anything else is a TaskError, never a read as host root.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.envs.desktop.wrappers import VM_PASSWORD
from runtime.envs.tasks.model import Task
from runtime.errors import TaskError

__all__ = ["SETUP_STEPS", "fetch_source", "run_setup", "run_steps"]

log = logging.getLogger(__name__)

# OSWorld's VM user password; tasks written for it pipe this into `sudo -S`.
CLIENT_PASSWORD = VM_PASSWORD
DESKTOP_HOME = "/home/user"  # file:// paths under it are read from the desktop

Step = Callable[[Any, dict[str, Any], Path | None], Awaitable[None]]


async def run_setup(controller: Any, task: Task | dict[str, Any]) -> None:
    """Run a task's `config` steps on the desktop behind controller, in order."""
    if not isinstance(task, Task):
        task = Task.from_dict(task)
    await run_steps(controller, task.config, task.base_dir)


async def run_steps(controller: Any, steps: list[dict[str, Any]], base_dir: Path | None) -> None:
    """Run OSWorld setup steps in order; unknown step types raise TaskError."""
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


async def fetch_source(controller: Any, source: str, base_dir: Path | None) -> bytes:
    """Read the bytes behind a local path or URL a task names, within what it may read.

    A path or file:// URL: a file in the task folder `base_dir` (relative, or absolute
    inside it), or under /home/user, fetched from the desktop behind `controller`.
    http(s): loopback only. Anything else raises TaskError.
    """
    parsed = urlparse(source)
    if parsed.scheme in ("", "file"):
        # file:///abs/path is absolute; file://rel/path (not a real host) is beside the task.
        if parsed.scheme:
            rest = unquote(source[len("file://") :])
            path = rest[len("localhost") :] if rest.startswith("localhost/") else rest
        else:
            path = source
        in_home = _in_desktop_home(path)
        if in_home:
            return await _from_desktop(controller, in_home, source)
        return await asyncio.to_thread(_from_task_folder, Path(path), base_dir, source)
    if parsed.scheme in ("http", "https"):
        if parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise TaskError(f"refusing to fetch {source}: only loopback URLs are reachable here")
        import httpx

        try:
            async with httpx.AsyncClient(timeout=30, follow_redirects=False) as client:
                response = await client.get(source)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise TaskError(f"cannot fetch {source}: {exc}") from exc
        return response.content
    raise TaskError(f"unsupported URL scheme in {source!r}")


def _in_desktop_home(path: str) -> str | None:
    """The normalised path if it names something under /home/user, else None."""
    normal = os.path.normpath(path)
    return normal if normal == DESKTOP_HOME or normal.startswith(DESKTOP_HOME + "/") else None


async def _from_desktop(controller: Any, path: str, source: str) -> bytes:
    if controller is None:
        raise TaskError(f"cannot read {source}: there is no desktop to read it from")
    data = await controller.get_file(path)
    if data is None:
        raise TaskError(f"cannot read {source}: no such file on the desktop")
    return data


def _from_task_folder(path: Path, base_dir: Path | None, source: str) -> bytes:
    """Read `path` (relative to `base_dir`) if it resolves inside `base_dir`."""
    outside = TaskError(
        f"refusing to read {source}: it is outside the task folder and the desktop's home"
    )
    if base_dir is None:
        raise outside  # a task without a folder (from the tasks topic) reads no host file
    folder = os.path.realpath(base_dir)
    real = os.path.realpath(os.path.join(folder, path))  # an absolute path stays absolute
    if os.path.commonpath([folder, real]) != folder:
        raise outside
    try:
        with open(real, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TaskError(f"cannot read {source}: {exc.strerror or exc}") from exc


def _command(params: dict[str, Any]) -> str | list[str]:
    """The step's command with OSWorld's password placeholder filled in."""
    command = params.get("command")
    if isinstance(command, str):
        return command.replace("{CLIENT_PASSWORD}", CLIENT_PASSWORD)
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        return [c.replace("{CLIENT_PASSWORD}", CLIENT_PASSWORD) for c in command]
    raise TaskError(f"a command must be a string or a list of strings, got {command!r}")


def _files(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's `files` list, checked for shape."""
    files = params.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and "path" in f for f in files):
        raise TaskError("a file step needs `files`: a list of objects with a `path`")
    return files


async def _place_files(
    controller: Any, params: dict[str, Any], base_dir: Path | None, source_key: str, missing: str
) -> None:
    """Fetch each file from its `source_key` (URL or local path) and upload it to its `path`."""
    for f in _files(params):
        source = f.get(source_key)
        if not isinstance(source, str):
            raise TaskError(missing)
        data = await fetch_source(controller, source, base_dir)
        await controller.upload_file(f["path"], data)


async def _download(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await _place_files(controller, params, base_dir, "url", "a download file needs a `url`")


async def _upload_file(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await _place_files(
        controller, params, base_dir, "local_path", "an upload_file file needs a `local_path`"
    )


async def _open(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await controller.open_file(params["path"])


async def _launch(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await controller.launch(_command(params), shell=bool(params.get("shell", False)))


async def _execute(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    result = await controller.execute(_command(params), shell=bool(params.get("shell", False)))
    log.debug("setup execute -> %s", result)


async def _sleep(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await asyncio.sleep(float(params.get("seconds", 1)))


async def _activate_window(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await controller.activate_window(
        params["window_name"],
        strict=bool(params.get("strict", False)),
        by_class=bool(params.get("by_class", False)),
    )


async def _close_window(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await controller.close_window(
        params["window_name"],
        strict=bool(params.get("strict", False)),
        by_class=bool(params.get("by_class", False)),
    )


SETUP_STEPS: dict[str, Step] = {
    "download": _download,
    "upload_file": _upload_file,
    "open": _open,
    "launch": _launch,
    "execute": _execute,
    "command": _execute,
    "sleep": _sleep,
    "activate_window": _activate_window,
    "close_window": _close_window,
}
