"""Reading a topic range back, from the live log or from the archive, for offline analysis.

Both give the archive's columns plus `_run`, the run (log incarnation) a record belongs to:
offsets restart at 0 with every run of an in-memory broker, so (`_run`, `_partition`,
`_offset`) is what names a record.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runtime.archive.layout import arrow_schema, events_to_table
from runtime.archive.store import ArchiveStore
from runtime.bus import EventConsumer, Record
from runtime.config import BusSettings
from runtime.errors import BrokerTimeout
from topics.registry import topic

__all__ = [
    "read_live",
    "collect_live",
    "read_archive",
    "filter_time",
    "records_to_table",
    "write_table",
    "ReplayIncomplete",
    "with_run",
]


class ReplayIncomplete(BrokerTimeout):
    """The live log stopped answering before a replay reached its end."""

    def __init__(self, message: str, records: list[Record]) -> None:
        super().__init__(message)
        self.records = records  # what was read before it stopped


async def read_live(
    settings: BusSettings,
    topic_name: str,
    *,
    partitions: list[int] | None = None,
    start_offset: int = 0,
    end_offset: int | None = None,
    idle_timeout_s: float = 5.0,
) -> AsyncIterator[Record]:
    """Yield a topic's records from `start_offset` up to the end of the log as of now.

    The end is the fetch high-watermark, not `end_offsets()`, which Tansu reports wrong when
    producers batch; a partition is done once its position reaches its high-watermark.
    Raises ReplayIncomplete when partitions give no answer for `idle_timeout_s` before
    reaching their end.
    """
    consumer = EventConsumer(settings, [topic_name], group_id=None)
    await consumer.start()
    try:
        tps = await consumer.partitions_of(topic_name)
        if partitions is not None:
            tps = [tp for tp in tps if tp.partition in partitions]
        consumer.raw.assign(tps)
        for tp in tps:
            consumer.raw.seek(tp, start_offset)
        pending = set(tps)
        last_progress = time.monotonic()
        while pending:
            batch = await consumer.getmany(timeout_ms=200)
            if batch:
                last_progress = time.monotonic()
            for record in batch:
                if record.tp not in pending:
                    continue
                if end_offset is not None and record.offset >= end_offset:
                    continue
                yield record
            for tp in list(pending):
                hw = consumer.raw.highwater(tp)
                pos = await consumer.raw.position(tp)
                limit = hw if end_offset is None or hw is None else min(hw, end_offset)
                if limit is not None and pos >= limit:
                    pending.discard(tp)
                    consumer.raw.pause(tp)
            if pending and time.monotonic() - last_progress > idle_timeout_s:
                names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                raise ReplayIncomplete(
                    f"replay of {topic_name} is incomplete: no answer for "
                    f"{idle_timeout_s:g} s from {names} before their end",
                    [],
                )
    finally:
        await consumer.stop()


def read_archive(
    root: str,
    topic_name: str,
    *,
    partitions: list[int] | None = None,
    start_offset: int = 0,
    end_offset: int | None = None,
    runs: list[str] | None = None,
) -> pa.Table:
    """Return a topic's archived rows in an offset range (per partition), of every run or some."""
    spec = topic(topic_name)
    table = ArchiveStore(root).read(topic_name, partitions, runs)
    if table is None:
        return with_run(arrow_schema(spec.event_type).empty_table(), "")
    mask = pc.greater_equal(table["_offset"], start_offset)
    if end_offset is not None:
        mask = pc.and_(mask, pc.less(table["_offset"], end_offset))
    return table.filter(mask)


def filter_time(table: pa.Table, since_ms: int | None, until_ms: int | None) -> pa.Table:
    """Keep rows whose record timestamp is within [since_ms, until_ms)."""
    if since_ms is not None:
        table = table.filter(pc.greater_equal(table["_timestamp_ms"], since_ms))
    if until_ms is not None:
        table = table.filter(pc.less(table["_timestamp_ms"], until_ms))
    return table


def records_to_table(topic_name: str, records: list[Record], run_id: str = "") -> pa.Table:
    """Build an archive-shaped table (with `_run`) from decoded records; undecodable ones are left out."""
    spec = topic(topic_name)
    rows = [(r.partition, r.offset, r.timestamp_ms, r.key, r.event) for r in records if r.event]
    return with_run(events_to_table(spec.event_type, rows), run_id)


def with_run(table: pa.Table, run_id: str) -> pa.Table:
    """Append a `_run` column holding one run id."""
    return table.append_column("_run", pa.array([run_id] * table.num_rows, pa.string()))


def write_table(table: pa.Table, path: str) -> None:
    """Write a table to one Parquet file, sorted by run, partition and offset."""
    keys = [("_partition", "ascending"), ("_offset", "ascending")]
    if "_run" in table.column_names:
        keys.insert(0, ("_run", "ascending"))  # run ids sort by their start time
    pq.write_table(table.sort_by(keys), path, compression="zstd")


async def collect_live(
    settings: BusSettings,
    topic_name: str,
    progress: Callable[[int], None] | None = None,
    **kwargs: object,
) -> tuple[list[Record], int]:
    """Read a live range into memory; return (records, undecodable count)."""
    records: list[Record] = []
    bad = 0
    try:
        async for record in read_live(settings, topic_name, **kwargs):  # type: ignore[arg-type]
            if record.event is None:
                bad += 1
            else:
                records.append(record)
            if progress and len(records) % 1000 == 0:
                progress(len(records))
    except ReplayIncomplete as exc:
        exc.records = records
        raise
    return records, bad
