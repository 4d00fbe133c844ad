"""Task importer: OSWorld-format task files (or the built-in pool) onto the `tasks` topic.

The topic is compacted and keyed by task key, so importing again replaces a task's old
version. A task read from a file is keyed `<folder>/<file name>` (OSWorld: `<domain>/<id>`,
runtime/envs/tasks/catalog.py), so tasks that share an id in different domains stay apart;
its JSON, `id` included, is published unchanged. Built-in and generated tasks are keyed by
their id. Two files of one import that would share a key with different contents are an
error, never one silently replacing the other. Setup files named by relative path stay on
the importing machine; tasks meant for a cluster should reference files by URL (served from
the file cache, runtime/envs/tasks/files).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import builtin_ids, load_builtin
from runtime.envs.tasks.catalog import is_task_file, read_index, read_task_folder, task_key
from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.support import unsupported_parts
from runtime.errors import TaskError
from topics.events import TaskEvent

__all__ = [
    "task_event",
    "builtin_task_events",
    "file_task_events",
    "indexed_task_events",
    "publish_tasks",
    "Unsupported",
    "split_supported",
    "SPLITS",
]

SPLITS = ("train", "heldout", "benchmark")  # only train tasks are ever trained on


def task_event(
    task: Task, *, source: str, split: str = "train", key: str | None = None
) -> TaskEvent:
    """Wrap a task as a `tasks` event under `key` (default: the task's id)."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, not {split!r}")
    return TaskEvent(task_id=key or task.id, task=task.to_dict(), source=source, split=split)


def builtin_task_events(split: str = "train") -> list[TaskEvent]:
    """Return the built-in pool as `tasks` events."""
    return [task_event(load_builtin(i), source="builtin", split=split) for i in builtin_ids()]


def file_task_events(paths: Iterable[str | Path], *, source: str, split: str) -> list[TaskEvent]:
    """Return task events for files and folders of OSWorld-format JSON (folders recursively),
    each keyed `<folder>/<file name>`; two different tasks under one key raise TaskError."""
    events: dict[str, TaskEvent] = {}
    origin: dict[str, Path] = {}
    for path in map(Path, paths):
        # In a folder, JSON that is no task (an index such as test_all.json) is skipped.
        files = (
            [f for f in sorted(path.rglob("*.json")) if is_task_file(f)]
            if path.is_dir()
            else [path]
        )
        for f in files:
            key = task_key(f)
            event = task_event(load_task(f), source=source, split=split, key=key)
            if key in events and events[key].task != event.task:
                raise TaskError(
                    f"{origin[key]} and {f} are different tasks with the same key {key!r}: a "
                    "task's key is its folder and file name, so rename one of them"
                )
            events.setdefault(key, event)
            origin.setdefault(key, f)
    return list(events.values())


def indexed_task_events(
    root: str | Path, index: str | Path, *, source: str, split: str
) -> list[TaskEvent]:
    """Task events for the tasks an OSWorld index (test_all.json) lists under `root`, each
    keyed `<domain>/<id>`; a listed task that is missing or malformed raises TaskError."""
    events = []
    for entry in read_task_folder(Path(root), read_index(Path(index))):
        if entry.task is None:
            raise TaskError(entry.error)
        events.append(task_event(entry.task, source=source, split=split, key=entry.key))
    return events


@dataclass(frozen=True)
class Unsupported:
    """A task that names setup steps, getters or metrics this implementation lacks."""

    task_id: str
    missing: list[str]


def split_supported(events: list[TaskEvent]) -> tuple[list[TaskEvent], list[Unsupported]]:
    """Separate tasks every part of which we implement from those that would fail later."""
    ok: list[TaskEvent] = []
    flagged: list[Unsupported] = []
    for ev in events:
        missing = unsupported_parts(Task.from_dict(ev.task, where=ev.task_id))
        if missing:
            flagged.append(Unsupported(ev.task_id, missing))
        else:
            ok.append(ev)
    return ok, flagged


async def publish_tasks(settings: BusSettings, events: list[TaskEvent]) -> int:
    """Write task events and wait until the broker has acknowledged all of them."""
    async with EventProducer(settings) as producer:
        futures = [await producer.send("tasks", ev) for ev in events]
        await producer.wait_acks(futures)
    return len(events)
