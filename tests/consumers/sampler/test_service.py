"""The sampler service against the real broker: the initial pass, groups finishing into the
EMA, environment failures, benchmark tasks kept out, the pipeline bound, and a restart."""

from __future__ import annotations

import asyncio
import time

from consumers.sampler.frontier import FrontierConfig
from consumers.sampler.service import SamplerConfig, open_sampler, sampler_service
from producers.task_import import publish_tasks
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from topics.events import PolicyUpdate, Reward, RolloutRequest, TaskEvent


def _task(task_id: str, split: str = "train") -> TaskEvent:
    return TaskEvent(task_id=task_id, task={"id": task_id}, split=split, source="test")


class Reader:
    """Follows a topic from the start, keeping everything read."""

    def __init__(self, settings: BusSettings, topic_name: str) -> None:
        self.settings, self.topic, self.records = settings, topic_name, []
        self.consumer: EventConsumer | None = None

    async def until(self, done, timeout: float = 30) -> list:  # noqa: ANN001
        if self.consumer is None:
            self.consumer = EventConsumer(self.settings, [self.topic], group_id=None)
            await self.consumer.start()
            tps = await self.consumer.partitions_of(self.topic)
            self.consumer.raw.assign(tps)
            await self.consumer.raw.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while not done(self.records):
            assert time.monotonic() < deadline, f"{self.topic}: {len(self.records)} records"
            self.records += [
                r.event for r in await self.consumer.getmany(timeout_ms=100) if r.event
            ]
        return self.records

    async def drain(self, seconds: float = 1.0) -> list:
        """Read whatever else arrives within `seconds`."""
        end = time.monotonic() + seconds
        return await self.until(lambda rs: time.monotonic() > end, timeout=seconds + 30)

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


async def _judge(settings: BusSettings, requests: list[RolloutRequest], score) -> None:  # noqa: ANN001
    """Write a reward per request, as the judge would."""
    async with EventProducer(settings) as producer:
        futures = []
        for r in requests:
            value = score(r)
            reward = Reward(
                trajectory_id=f"{r.trajectory()}@0x", task_id=r.task_id, group_id=r.group_id,
                group_size=r.group_size, sample_index=r.sample_index, request_id=r.trajectory(),
                score=0.0 if value is None else value, scored=value is not None,
                status="error" if value is None else "done", judge_version="osworld-metrics-v1",
            )  # fmt: skip
            futures.append(await producer.send("reward", reward))
        await producer.wait_acks(futures)


async def test_sampler_feeds_the_pipeline_and_folds_rewards_into_task_stats(
    bus_settings: BusSettings,
) -> None:
    await publish_tasks(
        bus_settings,
        [_task(f"t{i}") for i in range(5)]
        + [_task("bench", "benchmark"), _task("held", "heldout")],
    )
    config = SamplerConfig(
        frontier=FrontierConfig(), batch_tasks=3, group_size=2, max_steps=7, max_in_flight=1,
        max_ahead=3, judge_version="osworld-metrics-v1",
    )  # fmt: skip
    requests, stats = Reader(bus_settings, "rollout-requests"), Reader(bus_settings, "task-stats")
    async with sampler_service(bus_settings, config) as runner:
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        # The initial pass: unseen tasks first, one group of n each; one batch in flight.
        first = await requests.until(lambda rs: len(rs) >= 6)
        await asyncio.sleep(0.5)
        assert len(requests.records) == 6, "a second batch before the first finished"
        assert {r.task_id for r in first} <= {f"t{i}" for i in range(5)}
        assert all(r.max_steps == 7 and r.group_size == 2 for r in first)
        # t-groups: one always solved, one environment failures only, the rest mixed.
        tasks = sorted({r.task_id for r in first})
        solved, broken = tasks[0], tasks[1]

        def score(r: RolloutRequest) -> float | None:
            if r.task_id == broken:
                return None
            return 1.0 if r.task_id == solved or r.sample_index == 0 else 0.0

        await _judge(bus_settings, first, score)
        await stats.until(lambda ss: len(ss) >= 2)
        by_task = {s.task_id: s for s in stats.records}
        assert by_task[solved].ema_pass_rate == 1.0 and by_task[solved].attempts == 1
        # Environment failures are no attempt; the group is still written as folded.
        await stats.until(lambda ss: broken in {s.task_id for s in ss})
        broken_stats = [s for s in stats.records if s.task_id == broken][-1]
        assert (broken_stats.attempts, broken_stats.rollouts, broken_stats.ema_pass_rate) == (
            0, 0, -1.0
        )  # fmt: skip
        assert broken_stats.last_group_id in broken_stats.folded_groups
        # The batch finished: the next one has the two unseen tasks and the broken one again.
        second = await requests.until(lambda rs: len(rs) >= 12)
        assert {r.task_id for r in second[6:]} == {t for t in (f"t{i}" for i in range(5))
                                                    if t not in tasks} | {broken}  # fmt: skip
        await _judge(bus_settings, second[6:], lambda r: 1.0)
        third = await requests.until(lambda rs: len(rs) >= 18)
        assert not any(r.task_id in ("bench", "held") for r in third)
        # Three batches and no trainer step: the sampler waits for the trainer (max_ahead=3).
        await _judge(bus_settings, third[12:], lambda r: 0.0)
        await asyncio.sleep(1.0)
        assert len(requests.records) == 18
        async with EventProducer(bus_settings) as producer:
            await producer.send_and_wait(
                "policy-updates", PolicyUpdate(policy_version=1, checkpoint_uri="x")
            )
        fourth = await requests.until(lambda rs: len(rs) >= 24)
        assert all(r.policy_version == 1 for r in fourth[18:])
        runner.stop()
        await asyncio.wait_for(task, 30)
    await stats.until(lambda ss: len({s.task_id for s in ss}) >= 5)
    await stats.drain()
    latest = {s.task_id: s for s in stats.records}

    # A restarted sampler restores every task's state from task-stats.
    async with open_sampler(bus_settings, config) as sampler:
        pool = sampler.pool
        for task_id, s in latest.items():
            restored = pool.stats(task_id)
            assert (restored.ema_pass_rate, restored.attempts) == (s.ema_pass_rate, s.attempts)
        assert "bench" not in pool.unseen() and "held" not in pool and pool.unseen() == []
    await requests.close()
    await stats.close()


async def test_refill_replaces_groups_the_trainer_cannot_use(bus_settings: BusSettings) -> None:
    # One batch ahead at most; the trainer skips all-equal groups. A batch with an all-failed
    # group would leave the trainer one group short and the sampler waiting for its step.
    tasks = [_task(f"r{i}") for i in range(6)]
    await publish_tasks(bus_settings, tasks)
    config = SamplerConfig(
        frontier=FrontierConfig(), batch_tasks=2, group_size=2, max_steps=3, max_in_flight=1,
        max_ahead=1, refill_unusable=True, group_id="sampler-refill",
    )  # fmt: skip
    requests = Reader(bus_settings, "rollout-requests")
    async with sampler_service(bus_settings, config) as runner:
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        first = await requests.until(lambda rs: len(rs) >= 4)
        stuck, mixed = sorted({r.task_id for r in first})
        await _judge(bus_settings, first, lambda r: float(r.task_id == mixed and r.sample_index))
        # Half a batch of usable groups: the sampler asks for another batch, no step needed.
        second = await requests.until(lambda rs: len(rs) >= 8)
        await _judge(bus_settings, second[4:], lambda r: float(r.sample_index))
        await asyncio.sleep(1.0)
        assert len(requests.records) == 8, "three usable groups are a batch and a half ahead"
        assert runner.processor.stats()["unusable_groups"] == 1
        assert runner.runner.metrics_snapshot()["unusable_groups"] == 1  # and in /metrics
        runner.stop()
        await asyncio.wait_for(task, 30)
    await requests.close()
