"""Rollout requests by hand: one GRPO group of n requests for a task (`scalecua request`).

The sampler writes requests in production; this is the manual path, for smoke tests,
benchmarks, `scalecua up` before the sampler runs, and evaluation.
"""

from __future__ import annotations

import uuid

from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import builtin_ids
from runtime.envs.tasks.catalog import keys_with_id
from runtime.errors import TaskError
from runtime.tables import TopicTable
from topics.events import RolloutRequest, TaskEvent

__all__ = ["find_task_key", "request_group", "publish_requests"]


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


async def find_task_key(settings: BusSettings, ref: str) -> str:
    """The key a rollout worker plays `ref` as: a key of `tasks`, a built-in id, or the JSON id
    of exactly one task on `tasks`; TaskError when there is none, or several to choose from."""
    if ref in builtin_ids():
        return ref
    tasks = await TopicTable(settings, "tasks").start()
    try:
        if tasks.get(ref) is not None:
            return ref
        rows = ((e.task_id, e.task) for e in tasks.values() if isinstance(e, TaskEvent))
        keys = keys_with_id(rows, ref)
    finally:
        await tasks.stop()
    if len(keys) == 1:
        return keys[0]
    if keys:
        raise TaskError(f"{len(keys)} tasks on `tasks` have the id {ref}: name one by its key "
                        f"({', '.join(keys)})")  # fmt: skip
    raise TaskError(
        f"no such task {ref} (not built in, see `scalecua tasks list`; not a key or id on the "
        "`tasks` topic, see `scalecua tasks import`)"
    )
