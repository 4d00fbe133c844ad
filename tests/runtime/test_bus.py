"""The typed bus against a real broker: keys, per-trajectory ordering, bounded failures."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from runtime.broker import EmbeddedBroker, free_port, wait_until_ready
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from runtime.errors import BrokerError, BrokerTimeout, SchemaError
from runtime.isolation.lifetime import alive
from topics.events import Reward, RolloutStep


async def test_steps_of_a_trajectory_stay_ordered_in_one_partition(
    bus_settings: BusSettings,
) -> None:
    trajectories = [f"g-{i}/0" for i in range(12)]
    async with EventProducer(bus_settings) as producer:
        futures = []
        for step in range(30):
            for tid in trajectories:  # interleaved, as many workers would write
                ev = RolloutStep(trajectory_id=tid, step=step, response_ids=[step])
                futures.append(await producer.send("rollout-step", ev))
        await producer.wait_acks(futures)

    seen: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    async with EventConsumer(bus_settings, ["rollout-step"], group_id="order-check") as consumer:
        deadline = time.monotonic() + 20
        while sum(map(len, seen.values())) < 360 and time.monotonic() < deadline:
            for r in await consumer.getmany(timeout_ms=200):
                assert r.key == r.event.trajectory_id.encode()
                seen[r.event.trajectory_id].append((r.partition, r.offset, r.event.step))
    assert sum(map(len, seen.values())) == 360
    partitions_used = set()
    for tid, rows in seen.items():
        assert len({p for p, _, _ in rows}) == 1, f"{tid} spread over partitions"
        assert [s for _, _, s in rows] == list(range(30)), f"{tid} out of order"
        partitions_used.add(rows[0][0])
    assert len(partitions_used) > 1  # keys spread trajectories over partitions


async def test_wrong_event_type_for_topic_is_rejected(bus_settings: BusSettings) -> None:
    async with EventProducer(bus_settings) as producer:
        with pytest.raises(SchemaError, match="takes Reward"):
            await producer.send("reward", RolloutStep(trajectory_id="t", step=0))


async def test_producer_fails_fast_when_broker_is_down() -> None:
    settings = BusSettings(bootstrap=f"127.0.0.1:{free_port()}", connect_timeout_s=3)
    started = time.monotonic()
    with pytest.raises(BrokerError):
        await EventProducer(settings).start()
    assert time.monotonic() - started < 10


async def test_consumer_fails_fast_when_broker_is_down() -> None:
    settings = BusSettings(bootstrap=f"127.0.0.1:{free_port()}", connect_timeout_s=3)
    started = time.monotonic()
    with pytest.raises(BrokerError):
        await EventConsumer(settings, ["reward"], group_id="g").start()
    assert time.monotonic() - started < 10


async def test_readiness_wait_is_bounded() -> None:
    with pytest.raises(BrokerTimeout, match="not ready"):
        await wait_until_ready(f"127.0.0.1:{free_port()}", timeout_s=1.0)


async def test_send_after_broker_dies_raises_instead_of_hanging(tmp_path) -> None:  # noqa: ANN001
    broker = await EmbeddedBroker(log_file=tmp_path / "b.log").start()
    settings = BusSettings(bootstrap=broker.bootstrap, request_timeout_ms=3000)
    producer = await EventProducer(settings).start()
    ev = Reward(trajectory_id="t", task_id="a", group_id="g", group_size=1, score=1.0)
    await producer.send_and_wait("reward", ev)
    broker.stop()
    started = time.monotonic()
    with pytest.raises(BrokerError):
        await producer.send_and_wait("reward", ev)
    assert time.monotonic() - started < 20
    await producer.stop()


async def test_a_failed_flush_on_shutdown_does_not_hide_the_cause(tmp_path: Path) -> None:
    broker = await EmbeddedBroker(log_file=tmp_path / "b.log").start()
    settings = BusSettings(bootstrap=broker.bootstrap, request_timeout_ms=1000, linger_ms=500)
    try:
        with pytest.raises(ValueError, match="the real cause"):
            async with EventProducer(settings) as producer:
                await producer.send("reward", Reward(
                    trajectory_id="g/0", task_id="t", group_id="g", group_size=1, score=1.0
                ))  # fmt: skip
                broker.stop()  # queued, unsendable: the flush on the way out fails
                raise ValueError("the real cause")
    finally:
        broker.stop()


async def test_an_embedded_broker_dies_with_a_parent_killed_by_sigkill() -> None:
    # A bench killed by the OOM killer runs no clean-up; its broker once stayed behind.
    script = (
        "import asyncio\n"
        "from runtime.broker import EmbeddedBroker\n"
        "async def main():\n"
        "    broker = await EmbeddedBroker().start()\n"
        "    print(broker.pid, flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    broker_pid = int(await asyncio.wait_for(parent.stdout.readline(), 60))
    assert alive(broker_pid)
    parent.kill()
    await parent.wait()
    for _ in range(100):
        if not alive(broker_pid):
            break
        await asyncio.sleep(0.1)
    assert not alive(broker_pid)
