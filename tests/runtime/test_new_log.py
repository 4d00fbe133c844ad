"""A log that changes under a running service: the in-memory broker is killed and started
again on the same port, so the services reconnect to an empty log whose offsets start at 0
again. Positions of the old log must never be applied to the new one (no silent gaps)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from consumers.archiver.service import Archiver, ArchiverConfig
from runtime.archive.store import ArchiveStore
from runtime.broker import EmbeddedBroker, create_topics
from runtime.bus import EventConsumer, EventProducer, Record
from runtime.config import BusSettings
from runtime.processor import Output, Processor
from runtime.runs import ensure_run, run_resolver
from runtime.service import ServiceRunner
from runtime.tables import TopicTable
from tests.bus_reading import committed
from topics.events import RolloutStep, TaskEvent


class Collect(Processor):
    """Remembers the event ids it was given (a stateless processor)."""

    name = "collect"
    topics = ["rollout-step"]
    dedup = True

    def __init__(self, delay_s: float = 0.0) -> None:
        self.seen: set[str] = set()
        self.delay_s = delay_s  # every real processor awaits something

    async def process(self, record: Record) -> list[Output]:
        await asyncio.sleep(self.delay_s)
        self.seen.add(record.event.event_id)
        return []


async def _produce(settings: BusSettings, n: int, tag: str) -> set[str]:
    """Write n steps of one trajectory (so they share one partition); return their event ids."""
    async with EventProducer(settings) as producer:
        events = [RolloutStep(trajectory_id=f"traj-{tag}", step=i) for i in range(n)]
        await producer.wait_acks([await producer.send("rollout-step", e) for e in events])
    return {e.event_id for e in events}


async def _wait(check, timeout: float, what: str) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_a_restarted_broker_is_read_from_its_beginning_never_at_old_offsets(
    tmp_path: Path,
) -> None:
    first = await EmbeddedBroker(log_file=tmp_path / "first.log").start()
    settings = BusSettings(bootstrap=first.bootstrap)
    collect = Collect(delay_s=0.05)
    archiver = Archiver(
        ArchiverConfig(root=str(tmp_path / "archive"), topics=("rollout-step",), max_age_s=0.2),
        run_resolver(settings),
    )
    runners = [ServiceRunner(p, settings, commit_interval_s=0.05) for p in (collect, archiver)]
    tasks = [asyncio.create_task(r.run(install_signal_handlers=False)) for r in runners]
    second: EmbeddedBroker | None = None
    try:
        store = ArchiveStore(str(tmp_path / "archive"))

        def archived(run: str) -> set[str]:
            table = store.read("rollout-step", runs=[run])
            return set(table.column("event_id").to_pylist()) if table is not None else set()

        await _produce(settings, 40, "old")
        await _wait(lambda: len(collect.seen) >= 20, 30, "the first log was not consumed")
        first._proc.kill()  # kill -9 mid-stream: the in-memory log is gone
        first._proc.wait(5)
        await asyncio.sleep(3.0)  # the services notice the outage and retry
        second = await EmbeddedBroker(port=first.port, log_file=tmp_path / "second.log").start()
        assert second.run_id != first.run_id
        new = await _produce(settings, 5, "old")  # same key, so the same partition: offsets 0-4

        await _wait(lambda: new <= collect.seen, 60, "records of the new log were skipped")
        await _wait(lambda: archived(second.run_id) == new, 60, "the new log was not archived")
        for task in tasks:
            assert not task.done(), task.exception()
        await asyncio.sleep(0.5)
        # Commits in the new log are positions in the new log, never the old log's 20.
        for group in ("collect", "archiver"):
            assert max((await committed(settings, group, "rollout-step")).values()) == 5
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        first.stop()
        if second is not None:
            second.stop()


async def test_a_topic_table_follows_a_restarted_broker_from_the_new_log_s_beginning(
    tmp_path: Path,
) -> None:
    first = await EmbeddedBroker(log_file=tmp_path / "first.log").start()
    settings = BusSettings(bootstrap=first.bootstrap)
    second: EmbeddedBroker | None = None

    async def write(ids: list[str]) -> None:
        async with EventProducer(settings) as producer:
            events = [TaskEvent(task_id=i, task={"id": i, "instruction": i}) for i in ids]
            await producer.wait_acks([await producer.send("tasks", e) for e in events])

    await write([f"old-{i}" for i in range(30)])
    table = await TopicTable(settings, "tasks", run_check_interval_s=0.5).start()
    try:
        assert len(table) == 30
        first._proc.kill()
        first._proc.wait(5)
        second = await EmbeddedBroker(port=first.port, log_file=tmp_path / "second.log").start()
        new = [f"new-{i}" for i in range(40)]  # more than before: no partition looks shorter
        await write(new)
        await _wait(lambda: all(table.get(i) for i in new), 30, "new tasks were skipped")
        assert table.get("old-0") is not None  # rows of the old log are kept
    finally:
        await table.stop()
        first.stop()
        if second is not None:
            second.stop()


async def _send_until_acked(producer: EventProducer, events: list[RolloutStep]) -> list[str]:
    """Send as the service runner does (queue all, gather, send the failures again); return the
    event ids whose sends were acknowledged."""
    acked: list[str] = []
    for _ in range(10):
        futures = [await producer.send("rollout-step", e) for e in events]
        results = await asyncio.gather(*futures, return_exceptions=True)
        acked += [
            e.event_id
            for e, r in zip(events, results, strict=True)
            if not isinstance(r, BaseException)
        ]
        events = [e for e, r in zip(events, results, strict=True) if isinstance(r, BaseException)]
        if not events:
            break
    return acked


async def test_a_record_acknowledged_by_a_restarted_broker_is_in_its_new_log(
    tmp_path: Path,
) -> None:
    """A producer that outlives its broker never writes to topics the new broker lacks: Tansu
    acknowledges such records, and once the topic is created the next sends fail (UnknownError)
    and records acknowledged over the kept batches never show (issue 30, finding 6)."""
    first = await EmbeddedBroker(log_file=tmp_path / "first.log").start()
    settings = BusSettings(bootstrap=first.bootstrap)
    second: EmbeddedBroker | None = None
    producer = await EventProducer(settings).start()
    try:
        old = [RolloutStep(trajectory_id="traj", step=i) for i in range(3)]
        assert len(await _send_until_acked(producer, old)) == 3
        first._proc.kill()  # kill -9: the log is gone; the producer keeps its metadata
        first._proc.wait(5)
        second = await EmbeddedBroker(port=first.port, log_file=tmp_path / "second.log").start(
            create=False
        )  # the topics come later, as with `scalecua topics create`
        waiting = [RolloutStep(trajectory_id="traj", step=i) for i in range(4)]
        futures = [await producer.send("rollout-step", e) for e in waiting]
        await asyncio.sleep(1.5)
        assert not any(f.done() for f in futures), "acknowledged by a broker without the topic"
        await create_topics(second.bootstrap)
        await ensure_run(settings, known_empty=True)
        results = await asyncio.gather(*futures, return_exceptions=True)
        acked = [e.event_id for e, r in zip(waiting, results, strict=True)
                 if not isinstance(r, BaseException)]  # fmt: skip
        later = [RolloutStep(trajectory_id="traj", step=i) for i in range(4, 8)]
        for event in later:  # one at a time, as turns come
            acked += await _send_until_acked(producer, [event])
        assert len(acked) == 8
        async with EventConsumer(settings, ["rollout-step"], group_id=None) as reader:
            logged = [r async for batch in reader.catch_up("rollout-step") for r in batch]
        assert [r.event.event_id for r in logged] == acked  # each once, in order
        assert [r.offset for r in logged] == list(range(8))
    finally:
        await producer.stop()
        first.stop()
        if second is not None:
            second.stop()
