"""Test harness: a rollout worker and a judge in-process against the test broker, and reading
what they wrote."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from consumers.judge.service import Judge, JudgeConfig
from consumers.rollout.episode import EpisodeConfig
from consumers.rollout.players import Player
from consumers.rollout.service import RolloutConfig, rollout_service
from producers.task_import import publish_tasks
from runtime.blobstore import BlobStore
from runtime.config import BusSettings
from runtime.envs.tasks.model import Task
from runtime.service import ServiceRunner
from topics.events import TaskEvent

WAIT_TASK = {
    "id": "test-wait-and-echo",
    "instruction": "Wait a little, then finish.",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo ok", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
    },
    # played by the scripted policy: long enough to kill things mid-episode
    "solution": [{"action": "wait", "duration": 1.5}] * 4 + [{"action": "done"}],
}


async def publish_task(settings: BusSettings, raw: dict) -> None:
    """Put an OSWorld-format task on `tasks` (the worker's task table reads it)."""
    task = Task.from_dict(raw)
    await publish_tasks(settings, [TaskEvent(task_id=task.id, task=task.to_dict(), source="test")])


@contextlib.asynccontextmanager
async def services(
    settings: BusSettings,
    player: Player,
    blobs: BlobStore,
    *,
    desktops: int = 1,
    observe: str = "screenshot",
    image_max_side: int = 640,
    reload: str = "episode",
    judge: bool = True,
    checkpoints: str | None = None,
) -> AsyncIterator[ServiceRunner]:
    """A rollout worker (and a judge) running until the block ends; yields the worker's runner.

    `checkpoints`: the run's checkpoint root, the only one whose updates the worker adopts.
    """
    config = RolloutConfig(
        desktops=desktops,
        reload=reload,
        episode=EpisodeConfig(observe=observe, image_max_side=image_max_side),
        checkpoints=checkpoints,
    )
    async with rollout_service(settings, config, player, blobs) as runner:
        runners = [runner]
        if judge:
            runners.append(ServiceRunner(Judge(JudgeConfig(), blobs), settings))
        tasks = [asyncio.create_task(r.run(install_signal_handlers=False)) for r in runners]
        try:
            await asyncio.wait_for(runner.ready.wait(), 60)
            yield runner
        finally:
            for r in runners:
                r.stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 90)
