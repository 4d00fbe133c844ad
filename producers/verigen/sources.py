"""What trajectory-guided synthesis and the overlap audit read, and where the audit's filter
writes: the I/O around the pure augment.py, deviation.py, compose.py and audit.py.

    log = await read_log(settings)                       # the live log...
    log = await read_log(None, archive="var/archive")    # ...or the archive's Parquet
    tasks = training_tasks(log.tasks)                    # train split, solutions, self-contained
    benchmark, skipped = load_task_folder("osworld/examples")
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.config import BusSettings
from runtime.envs.tasks.builtin import POOL_DIR, builtin_ids, reference_solution
from runtime.envs.tasks.scienceboard import is_scienceboard, to_osworld
from runtime.errors import TaskError
from topics.events import Event, Reward, RolloutStep, TaskEvent, TrajectoryComplete

__all__ = [
    "LogSnapshot",
    "load_task_folder",
    "publish_benchmark_split",
    "read_log",
    "read_tasks",
    "training_tasks",
    "MAX_INLINE_BYTES",
]

MAX_INLINE_BYTES = 256 * 1024  # a task's uploaded files inlined into its setup, at most
_BOOKKEEPING = ("validation", "provenance", "audit")  # not what a task is: left out of seeds
_TOPICS = {
    "rollout-step": RolloutStep,
    "trajectory-complete": TrajectoryComplete,
    "reward": Reward,
    "tasks": TaskEvent,
}


@dataclass
class LogSnapshot:
    """The rollouts and tasks of a log (or an archive), as events."""

    steps: list[RolloutStep] = field(default_factory=list)
    completes: list[TrajectoryComplete] = field(default_factory=list)
    rewards: list[Reward] = field(default_factory=list)
    tasks: dict[str, TaskEvent] = field(default_factory=dict)  # the latest event per task

    def add(self, event: Event) -> None:
        """File one event under its kind (a task replaces an older version of itself)."""
        if isinstance(event, RolloutStep):
            self.steps.append(event)
        elif isinstance(event, TrajectoryComplete):
            self.completes.append(event)
        elif isinstance(event, Reward):
            self.rewards.append(event)
        elif isinstance(event, TaskEvent):
            seen = self.tasks.get(event.task_id)
            if seen is None or event.ts_ms >= seen.ts_ms:
                self.tasks[event.task_id] = event

    def counts(self) -> dict[str, int]:
        """Events read per kind."""
        return {
            "rollout_steps": len(self.steps),
            "trajectories": len(self.completes),
            "rewards": len(self.rewards),
            "tasks": len(self.tasks),
        }


async def read_log(
    settings: BusSettings | None,
    *,
    archive: str | None = None,
    runs: list[str] | None = None,
    topics: Iterable[str] = tuple(_TOPICS),
) -> LogSnapshot:
    """Read rollouts and tasks from the live log, or from an archive (`runs`: ["latest"] or ids)."""
    out = LogSnapshot()
    if archive is not None:
        from runtime.archive.layout import table_to_events
        from runtime.archive.store import ArchiveStore
        from runtime.replay import read_archive

        if runs == ["latest"]:
            runs = (await asyncio.to_thread(ArchiveStore(archive).runs))[-1:]
        for name in topics:
            table = await asyncio.to_thread(read_archive, archive, name, runs=runs)
            for event in table_to_events(_TOPICS[name], table):
                out.add(event)
        return out
    from runtime.replay import collect_live

    if settings is None:
        raise ValueError("reading the live log needs bus settings")
    for name in topics:
        records, _ = await collect_live(settings, name)
        for record in records:
            out.add(record.event)
    return out


async def read_tasks(settings: BusSettings) -> dict[str, TaskEvent]:
    """Every task on the live `tasks` topic (its latest version)."""
    return (await read_log(settings, topics=["tasks"])).tasks


def _task_files(task: dict[str, Any], base_dir: Path) -> dict[str, bytes]:
    """The bytes of the task-folder files its `upload_file` steps name (within a bound)."""
    files: dict[str, bytes] = {}
    total = 0
    for step in task.get("config") or []:
        if step.get("type") != "upload_file":
            continue
        for entry in (step.get("parameters") or {}).get("files") or []:
            local = entry.get("local_path") if isinstance(entry, dict) else None
            if not isinstance(local, str) or local.startswith(("/", "file:")) or ".." in local:
                continue
            path = base_dir / local
            if not path.is_file():
                continue
            total += path.stat().st_size
            if total > MAX_INLINE_BYTES:
                return files
            files[local] = path.read_bytes()
    return files


def training_tasks(tasks: dict[str, TaskEvent]) -> dict[str, dict[str, Any]]:
    """The `train` tasks as JSON ready for seeds, with solutions and no task-folder files.

    Bookkeeping (validation, provenance, audit) is dropped; a solution is attached when one
    is known (the task's own, a built-in's reference); a built-in's uploaded files are
    written by its setup instead (a generated task has no folder).
    """
    from producers.verigen.compose import inline_uploads

    builtin = set(builtin_ids())
    out: dict[str, dict[str, Any]] = {}
    for task_id, event in tasks.items():
        if event.split != "train":
            continue
        task = {k: v for k, v in event.task.items() if k not in _BOOKKEEPING}
        task["id"] = task_id
        is_builtin = event.source == "builtin" and task_id in builtin
        if not isinstance(task.get("solution"), list) and is_builtin:
            try:
                task["solution"] = reference_solution(task_id)
            except TaskError:
                pass
        if is_builtin:
            task["config"] = inline_uploads(task.get("config") or [], _task_files(task, POOL_DIR))
        out[task_id] = task
    return out


def load_task_folder(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every task JSON under a folder (recursively), OSWorld's or ScienceBoard's (read in
    OSWorld's shape, its file's name as its id), and the files that are not tasks."""
    root = Path(path)
    if not root.exists():
        raise TaskError(f"{root}: no such folder or file")
    files = sorted(root.rglob("*.json")) if root.is_dir() else [root]
    tasks, skipped = [], []
    for file in files:
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            skipped.append(str(file))
            continue
        if is_scienceboard(raw):
            try:
                raw = to_osworld(raw, file.stem, str(file))
            except TaskError:
                skipped.append(str(file))
                continue
        if not (isinstance(raw, dict) and "instruction" in raw and "evaluator" in raw):
            skipped.append(str(file))  # an index such as OSWorld's test_all.json
            continue
        raw.setdefault("id", file.stem)
        raw["_path"] = str(file.relative_to(root)) if root.is_dir() else file.name
        tasks.append(raw)
    return tasks, skipped


async def publish_benchmark_split(
    settings: BusSettings, events: list[TaskEvent], audit: dict[str, dict[str, Any]]
) -> int:
    """Re-publish tasks under `split: benchmark`, their audit findings in the task JSON.

    The sampler admits only `train` tasks, so these are never sampled again; `audit` maps a
    task id to its record.
    """
    from runtime.bus import EventProducer

    async with EventProducer(settings) as producer:
        futures = []
        for event in events:
            task = {**event.task, "audit": audit.get(event.task_id, {})}
            flagged = TaskEvent(
                task_id=event.task_id, task=task, source=event.source, split="benchmark",
                difficulty=event.difficulty,
            )  # fmt: skip
            futures.append(await producer.send("tasks", flagged))
        await producer.wait_acks(futures)
    return len(events)
