"""File operations behind the desktop server's /file, /setup/* and /list_directory routes."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import aiohttp

from runtime.envs.desktop.apps import Opener, opener_for

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class DownloadError(Exception):
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


def is_loopback(host: str) -> bool:
    """Return whether `host` names this machine's loopback interface."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def download(url: str, path: Path) -> int:
    """Copy a file:// URL (as the desktop sees it) or fetch a loopback http(s) URL to `path`."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return await asyncio.to_thread(_copy_local, Path(unquote(parsed.path)), path)
    if parsed.scheme not in ("http", "https"):
        raise DownloadError(f"unsupported URL scheme {parsed.scheme!r}")
    if not is_loopback(parsed.hostname or ""):
        # This machine may talk to nothing but itself.
        raise DownloadError(
            f"only loopback hosts are reachable from a desktop, not {parsed.hostname}"
        )
    timeout = aiohttp.ClientTimeout(total=300)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            resp.raise_for_status()
            data = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DownloadError(str(exc) or type(exc).__name__) from exc
    return await asyncio.to_thread(write_bytes, path, data)


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
            if entry.is_dir():
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
