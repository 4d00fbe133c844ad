"""The general setup steps: files placed on the desktop, apps opened or launched, commands,
waits and window management, with OSWorld's names and parameters."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from runtime.envs.tasks.setup.sources import CLIENT_PASSWORD, fetch_source
from runtime.envs.tasks.setup.step import STEP_OUTPUTS, Step
from runtime.errors import TaskError

__all__ = ["STEPS"]

log = logging.getLogger(__name__)


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
    for key, field in (("stdout", "output"), ("stderr", "error")):
        if params.get(key):
            await asyncio.to_thread(_keep_output, str(params[key]), result.get(field) or "")


def _keep_output(name: str, text: str) -> None:
    """Write a step's output as file `name` of the step outputs folder (OSWorld's cache)."""
    folder = STEP_OUTPUTS.get()
    if folder is None:
        log.warning("setup step output %r dropped: outputs are kept only after an episode", name)
        return
    base = Path(name).name  # a file name, never a path out of the folder
    if base in ("", ".", ".."):
        raise TaskError(f"a step's output file needs a file name, got {name!r}")
    target = folder / base
    folder.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


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


STEPS: dict[str, Step] = {
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
