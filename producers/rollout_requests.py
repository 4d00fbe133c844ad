"""Rollout requests by hand: one GRPO group of n requests for a task (`scalecua request`).

The sampler writes requests in production; this is the manual path, for smoke tests,
benchmarks, `scalecua up` before the sampler runs, and evaluation.
"""

from __future__ import annotations

import uuid

from runtime.bus import EventProducer
from runtime.config import BusSettings
from topics.events import RolloutRequest

__all__ = ["request_group", "publish_requests"]


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
