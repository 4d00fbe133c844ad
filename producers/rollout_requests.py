"""Rollout requests by hand: one GRPO group of n requests for a task (`scalecua request`).

The sampler writes requests in production; this is the manual path, for smoke tests,
benchmarks, `scalecua up` before the sampler runs, and evaluation.
"""

from __future__ import annotations

import uuid

from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import builtin_ids
from runtime.tables import TopicTable
from topics.events import RolloutRequest

__all__ = ["request_group", "publish_requests", "task_source"]


def request_group(
    task_id: str,
    n: int,
    *,
    max_steps: int = 15,
    policy_version: int = 0,
    group_id: str | None = None,
) -> list[RolloutRequest]:
    """Return the n requests of one group for a task (group ids are unique by default)."""
    if n < 1:
        raise ValueError("a group has at least one request")
    group = group_id or f"{task_id}-{uuid.uuid4().hex[:8]}"
    return [
        RolloutRequest(
            task_id=task_id,
            group_id=group,
            group_size=n,
            sample_index=i,
            policy_version=policy_version,
            max_steps=max_steps,
        )
        for i in range(n)
    ]


async def publish_requests(settings: BusSettings, requests: list[RolloutRequest]) -> int:
    """Write requests and wait until the broker acknowledged all of them."""
    async with EventProducer(settings) as producer:
        await producer.wait_acks([await producer.send("rollout-requests", r) for r in requests])
    return len(requests)


async def task_source(settings: BusSettings, task_id: str) -> str | None:
    """Where a rollout worker finds this task: "builtin", "topic" (`tasks`), or None (nowhere).

    The worker plays a task from the `tasks` topic (imported, generated, VeriGen) and else from
    the built-in pool, so a task that is only on the topic is as playable as a built-in one.
    """
    if task_id in builtin_ids():
        return "builtin"
    tasks = await TopicTable(settings, "tasks").start()
    try:
        return "topic" if tasks.get(task_id) is not None else None
    finally:
        await tasks.stop()
