"""Runs: which incarnation of the log a record belongs to, and resuming one from the archive.

The embedded broker keeps its log in memory, so every start begins again at offset 0: a
(topic, partition, offset) names a record only within one incarnation of the log. The
first record of the `runs` topic names that incarnation (a `RunStarted`); whoever creates
the topics writes it, and "first record wins" makes concurrent writers agree without
coordination. The archive files every record under its run, so runs never overwrite or
shadow each other and stay replayable one by one.

A stopped run resumes by re-seeding a fresh log from the archive: for each topic whose
registry spec says `reseed`, the latest event per key (`tasks`, `task-stats`) or the newest
event (`policy-updates`) is written again, and the new run records where it came from.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable

from aiokafka.errors import KafkaError

from runtime.bus import EventConsumer, EventProducer, TopicPartition
from runtime.config import BusSettings
from runtime.errors import BrokerError, BrokerTimeout, ConfigError
from topics.events import Event, RunStarted
from topics.registry import RUNS, TOPICS, topic

__all__ = [
    "new_run_id",
    "current_run",
    "RunWatch",
    "ensure_run",
    "log_ends",
    "RUN_TOPICS",
    "log_history",
    "run_resolver",
    "reseed_events",
    "reseed_from_archive",
]

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """Return a fresh run id that sorts by start time: `20261122T181923Z-3fa2c1`."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


async def current_run(settings: BusSettings, timeout_s: float = 10.0) -> RunStarted | None:
    """Return the log's run (the first record of `runs`), or None if it has none yet."""
    tp = TopicPartition(RUNS, 0)
    async with EventConsumer(settings, [RUNS], group_id=None) as consumer:
        if not await consumer.partitions_of(RUNS):
            return None
        consumer.raw.assign([tp])
        await consumer.raw.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for record in await consumer.getmany(timeout_ms=200):
                if isinstance(record.event, RunStarted):
                    return record.event
            if await consumer.at_end([tp]):
                return None  # read to the end: no run record
    raise BrokerTimeout(f"reading `{RUNS}` did not reach its end within {timeout_s:.0f}s")


class RunWatch:
    """Tells whether the log a client reads is still the incarnation it started on.

    A restarted in-memory broker comes back empty on the same address: clients reconnect
    without an error, but every position they hold belongs to the old log, and applying one
    to the new log skips the records below it. The run record (offset 0 of `runs`) names
    each incarnation; `verdict()` re-reads it (one fetch on a connection kept open) and
    compares it with the run the client's positions belong to.
    """

    SAME, CHANGED, UNKNOWN = "same", "changed", "unknown"

    def __init__(self, settings: BusSettings, timeout_s: float = 5.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self.run_id: str | None = None  # the run the client's positions belong to
        self.latest: str | None = None  # what the last read found (None: no run record)
        self._consumer: EventConsumer | None = None

    async def start(self) -> RunWatch:
        """Connect and learn the log's current run (None if it has no run record yet)."""
        self._consumer = await EventConsumer(self.settings, [RUNS], group_id=None).start()
        self.run_id = self.latest = await self.read()
        return self

    async def stop(self) -> None:
        """Disconnect."""
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def read(self) -> str | None:
        """Return the log's run id now (None: no run record); raise BrokerError if unreachable."""
        consumer = self._consumer
        if consumer is None:
            raise BrokerError("the run watch is not started")
        tp = TopicPartition(RUNS, 0)
        if not await consumer.partitions_of(RUNS):
            return None
        if tp not in consumer.raw.assignment():
            consumer.raw.assign([tp])
        consumer.raw.seek(tp, 0)
        consumer.raw.resume(tp)
        try:
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                for record in await consumer.getmany(timeout_ms=100):
                    if isinstance(record.event, RunStarted):
                        return record.event.run_id
                if await consumer.at_end([tp]):
                    return None
        finally:
            consumer.raw.pause(tp)  # no fetching between reads
        raise BrokerTimeout(f"reading `{RUNS}` did not finish within {self.timeout_s:.0f}s")

    async def verdict(self) -> str:
        """SAME, CHANGED (another run, or none where there was one) or UNKNOWN (unreachable).

        A log without a run record that gets one keeps its positions: it is the same log,
        named late. `latest` holds the run found; `accept()` makes it the client's run.
        """
        try:
            found = await self.read()
        except (BrokerError, KafkaError) as exc:
            log.debug("reading the run record failed: %s", exc)
            return self.UNKNOWN
        self.latest = found
        if self.run_id is None:
            self.run_id = found
            return self.SAME
        return self.SAME if found == self.run_id else self.CHANGED

    def accept(self) -> None:
        """Take the run last found as the one the client's positions now belong to."""
        self.run_id = self.latest


async def ensure_run(
    settings: BusSettings,
    *,
    origin: str = "cluster",
    resumed_from: str | None = None,
    seeded: dict[str, int] | None = None,
    known_empty: bool = False,
) -> RunStarted:
    """Return the log's run, writing a new `RunStarted` first if the log has none.

    `known_empty` skips the first read when the caller just created the topics.
    """
    run = None if known_empty else await current_run(settings)
    if run is not None:
        return run
    candidate = RunStarted(
        run_id=new_run_id(), origin=origin, resumed_from=resumed_from, seeded=seeded or {}
    )
    async with EventProducer(settings) as producer:
        await producer.send_and_wait(RUNS, candidate)
    # Another process may have written its own first: the first record wins for everyone.
    run = await current_run(settings)
    if run is None:
        raise BrokerTimeout(f"the run record written to `{RUNS}` is not readable back")
    return run


# What a training run writes (its inputs, `tasks` and VeriGen's topics, may come before it).
RUN_TOPICS = (
    "rollout-requests", "rollout-step", "trajectory-complete", "reward", "segment-ready",
    "task-stats", "policy-updates", "leaders",
)  # fmt: skip


async def log_ends(
    settings: BusSettings, topics: Iterable[str], timeout_s: float = 30.0
) -> dict[TopicPartition, int]:
    """Return the end (the next offset) of every partition of `topics`, without reading them.

    The fetch high-watermark of one fetch per partition, not `end_offsets()`, which Tansu
    reports wrong.
    """
    names = list(topics)
    async with EventConsumer(settings, names, group_id=None) as consumer:
        tps = await consumer.read_all(*names)
        deadline = time.monotonic() + timeout_s
        while True:
            ends = {tp: consumer.raw.highwater(tp) for tp in tps}
            if all(end is not None for end in ends.values()):
                return ends
            if time.monotonic() > deadline:
                raise BrokerTimeout(
                    f"the ends of {', '.join(names)} were not read in {timeout_s:g} s"
                )
            await consumer.getmany(timeout_ms=100, max_records=1)


async def log_history(settings: BusSettings) -> dict[str, int]:
    """Return how many records each topic a run writes holds, for the topics holding any."""
    counts: dict[str, int] = {}
    for tp, end in (await log_ends(settings, RUN_TOPICS)).items():
        counts[tp.topic] = counts.get(tp.topic, 0) + end
    return {name: n for name, n in counts.items() if n}


def reseed_events(rows: Iterable[tuple[int, int, Event]], mode: str) -> list[Event]:
    """Pick what a resumed run re-seeds from archived (partition, offset, event) rows of one topic.

    `per-key`: the newest event of each dedup id (a compacted topic's view); `last`: the
    newest event of the topic (by timestamp, then position).
    """
    ordered = sorted(rows, key=lambda r: (r[0], r[1]))
    if mode == "per-key":
        latest: dict[str, Event] = {}
        for _, _, event in ordered:
            latest.pop(event.dedup_id(), None)  # keep first-seen order of the newest versions
            latest[event.dedup_id()] = event
        return list(latest.values())
    if mode == "last":
        if not ordered:
            return []
        return [max(ordered, key=lambda r: (r[2].ts_ms, r[0], r[1]))[2]]
    raise ConfigError(f"unknown reseed mode {mode!r}")


async def reseed_from_archive(
    settings: BusSettings, archive: str, run_id: str | None = None
) -> tuple[str, dict[str, int]]:
    """Write the archived state of a run into the (fresh) log; return (run id, counts per topic).

    `run_id` None means the newest run that holds tasks: a run whose log never got any (a
    broker restarted and stopped again before anything was imported) has nothing to resume.
    Raises ConfigError when the archive holds no such run, naming the runs it has.
    """
    from runtime.archive.layout import indexed_events
    from runtime.archive.store import ArchiveStore

    store = ArchiveStore(archive)
    runs = await asyncio.to_thread(store.runs)
    if not runs:
        raise ConfigError(f"the archive at {archive} holds no run to resume")
    if run_id is None:
        with_tasks = await asyncio.to_thread(store.runs, "tasks")
        if not with_tasks:
            raise ConfigError(
                f"no run in {archive} holds tasks, so none can be resumed; runs there: "
                f"{', '.join(runs)} (name one to resume it anyway)"
            )
        run_id = with_tasks[-1]
    elif run_id not in runs:
        raise ConfigError(f"no run {run_id!r} in {archive}; runs there: {', '.join(runs)}")
    counts: dict[str, int] = {}
    async with EventProducer(settings) as producer:
        for name, spec in TOPICS.items():
            if spec.reseed is None:
                continue
            table = await asyncio.to_thread(store.read, name, None, [run_id])
            if table is None or table.num_rows == 0:
                continue
            partitions, offsets = table["_partition"].to_pylist(), table["_offset"].to_pylist()
            rows = [
                (partitions[i], offsets[i], event)
                for i, event in indexed_events(topic(name).event_type, table)
            ]
            picked = reseed_events(rows, spec.reseed)
            await producer.wait_acks([await producer.send(name, e) for e in picked])
            counts[name] = len(picked)
    return run_id, counts


def run_resolver(settings: BusSettings, origin: str = "cluster") -> Callable[[], Awaitable[str]]:
    """Return an async function giving the log's run id (creating the run record if missing)."""

    async def resolve() -> str:
        return (await ensure_run(settings, origin=origin)).run_id

    return resolve
