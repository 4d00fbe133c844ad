"""A folder of task files as OSWorld lays them out, and the key each task has on `tasks`.

OSWorld keeps its tasks as `examples/<domain>/<id>.json` and lists a benchmark's tasks in an
index such as `test_all.json` (`{"<domain>": ["<id>", ...]}`). A task read from a file is
known by its **key**, `<folder>/<file name without .json>` (for a ScienceBoard task
`<app>/<id>`, see scienceboard.py): for OSWorld `<domain>/<id>`,
the pair OSWorld itself names a task's results by. The key, not the task JSON's `id` (which
stays as written), is what the compacted `tasks` topic, requests and rewards carry, so two
tasks that share an id in different domains (11 OSWorld ids are both a chrome and a
thunderbird task) are two tasks.

    entries = read_task_folder(Path("evaluation_examples/examples"), index=test_all)
    entry.key, entry.domain, entry.task (None when entry.error says why)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.scienceboard import scienceboard_domain
from runtime.errors import ConfigError, TaskError

__all__ = [
    "TaskFile",
    "is_task_file",
    "keys_with_id",
    "read_index",
    "read_task_folder",
    "task_key",
]


@dataclass(frozen=True)
class TaskFile:
    """One task of a folder: its key, domain and file, and the task or why it did not load."""

    key: str  # "<domain>/<file stem>"
    domain: str  # the folder the file is in (OSWorld's domain)
    path: Path
    task: Task | None = None
    error: str = ""  # set when task is None: a missing or malformed file


def task_key(path: Path) -> str:
    """The `tasks` key of a task read from `path`: `<folder>/<file name without .json>`."""
    path = Path(path).resolve()
    return f"{path.parent.name}/{path.stem}"


def keys_with_id(rows: Iterable[tuple[str, dict[str, Any]]], task_id: str) -> list[str]:
    """The keys of the (key, task JSON) rows whose task has this `id`, sorted."""
    return sorted(key for key, task in rows if task.get("id") == task_id)


def read_index(path: Path) -> dict[str, list[str]]:
    """Read an OSWorld index (`{"<domain>": ["<id>", ...]}`), checked for shape."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the index {path}: {exc}") from exc
    if not isinstance(raw, dict) or not all(
        isinstance(d, str) and isinstance(ids, list) and all(isinstance(i, str) for i in ids)
        for d, ids in raw.items()
    ):
        raise ConfigError(f"{path}: an index is an object of domain -> list of task ids")
    return raw


def read_task_folder(root: Path, index: dict[str, list[str]] | None = None) -> list[TaskFile]:
    """The tasks under `root`: those the index lists (`root/<domain>/<id>.json`), else every
    task file below it (JSON files that are no task object, such as an index, are skipped)."""
    root = Path(root)
    if not root.exists():
        raise ConfigError(f"no tasks at {root}")
    if index is not None:
        return [
            _read(root / domain / f"{task_id}.json", domain)
            for domain, ids in index.items()
            for task_id in ids
        ]
    files = [root] if root.is_file() else sorted(root.rglob("*.json"))
    return [_read(f, f.resolve().parent.name) for f in files if is_task_file(f)]


def _read(path: Path, domain: str) -> TaskFile:
    key = f"{domain}/{path.stem}"
    if not path.is_file():
        return TaskFile(key, domain, path, error=f"no task file {path}")
    try:
        task = load_task(path)
    except TaskError as exc:
        return TaskFile(key, domain, path, error=str(exc))
    if task.native is not None:  # ScienceBoard: its Raw and Dual variants are apart from VM's
        domain = scienceboard_domain(task.native, path.resolve().parent.parent.name)
    return TaskFile(f"{domain}/{path.stem}", domain, path, task)


def is_task_file(path: Path) -> bool:
    """Whether a JSON file holds a task (perhaps a malformed one): an object with an
    `instruction` or an `evaluator`, or a file that does not parse; an index is none."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # unreadable: reported as a malformed task, not skipped in silence
    return isinstance(raw, dict) and ("evaluator" in raw or "instruction" in raw)
