"""Task importer: OSWorld-format task files (or the built-in pool) onto the `tasks` topic.

The topic is compacted and keyed by task id, so importing again replaces a task's old
version. Setup files named by relative path stay on the importing machine; tasks meant
for a cluster should reference files by URL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import builtin_ids, load_builtin
from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.support import unsupported_parts
from runtime.errors import TaskError
from topics.events import TaskEvent

__all__ = [
    "task_event",
    "builtin_task_events",
    "file_task_events",
    "publish_tasks",
    "Unsupported",
    "split_supported",
]

SPLITS = ("train", "heldout", "benchmark")  # only train tasks are ever trained on


def task_event(task: Task, *, source: str, split: str = "train") -> TaskEvent:
    """Wrap a task as a `tasks` event."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, not {split!r}")
    return TaskEvent(task_id=task.id, task=task.to_dict(), source=source, split=split)


def builtin_task_events(split: str = "train") -> list[TaskEvent]:
    """Return the built-in pool as `tasks` events."""
    return [task_event(load_builtin(i), source="builtin", split=split) for i in builtin_ids()]


def file_task_events(paths: Iterable[str | Path], *, source: str, split: str) -> list[TaskEvent]:
    """Return task events for files and folders of OSWorld-format JSON (folders recursively)."""
    events = []
    for path in map(Path, paths):
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        events.extend(task_event(load_task(f), source=source, split=split) for f in files)
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
