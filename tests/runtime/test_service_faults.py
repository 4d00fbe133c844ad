"""The service runner under faults, against the real broker: scaling a group in and out under
load, poison outputs and near-limit records, duplicates, infrastructure failures."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable

import pytest

from runtime.bus import EventProducer, Record
from runtime.config import BusSettings
from runtime.errors import BrokerError, InfrastructureError, ServiceHalted
from runtime.processor import Output, Processor
from runtime.retry import RetryPolicy
from runtime.service import ServiceRunner
from tests.bus_reading import committed_total, read_records
from topics.events import (
    DEAD_LETTER_VALUE_CAP,
    Reward,
    RolloutStep,
    TaskStats,
    TrajectoryComplete,
)


def _step(i: int) -> RolloutStep:
    return RolloutStep(trajectory_id=f"traj-{i % 97}", step=i, response_ids=[i])


async def _produce_steps(settings: BusSettings, ids: range) -> None:
    async with EventProducer(settings) as producer:
        await producer.wait_acks([await producer.send("rollout-step", _step(i)) for i in ids])


async def _run_until(runner: ServiceRunner, done: Callable[[], bool]) -> None:
    """Run `runner` until `done()` (at most 30 s, or until it ends by itself), then stop it."""
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    deadline = time.monotonic() + 30
    while not done() and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    runner.stop()
    await asyncio.wait_for(task, 30)  # raises what ended the runner, if anything did


class SlowEcho(Processor):
    """Every step becomes a trajectory-complete after an await (as every real processor has)."""

    name = "slow-echo"
    topics = ["rollout-step"]

    def __init__(self, delay_s: float = 0.01) -> None:
        self.delay_s = delay_s
        self.handled = 0

    async def process(self, record: Record) -> list[Output]:
        await asyncio.sleep(self.delay_s)
        self.handled += 1
        step = record.event
        done = TrajectoryComplete(
            trajectory_id=f"{step.trajectory_id}:{step.step}", status="done", num_steps=1
        )
        return [Output("trajectory-complete", done)]


async def test_scaling_out_and_in_under_load_kills_no_member_and_loses_no_output(
    bus_settings: BusSettings,
) -> None:
    n = 1200  # about 12 s of work for one member: every rebalance lands mid-batch
    await _produce_steps(bus_settings, range(n))
    members = [SlowEcho() for _ in range(3)]
    runners = [ServiceRunner(m, bus_settings, metrics_interval_s=3600) for m in members]
    tasks = [asyncio.create_task(runners[0].run(install_signal_handlers=False))]
    for runner in runners[1:]:
        await asyncio.sleep(2.0)  # members join while the others are mid-stream
        tasks.append(asyncio.create_task(runner.run(install_signal_handlers=False)))
        await asyncio.wait_for(runner.ready.wait(), 30)
    await asyncio.sleep(1.0)
    runners[1].stop()  # ...and one leaves while records are still flowing
    await asyncio.wait_for(tasks[1], 30)
    for i in (0, 2):
        assert not tasks[i].done(), f"member {i} died: {tasks[i].exception()}"
    deadline = time.monotonic() + 90
    while sum(m.handled for m in members) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        for i in (0, 2):
            assert not tasks[i].done(), f"member {i} died: {tasks[i].exception()}"
    await asyncio.sleep(1.0)
    for i in (0, 2):
        runners[i].stop()
        await asyncio.wait_for(tasks[i], 30)  # raises if the member died
    assert members[0].handled and members[1].handled, [m.handled for m in members]

    outputs = await read_records(bus_settings, "trajectory-complete", n, grace=0.5)
    produced = {r.event.trajectory_id for r in outputs}
    expected = {f"traj-{i % 97}:{i}" for i in range(n)}
    assert produced == expected, f"{len(expected - produced)} inputs have no output"
    assert await committed_total(bus_settings, "slow-echo", "rollout-step") == n


class Pairs(Processor):
    """Holds a trajectory's first step until its second arrives (a stateful processor)."""

    name = "pairs"
    topics = ["rollout-step"]

    def __init__(self) -> None:
        self.held: dict[str, Record] = {}

    async def process(self, record: Record) -> list[Output]:
        trajectory = record.event.trajectory_id
        if self.held.pop(trajectory, None) is None:
            self.held[trajectory] = record
            return []
        return [
            Output(
                "trajectory-complete",
                TrajectoryComplete(trajectory_id=trajectory, status="done", num_steps=2),
            )
        ]

    def low_watermark(self, tp: object) -> int | None:
        offsets = [r.offset for r in self.held.values() if r.tp == tp]
        return min(offsets) if offsets else None

    async def tick(self) -> list[Output]:
        return []

    async def on_assigned(self, partitions: set) -> None:
        pass

    async def on_revoked(self, partitions: set) -> list[Output]:
        self.held = {t: r for t, r in self.held.items() if r.tp not in partitions}
        return []

    async def close(self) -> list[Output]:
        return []


async def test_a_rebalance_loses_no_record_a_stateful_member_held(
    bus_settings: BusSettings,
) -> None:
    pairs = 60
    first = [RolloutStep(trajectory_id=f"pair-{j}", step=0, response_ids=[j]) for j in range(pairs)]
    second = [
        RolloutStep(trajectory_id=f"pair-{j}", step=1, response_ids=[j]) for j in range(pairs)
    ]
    members = [Pairs(), Pairs()]
    runners = [ServiceRunner(m, bus_settings, metrics_interval_s=3600) for m in members]
    tasks = [asyncio.create_task(runners[0].run(install_signal_handlers=False))]
    try:
        await asyncio.wait_for(runners[0].ready.wait(), 30)
        async with EventProducer(bus_settings) as producer:
            await producer.wait_acks([await producer.send("rollout-step", s) for s in first])
        deadline = time.monotonic() + 30
        while len(members[0].held) < pairs and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(members[0].held) == pairs
        await asyncio.sleep(0.5)  # a commit interval: the held offsets are what is committed
        # A second member joins: every first half moves or is re-read after the rebalance.
        tasks.append(asyncio.create_task(runners[1].run(install_signal_handlers=False)))
        await asyncio.wait_for(runners[1].ready.wait(), 30)
        await asyncio.sleep(1.0)
        async with EventProducer(bus_settings) as producer:
            await producer.wait_acks([await producer.send("rollout-step", s) for s in second])
        outputs = await read_records(
            bus_settings, "trajectory-complete", pairs, timeout=30, grace=0.5
        )
    finally:
        for runner, task in zip(runners, tasks, strict=False):
            runner.stop()
            await asyncio.wait_for(task, 30)
    completed = {r.event.trajectory_id for r in outputs}
    assert completed == {f"pair-{j}" for j in range(pairs)}, f"{pairs - len(completed)} lost"


class WrongType(Processor):
    """Returns an event of the wrong type for the topic on odd steps."""

    name = "wrong-type"
    topics = ["rollout-step"]

    async def process(self, record: Record) -> list[Output]:
        step = record.event
        if step.step % 2:
            stats = TaskStats(task_id="t", ema_pass_rate=0.5, weight=1.0, attempts=1)
            return [Output("reward", stats)]  # `reward` takes Reward
        reward = Reward(
            trajectory_id=step.trajectory_id, task_id="t", group_id="g", group_size=1, score=1.0
        )
        return [Output("reward", reward)]


async def test_an_output_of_the_wrong_type_is_dead_lettered_and_the_stream_goes_on(
    bus_settings: BusSettings,
) -> None:
    await _produce_steps(bus_settings, range(10))
    runner = ServiceRunner(WrongType(), bus_settings)
    # The runner raised SchemaError here before the fix.
    await _run_until(runner, lambda: runner.metrics.consumed >= 10)
    assert runner.metrics.processed == 5 and runner.metrics.dead_lettered == 5
    dead = await read_records(bus_settings, "dead-letter", 5, grace=0.5)
    assert len(dead) == 5
    for d in dead:
        assert d.event.error_type == "output"
        assert "TaskStats" in d.event.error and "takes Reward" in d.event.error
    assert len(await read_records(bus_settings, "reward", 5, grace=0.5)) == 5
    assert await committed_total(bus_settings, "wrong-type", "rollout-step") == 10


class Inflate(Processor):
    """Answers every reward with a task-stats event far larger than the request limit."""

    name = "inflate"
    topics = ["reward"]

    async def process(self, record: Record) -> list[Output]:
        big = TaskStats(task_id="x" * (3 << 20), ema_pass_rate=0.5, weight=1.0, attempts=1)
        return [Output("task-stats", big)]


async def test_near_limit_records_and_oversized_outputs_end_as_bounded_dead_letters(
    bus_settings: BusSettings,
) -> None:
    limit = 2 << 20
    settings = BusSettings(bootstrap=bus_settings.bootstrap, max_request_size=limit)
    garbage = os.urandom(limit - 4096)  # undecodable and just under the request limit
    async with EventProducer(settings) as producer:
        futures = [await producer.send_raw("reward", garbage, key=b"k")]
        reward = Reward(trajectory_id="g/0", task_id="t", group_id="g", group_size=1, score=1.0)
        futures.append(await producer.send("reward", reward))
        await producer.wait_acks(futures)
    runner = ServiceRunner(Inflate(), settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= 2)
    dead = sorted(
        (r.event for r in await read_records(bus_settings, "dead-letter", 2, grace=0.5)),
        key=lambda e: e.error_type,
    )
    assert [d.error_type for d in dead] == ["decode", "output"]
    decode_dl, output_dl = dead
    assert decode_dl.truncated and decode_dl.original_size == len(garbage)
    assert decode_dl.original_sha256 == hashlib.sha256(garbage).hexdigest()
    assert decode_dl.original_value == garbage[:DEAD_LETTER_VALUE_CAP]
    assert "over the request limit" in output_dl.error and not output_dl.truncated
    assert await committed_total(bus_settings, "inflate", "reward") == 2


class CountSteps(Processor):
    """Counts the steps it is given, by dedup id, and opts into the runner's dedup."""

    name = "count-steps"
    topics = ["rollout-step"]
    dedup = True

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def process(self, record: Record) -> list[Output]:
        self.seen.append(record.event.dedup_id())
        return []


async def test_duplicates_are_dropped_across_restarts(bus_settings: BusSettings) -> None:
    steps = [_step(i) for i in range(20)]
    async with EventProducer(bus_settings) as producer:
        # Each event twice (a producer retry writes the same event again).
        await producer.wait_acks([await producer.send("rollout-step", s) for s in steps * 2])
    first = CountSteps()
    runner = ServiceRunner(first, bus_settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= 40)
    assert sorted(first.seen) == sorted(s.dedup_id() for s in steps)
    assert runner.metrics.duplicates == 20

    # Redelivered after a restart: a new member remembers what its predecessor handled.
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send("rollout-step", s) for s in steps[:5]])
        fresh = _step(1000)
        await producer.send_and_wait("rollout-step", fresh)
    second = CountSteps()
    runner = ServiceRunner(second, bus_settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= 6)
    assert second.seen == [fresh.dedup_id()]
    assert runner.metrics.duplicates == 5


class SlowToTakeOver(CountSteps):
    """Takes a while to set up what it owns (a stateful processor loading its state): aiokafka
    installs the assignment and fetches before the listener has finished, so a batch is in
    hand before the runner has positioned the partitions."""

    def low_watermark(self, tp: object) -> int | None:
        return None

    async def tick(self) -> list[Output]:
        return []

    async def on_assigned(self, partitions: set) -> None:
        await asyncio.sleep(1.5)

    async def on_revoked(self, partitions: set) -> list[Output]:
        return []

    async def close(self) -> list[Output]:
        return []


async def test_a_batch_fetched_during_the_assignment_is_not_handled_unpositioned(
    bus_settings: BusSettings,
) -> None:
    # One trajectory: one partition, read in one batch.
    steps = [RolloutStep(trajectory_id="traj-x", step=i) for i in range(20)]
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send("rollout-step", s) for s in steps])
    first = CountSteps()
    runner = ServiceRunner(first, bus_settings)
    await _run_until(runner, lambda: runner.metrics.consumed >= 20)
    assert len(first.seen) == 20

    # Redelivered, then one new step. The successor's window must be re-read before any of
    # them is handled, even though they were fetched while it was still taking over.
    fresh = RolloutStep(trajectory_id="traj-x", step=100)
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send("rollout-step", s) for s in [*steps, fresh]])
    second = SlowToTakeOver()
    runner = ServiceRunner(second, bus_settings)
    await _run_until(runner, lambda: fresh.dedup_id() in second.seen)
    assert second.seen == [fresh.dedup_id()]
    assert runner.metrics.duplicates == 20


class FlakyStore(CountSteps):
    """A processor whose own storage fails for a while (an InfrastructureError)."""

    name = "flaky-store"
    dedup = False

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def process(self, record: Record) -> list[Output]:
        if self.failures > 0:
            self.failures -= 1
            raise InfrastructureError("storage is down")
        return await super().process(record)


@pytest.mark.parametrize("outlasts", [False, True])
async def test_infrastructure_failures_are_retried_never_dead_lettered(
    bus_settings: BusSettings, outlasts: bool
) -> None:
    await _produce_steps(bus_settings, range(5))
    processor = FlakyStore(failures=10_000 if outlasts else 3)
    retry = RetryPolicy(first_delay_s=0.05, max_delay_s=0.1, give_up_after_s=1.5)
    runner = ServiceRunner(processor, bus_settings, retry=retry)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    deadline = time.monotonic() + 30
    while len(processor.seen) < 5 and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    if outlasts:
        with pytest.raises(ServiceHalted, match="storage is down"):
            await asyncio.wait_for(task, 30)
        assert await committed_total(bus_settings, "flaky-store", "rollout-step") == 0
    else:
        runner.stop()
        await asyncio.wait_for(task, 30)
        assert len(processor.seen) == 5 and runner.metrics.retries == 3
        assert await committed_total(bus_settings, "flaky-store", "rollout-step") == 5
    assert runner.metrics.dead_lettered == 0
    assert await read_records(bus_settings, "dead-letter", 1, timeout=1, grace=0.5) == []


class Joiner(Processor):
    """Holds every record until it has two, then writes one output for both (stateful)."""

    name = "joiner"
    topics = ["rollout-step"]

    def __init__(self) -> None:
        self.held: list[Record] = []

    async def process(self, record: Record) -> list[Output]:
        self.held.append(record)
        if len(self.held) < 2:
            return []
        self.held = []
        return [Output("trajectory-complete", TrajectoryComplete(trajectory_id="joined"))]

    def low_watermark(self, tp: object) -> int | None:
        offsets = [r.offset for r in self.held if r.tp == tp]
        return min(offsets) if offsets else None

    async def tick(self) -> list[Output]:
        return []

    async def on_assigned(self, partitions: set) -> None:
        pass

    async def on_revoked(self, partitions: set) -> list[Output]:
        self.held = [r for r in self.held if r.tp not in partitions]
        return []

    async def close(self) -> list[Output]:
        return []


async def test_a_halt_commits_nothing_past_records_whose_outputs_were_never_sent(
    bus_settings: BusSettings,
) -> None:
    joiner = Joiner()
    retry = RetryPolicy(first_delay_s=0.05, max_delay_s=0.1, give_up_after_s=1.0)
    runner = ServiceRunner(joiner, bus_settings, retry=retry, commit_interval_s=0.05)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    await asyncio.wait_for(runner.ready.wait(), 30)
    await _produce_steps(bus_settings, range(1))  # held: its position is acknowledged, not it
    deadline = time.monotonic() + 30
    while not joiner.held and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # a few loops: flushed, and the held offset committed

    async def refuse(*args: object, **kwargs: object) -> None:
        raise BrokerError("the broker refuses this producer")  # the consumer still commits

    runner.producer.send_raw = refuse
    await _produce_steps(bus_settings, range(1, 2, 1))  # releases both; its output never goes
    with pytest.raises(ServiceHalted):
        await asyncio.wait_for(task, 30)
    # The first record's output was never sent, so neither record may be committed past.
    assert await committed_total(bus_settings, "joiner", "rollout-step") == 0
