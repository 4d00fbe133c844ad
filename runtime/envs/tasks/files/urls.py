"""Which files a task names: the URLs and paths its setup downloads and its getters fetch (pure).

A task needs the bytes behind every `url` of a `download` step (in `config` and in
`evaluator.postconfig`) and every `path` of a `cloud_file` getter (`result` and `expected`,
one path or a `multi` list). http(s) URLs come from the file cache; other sources (a path or
`file://` URL) are read from the task's folder or the desktop's home (setup/sources.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from runtime.envs.tasks.model import Task

__all__ = ["FileRef", "is_web_url", "task_files", "URL_GETTERS"]

# Getters whose `path` names a file to fetch onto the host (OSWorld's `cloud_file`).
URL_GETTERS = ("cloud_file",)


@dataclass(frozen=True)
class FileRef:
    """One file a task names: where it comes from and which part of the task names it."""

    source: str  # an http(s) URL, a file:// URL or a path
    where: str  # e.g. "config step 0 (download)", "expected getter cloud_file"

    @property
    def is_url(self) -> bool:
        """Whether the file comes over http(s) (so from the file cache)."""
        return is_web_url(self.source)


def is_web_url(source: str) -> bool:
    """Whether a source is an http(s) URL."""
    return urlparse(source).scheme in ("http", "https")


def task_files(task: Task) -> list[FileRef]:
    """Every file the task's setup, postconfig and getters name, each source once, in order."""
    refs: list[FileRef] = []
    for where, steps in (("config", task.config), ("postconfig", task.evaluator.postconfig)):
        for i, step in enumerate(steps):
            if step.get("type") != "download":
                continue
            for f in (step.get("parameters") or {}).get("files") or []:
                if isinstance(f, dict) and isinstance(f.get("url"), str) and f["url"]:
                    refs.append(FileRef(f["url"], f"{where} step {i} (download)"))
    for side, specs in (("result", task.evaluator.results), ("expected", task.evaluator.expecteds)):
        for spec in specs:
            for getter in _getters(spec):
                if getter.get("type") in URL_GETTERS:
                    for path in _paths(getter):
                        refs.append(FileRef(path, f"{side} getter {getter['type']}"))
    seen: set[str] = set()
    return [r for r in refs if not (r.source in seen or seen.add(r.source))]


def _getters(spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return []
    return [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]


def _paths(getter: dict[str, Any]) -> list[str]:
    path = getter.get("path")
    paths = path if isinstance(path, list) else [path]
    return [p for p in paths if isinstance(p, str) and p]
