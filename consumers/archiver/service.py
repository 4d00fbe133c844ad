"""The archiver service: follows topics and appends their events to Parquet.

Run by `scalecua archive` (cli/bus_commands.py); `scalecua up` runs one too.

It is a stateful processor: records wait in memory until a file is written, so it reports
the first buffered offset as its low-watermark and the runner commits only what is on
disk. After a crash it re-reads from the committed offset and skips records whose offsets
are already in a file of the same run (the file names carry the ranges), so every record
lands exactly once. Offsets are compared only within one run (one incarnation of the log,
named by the first record of `runs`): a fresh in-memory broker starts again at offset 0,
and its records go to the new run's folders instead of being mistaken for redeliveries.
The runner drops duplicates by dedup id before they reach the archiver (`dedup = True`),
so an event written twice by a retrying producer is archived once. A storage failure
raises StorageError: the runner retries it, and never dead-letters the rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from runtime.archive.layout import events_to_table
from runtime.archive.store import ArchiveStore
from runtime.bus import Record
from runtime.processor import Output, Processor
from topics.registry import topic, topic_names

__all__ = ["Archiver", "ArchiverConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchiverConfig:
    """How the archiver rolls files."""

    root: str  # folder or fsspec URL (s3://bucket/prefix)
    topics: tuple[str, ...] = field(default_factory=lambda: tuple(topic_names()))
    max_rows: int = 5000  # roll a file after this many rows
    max_age_s: float = 2.0  # ...or once its oldest row waited this long
    group_id: str = "archiver"


@dataclass
class _Buffer:
    rows: list[Record] = field(default_factory=list)
    opened_at: float = 0.0


class Archiver(Processor):
    """Processor that writes every record of its topics to rolling Parquet files."""

    dedup = True  # the archive keeps one row per event, by dedup id

    def __init__(self, config: ArchiverConfig, run_of_log: Callable[[], Awaitable[str]]) -> None:
        """`run_of_log` returns the id of the log's current run (runtime.runs.ensure_run)."""
        self.config = config
        self.name = config.group_id
        self.topics = list(config.topics)
        self.store = ArchiveStore(config.root)
        self._run_of_log = run_of_log
        self.run_id: str | None = None
        self._buffers: dict[TopicPartition, _Buffer] = {}
        self._archived_upto: dict[TopicPartition, int] = {}  # first offset not yet on disk
        self.files_written = 0
        self.rows_written = 0

    async def process(self, record: Record) -> list[Output]:
        """Buffer one record unless a file of this run already holds its offset."""
        tp = record.tp
        if tp not in self._archived_upto:
            await self._load(tp)
        if record.offset < self._archived_upto[tp]:
            return []  # redelivered after a crash: already in a file
        buf = self._buffers.setdefault(tp, _Buffer())
        if buf.rows and record.offset <= buf.rows[-1].offset:
            pass  # a retry after a failed write: the record is buffered already
        else:
            if not buf.rows:
                buf.opened_at = time.monotonic()
            buf.rows.append(record)
        if len(buf.rows) >= self.config.max_rows:
            await self._flush(tp)
        return []

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the first buffered offset of `tp` (not yet durable), or None."""
        buf = self._buffers.get(tp)
        return buf.rows[0].offset if buf and buf.rows else None

    async def tick(self) -> list[Output]:
        """Write files whose oldest row has waited max_age_s."""
        now = time.monotonic()
        for tp, buf in list(self._buffers.items()):
            if buf.rows and now - buf.opened_at >= self.config.max_age_s:
                await self._flush(tp)
        return []

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Learn the log's run and what is already archived for newly assigned partitions."""
        run_id = await self._run_of_log()
        if run_id != self.run_id:
            if self.run_id is not None:
                log.info("the log is a new run: %s (was %s)", run_id, self.run_id)
            self.run_id = run_id
            self._archived_upto.clear()
        for tp in partitions:
            await self._load(tp)

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Write what is buffered for partitions that are moving to another archiver."""
        for tp in partitions:
            await self._flush(tp)
            self._buffers.pop(tp, None)
            self._archived_upto.pop(tp, None)
        return []

    async def close(self) -> list[Output]:
        """Write everything buffered."""
        for tp in list(self._buffers):
            await self._flush(tp)
        return []

    async def _load(self, tp: TopicPartition) -> None:
        if self.run_id is None:
            self.run_id = await self._run_of_log()
        # The partition is ours now: a temp file in its folder belongs to a dead writer.
        await asyncio.to_thread(self.store.remove_partial, tp.topic, tp.partition, self.run_id)
        self._archived_upto[tp] = await asyncio.to_thread(
            self.store.next_offset, tp.topic, tp.partition, self.run_id
        )

    async def _flush(self, tp: TopicPartition) -> None:
        buf = self._buffers.get(tp)
        if not buf or not buf.rows:
            return
        rows = buf.rows
        spec = topic(tp.topic)
        table = events_to_table(
            spec.event_type,
            [(r.partition, r.offset, r.timestamp_ms, r.key, r.event) for r in rows],
        )
        first, last = rows[0].offset, rows[-1].offset
        await asyncio.to_thread(
            self.store.write, tp.topic, tp.partition, self.run_id, first, last, table
        )
        buf.rows = []
        self._archived_upto[tp] = last + 1
        self.files_written += 1
        self.rows_written += len(rows)
        log.debug(
            "archived %s[%d] %d..%d (%d rows)", tp.topic, tp.partition, first, last, len(rows)
        )
