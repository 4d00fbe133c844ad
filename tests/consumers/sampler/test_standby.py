"""Two `scalecua sample` processes on one pipeline: one is active and writes the batches, the
other waits; kill -9 of the active one and the standby takes over, counting every group once
(also the group whose rewards were half in when the active one died)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from producers.task_import import publish_tasks
from runtime.config import BusSettings
from tests.bus_reading import read_records, read_until
from tests.consumers.sampler.harness import SamplerProcess, latest_stats, reward_on, write_rewards
from topics.events import RolloutRequest, TaskEvent

ARGS = ("--batch", "2", "--n", "2", "--in-flight", "1", "--ahead", "9")


def _by(pid: int, requests: list[RolloutRequest]) -> list[RolloutRequest]:
    return [r for r in requests if r.producer_id == f"{socket.gethostname()}:{pid}"]


async def _requests(settings: BusSettings, n: int) -> list[RolloutRequest]:
    records = await read_until(settings, "rollout-requests", lambda rs: len(rs) >= n, 60)
    return [r.event for r in records]


async def _judge(settings: BusSettings, requests: list[RolloutRequest]) -> None:
    """Reward each request, alternating partitions so every group spans two of them."""
    rewards = [
        reward_on(r.sample_index % 2 * 2, r.task_id, r.group_id, r.sample_index, r.group_size)
        for r in requests
    ]
    await write_rewards(settings, rewards)


def _groups(requests: list[RolloutRequest]) -> dict[str, list[RolloutRequest]]:
    out: dict[str, list[RolloutRequest]] = {}
    for r in requests:
        out.setdefault(r.group_id, []).append(r)
    return out


async def test_one_sampler_acts_the_other_waits_and_takes_over_after_kill_9(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    await publish_tasks(bus_settings, [TaskEvent(task_id=f"t{i}", task={}) for i in range(4)])
    a = SamplerProcess(cli_env, tmp_path / "a.log", *ARGS)
    b = None
    try:
        first = await _requests(bus_settings, 4)
        b = SamplerProcess(cli_env, tmp_path / "b.log", *ARGS)
        await b.wait_for("sampler: frontier, B=2")  # started; a second active one writes now
        records = await read_records(bus_settings, "rollout-requests", 4, grace=5.0)
        ids = sorted(r.event.event_id for r in records)
        assert ids == sorted(r.event_id for r in first), "a second batch was written"
        assert _by(a.pid, first) == first
        await b.wait_for("standby until elected")
        assert "active (term" not in b.text()
        # The election rebalanced when b joined: a stood down for it and kept its term.
        await a.wait_for("resuming with the state kept")

        # a's batch finishes; a (still the only writer) asks for the next one.
        await _judge(bus_settings, first)
        second = (await _requests(bus_settings, 8))[4:]
        assert _by(a.pid, second) == second
        # One group of it complete, the other half rewarded: then a dies.
        whole, half = _groups(second).values()
        await _judge(bus_settings, [*whole, half[0]])
        await latest_stats(bus_settings, lambda s: whole[0].task_id in s and any(
            x.last_group_id == whole[0].group_id for x in s[whole[0].task_id]))  # fmt: skip
        killed_ms = time.time() * 1000
        a.kill9()

        # b takes over, picks up the half group and asks for a batch of its own.
        await b.wait_for("sampler: active (term", timeout=60)
        await _judge(bus_settings, [half[1]])
        third = (await _requests(bus_settings, 12))[8:]
        assert _by(b.pid, third) == third and all(r.ts_ms > killed_ms for r in third)
        await _judge(bus_settings, third)
        judged = [*_groups(first).values(), whole, half, *_groups(third).values()]
        per_task: dict[str, int] = {}
        for group in judged:
            per_task[group[0].task_id] = per_task.get(group[0].task_id, 0) + 1
        stats = await latest_stats(
            bus_settings,
            lambda s: all(t in s and s[t][-1].attempts >= n for t, n in per_task.items()),
        )  # fmt: skip
        assert b.terminate() == 0, b.text()[-3000:]
    finally:
        a.close()
        if b is not None:
            b.close()

    # Every group counted once: attempts rise by one per record and end at the groups judged.
    stats = await latest_stats(bus_settings, lambda s: set(per_task) <= set(s))
    for task, n in per_task.items():
        assert [r.attempts for r in stats[task]] == list(range(1, n + 1)), task
        assert stats[task][-1].rollouts == 2 * n
    requests = await _requests(bus_settings, 12)
    assert len(_by(a.pid, requests)) == 8
    assert all(r.ts_ms > killed_ms for r in _by(b.pid, requests))
    assert len(_by(a.pid, requests)) + len(_by(b.pid, requests)) == len(requests)
