"""File operations behind the desktop server's /file, /setup/* and /list_directory routes.

Writes and downloads run on the agent's side (namespaces.AgentSide.call): a file the
server puts into the desktop belongs to the agent and is written with the agent's rights,
through whatever links the agent made; a download reaches what the desktop reaches.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

from runtime.addresses import is_loopback
from runtime.envs.desktop.apps import Opener, opener_for
from runtime.errors import FetchError

__all__ = [
    "DOWNLOAD_TIMEOUT",
    "DownloadError",
    "directory_tree",
    "download",
    "append_text",
    "open_command",
    "read_text",
    "write_bytes",
]

DOWNLOAD_TIMEOUT = 300.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class DownloadError(FetchError):
    """A /setup/download_file source could not be fetched."""


def write_bytes(path: Path, data: bytes) -> int:
    """Write `data` to `path` atomically (parents created); return the size written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data)


def read_text(path: Path) -> str:
    """A text file's contents, read as Python's text mode does (UTF-8, newlines as \\n)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def append_text(path: Path, text: str) -> int:
    """Append `text` to `path` (UTF-8; created if missing); return the characters written."""
    with open(path, "a", encoding="utf-8") as f:
        return f.write(text)


def download(url: str, path: Path) -> int:
    """Copy a file:// URL or fetch an http(s) URL on the desktop's own loopback to `path`
    (run on the agent's side: its rights, its network); return the size written."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return _copy_local(Path(unquote(parsed.path)), path)
    if parsed.scheme not in ("http", "https"):
        raise DownloadError(f"unsupported URL scheme {parsed.scheme!r}")
    if not is_loopback(parsed.hostname or ""):
        # A desktop's network is its loopback: files from elsewhere come through the host's
        # file cache, as bytes (runtime.envs.tasks.files).
        raise DownloadError(
            f"only the desktop's own loopback is reachable from a desktop, not {parsed.hostname}"
        )
    try:
        with _NO_PROXY.open(url, timeout=DOWNLOAD_TIMEOUT) as resp:
            data = resp.read()
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise DownloadError(str(getattr(exc, "reason", exc)) or type(exc).__name__) from exc
    return write_bytes(path, data)


def _copy_local(source: Path, path: Path) -> int:
    # Read with the desktop's rights: a host file it may not read is refused here.
    try:
        if not source.is_file():
            raise DownloadError(f"no such file: {source}")
        data = source.read_bytes()
    except OSError as exc:
        raise DownloadError(f"cannot read {source}: {exc.strerror or exc}") from exc
    return write_bytes(path, data)


def directory_tree(directory: Path) -> dict:
    """Return OSWorld's nested {"type", "name", "children"} listing of `directory`."""
    tree: dict = {"type": "directory", "name": directory.name, "children": []}
    try:
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):  # a link loop must not recurse
                tree["children"].append(directory_tree(Path(entry.path)))
            else:
                tree["children"].append({"type": "file", "name": entry.name})
    except OSError as exc:
        return {"error": str(exc)}
    return tree


def open_command(target: Path) -> Opener:
    """How to open `target`: in the app its type belongs to (apps.py), a folder in the file
    manager; a path that is no file but a program on PATH is run."""
    try:
        exists = target.exists()
        is_folder = exists and target.is_dir()
    except OSError:  # a folder on the way that the desktop may not enter
        exists = is_folder = False
    if not exists:
        found = shutil.which(str(target))
        if not found:
            raise FileNotFoundError(str(target))
        return Opener(None, [found], target.name, "")
    return opener_for(str(target), is_folder)
