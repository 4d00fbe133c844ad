"""The service runner: outputs before commits, dead-letters, low-watermarks, graceful stop."""

from __future__ import annotations

import asyncio
import time

from aiokafka import TopicPartition

from runtime.bus import EventConsumer, EventProducer, Record
from runtime.config import BusSettings
from runtime.processor import Output, Processor
from runtime.service import ServiceRunner
from tests.bus_reading import read_records
from topics.codec import decode
from topics.events import Reward, TaskStats


class ScoreToStats(Processor):
    """A tiny real processor: every reward becomes task stats; negative scores are refused."""

    name = "score-to-stats"
    topics = ["reward"]

    async def process(self, record: Record) -> list[Output]:
        reward = record.event
        if reward.score < 0:
            raise ValueError(f"negative score {reward.score} for {reward.trajectory_id}")
        stats = TaskStats(
            task_id=reward.task_id, ema_pass_rate=reward.score, weight=1.0, attempts=1
        )
        return [Output("task-stats", stats)]


class HoldsEverything(ScoreToStats):
    """A stateful processor that never releases its first offset (to test low-watermarks)."""

    name = "holder"

    def __init__(self) -> None:
        self.first: dict[TopicPartition, int] = {}

    async def process(self, record: Record) -> list[Output]:
        self.first.setdefault(record.tp, record.offset)
        return []

    def low_watermark(self, tp: TopicPartition) -> int | None:
        return self.first.get(tp)

    async def tick(self) -> list[Output]:
        return []

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        return []

    async def close(self) -> list[Output]:
        return []


def _reward(i: int, score: float) -> Reward:
    return Reward(
        trajectory_id=f"g/{i}", task_id=f"task-{i}", group_id="g", group_size=8, score=score
    )


async def _committed(settings: BusSettings, group: str, topic_name: str) -> dict[int, int | None]:
    async with EventConsumer(settings, [topic_name], group_id=None) as probe:
        tps = await probe.partitions_of(topic_name)
    consumer = EventConsumer(settings, [], group_id=group)
    await consumer.start()
    try:
        return {tp.partition: await consumer.raw.committed(tp) for tp in tps}
    finally:
        await consumer.stop()


async def _run_until(runner: ServiceRunner, condition, timeout: float = 30) -> None:  # noqa: ANN001
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    runner.stop()
    await asyncio.wait_for(task, 30)


async def test_runner_produces_dead_letters_and_commits(bus_settings: BusSettings) -> None:
    scores = [1.0, 0.0, -1.0, 0.5, 1.0, -0.2, 0.0, 1.0]  # a reward lies in [-1, 1]
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks(
            [await producer.send("reward", _reward(i, s)) for i, s in enumerate(scores)]
        )
        garbage = await producer.send_raw("reward", b"\x93garbage\x00", key=b"g/99")
        await producer.wait_acks([garbage])

    runner = ServiceRunner(ScoreToStats(), bus_settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= len(scores) + 1)
    assert runner.metrics.processed == 6 and runner.metrics.dead_lettered == 3

    stats = await read_records(bus_settings, "task-stats", 6, timeout=20)
    assert sorted(r.event.task_id for r in stats) == sorted(
        f"task-{i}" for i, s in enumerate(scores) if s >= 0
    )
    dead = await read_records(bus_settings, "dead-letter", 3, timeout=20)
    by_kind = sorted((d.event.error_type, d.event.source_topic) for d in dead)
    assert by_kind == [("decode", "reward"), ("process", "reward"), ("process", "reward")]
    for d in dead:
        assert d.event.service == "score-to-stats"
        if d.event.error_type == "decode":
            assert d.event.original_value == b"\x93garbage\x00" and d.event.original_key == b"g/99"
            assert "not a Reward" in d.event.error
        else:
            assert "negative score" in d.event.error
            assert decode("reward", d.event.original_value).score < 0

    committed = await _committed(bus_settings, "score-to-stats", "reward")
    total = sum(v for v in committed.values() if v is not None)
    assert total == len(scores) + 1  # every record consumed is committed, garbage included


async def test_stateful_processor_commits_its_low_watermark(bus_settings: BusSettings) -> None:
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks(
            [await producer.send("reward", _reward(0, 1.0), key=b"same") for _ in range(5)]
        )
    processor = HoldsEverything()
    runner = ServiceRunner(processor, bus_settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= 5)
    (tp,) = processor.first
    committed = await _committed(bus_settings, "holder", "reward")
    assert (
        committed[tp.partition] == processor.first[tp] == 0
    )  # still needed: not committed past it


async def test_graceful_stop_is_prompt(bus_settings: BusSettings) -> None:
    runner = ServiceRunner(ScoreToStats(), bus_settings)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    await asyncio.wait_for(runner.ready.wait(), 20)
    started = time.monotonic()
    runner.stop()
    await asyncio.wait_for(task, 15)
    assert time.monotonic() - started < 15


class SlowScoreToStats(ScoreToStats):
    """Takes a while per record, so a backlog outlasts a prompt stop."""

    name = "slow-score-to-stats"

    async def process(self, record: Record) -> list[Output]:
        await asyncio.sleep(0.05)
        return await super().process(record)

    def wants(self) -> int:
        return 4  # small polls: the backlog spans many of the runner's loops


async def test_drain_finishes_a_backlog_written_just_before_it(bus_settings: BusSettings) -> None:
    runner = ServiceRunner(SlowScoreToStats(), bus_settings)
    assert not await runner.drain(1)  # not running: nothing to wait for
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    await asyncio.wait_for(runner.ready.wait(), 20)
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks(
            [await producer.send("reward", _reward(i, 1.0)) for i in range(40)]
        )
    assert runner.metrics.processed < 40  # a stop now would leave a backlog behind
    assert await runner.drain(60)
    assert runner.metrics.processed == 40 and runner.metrics.produced == 40
    runner.stop()
    await asyncio.wait_for(task, 30)
    committed = await _committed(bus_settings, "slow-score-to-stats", "reward")
    assert sum(v for v in committed.values() if v is not None) == 40
    assert len(await read_records(bus_settings, "task-stats", 40, timeout=20)) == 40


async def test_metrics_endpoint_reports_counters_and_lag(bus_settings: BusSettings) -> None:
    import httpx

    from runtime.broker import free_port

    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send("reward", _reward(i, 1.0)) for i in range(4)])
    port = free_port()
    runner = ServiceRunner(ScoreToStats(), bus_settings, metrics_port=port)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    try:
        deadline = time.monotonic() + 20
        while runner.metrics.processed < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient() as client:
            body = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        runner.stop()
        await asyncio.wait_for(task, 20)
    assert 'scalecua_processed_total{service="score-to-stats"} 4.0' in body
    assert 'scalecua_lag{service="score-to-stats"} 0.0' in body
    assert 'scalecua_process_seconds_count{service="score-to-stats"} 4.0' in body
