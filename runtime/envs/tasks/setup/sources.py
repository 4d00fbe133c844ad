"""Where a task's files come from: a local path or URL it names, read within what it may read.

A task's setup is as untrusted as its judge (VeriGen writes both), so a local path or
`file://` URL may name only a file in the task's own folder (after resolving symlinks), or
one in the desktop's home (`/home/user/...`), which is read through the desktop with its
rights. Anything else is a TaskError, never a read as host root. An http(s) URL is served
from the file cache, which the host fills by fetching on a miss when SCALECUA_FILES_FETCH
allows it (runtime/envs/tasks/files); the desktop only ever receives the bytes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.envs.desktop.wrappers import VM_PASSWORD
from runtime.envs.tasks.files.serve import url_bytes
from runtime.errors import TaskError

__all__ = ["CLIENT_PASSWORD", "DESKTOP_HOME", "fetch_source"]

# OSWorld's VM user password; tasks written for it pipe this into `sudo -S`.
CLIENT_PASSWORD = VM_PASSWORD
DESKTOP_HOME = "/home/user"  # file:// paths under it are read from the desktop


async def fetch_source(controller: Any, source: str, base_dir: Path | None) -> bytes:
    """Read the bytes behind a local path or URL a task names, within what it may read.

    A path or file:// URL: a file in the task folder `base_dir` (relative, or absolute
    inside it), or under /home/user, fetched from the desktop behind `controller`.
    http(s): the file cache, or a fetch by the host on a miss when allowed (files.url_bytes);
    a file that cannot be had raises TaskError naming the URL, as does any other scheme.
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
        return await url_bytes(source)
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
