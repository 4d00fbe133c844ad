"""A compacted topic as a live table: every partition read from the start, then followed.

Services that need the current value per key of a compacted topic (the rollout worker and
the sampler need every task from `tasks`) keep a `TopicTable`: no consumer group, all
partitions assigned, the latest event per dedup id kept in a dict.

    table = await TopicTable(settings, "tasks").start()   # returns once caught up
    event = table.get("calc_sum_total")
    await table.stop()

A table follows one incarnation of the log at a time: when the log's run changes under it (a
restarted in-memory broker, see runtime/runs.py), it reads the new log from its beginning
and keeps the rows it has (a task stays known until the new log says otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.runs import RunWatch
from topics.events import Event

__all__ = ["TopicTable"]

log = logging.getLogger(__name__)


class TopicTable:
    """The latest event per dedup id of one topic, kept current in the background."""

    def __init__(
        self,
        settings: BusSettings,
        topic_name: str,
        on_change: Callable[[Event], None] | None = None,
        run_check_interval_s: float = 5.0,
    ) -> None:
        self.settings = settings
        self.topic = topic_name
        self.on_change = on_change  # called for every event read, in log order per partition
        self.run_check_interval_s = run_check_interval_s  # how often the log's run is re-read
        self._rows: dict[str, Event] = {}
        self._consumer: EventConsumer | None = None
        self._watch: RunWatch | None = None
        self._task: asyncio.Task | None = None

    def get(self, key: str) -> Event | None:
        """Return the latest event with this dedup id, or None."""
        return self._rows.get(key)

    def values(self) -> list[Event]:
        """Return the latest event of every key."""
        return list(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)

    async def start(self, timeout_s: float = 30.0) -> TopicTable:
        """Read the topic up to its current end, then keep following it; return self."""
        self._consumer = EventConsumer(self.settings, [self.topic], group_id=None)
        await self._consumer.start()
        self._watch = RunWatch(self.settings)
        try:
            await self._watch.start()
            async for batch in self._consumer.catch_up(self.topic, timeout_s=timeout_s):
                self._apply(batch)
        except BaseException:
            await self.stop()
            raise
        self._task = asyncio.create_task(self._follow())
        return self

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._watch is not None:
            await self._watch.stop()
            self._watch = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _follow(self) -> None:
        checked = time.monotonic()
        while True:
            try:
                self._apply(await self._consumer.getmany(timeout_ms=500))
                if await self._shrank() or time.monotonic() - checked > self.run_check_interval_s:
                    checked = time.monotonic()
                    if await self._watch.verdict() == RunWatch.CHANGED:
                        await self._restart_on_new_log()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broker hiccup: keep the table, try again
                log.warning("following `%s` failed: %s", self.topic, exc)
                await asyncio.sleep(1.0)

    async def _shrank(self) -> bool:
        """Whether a partition's end is below our position: the log was replaced."""
        raw = self._consumer.raw
        for tp in raw.assignment():
            high = raw.highwater(tp)
            if high is not None and high < await raw.position(tp):
                return True
        return False

    async def _restart_on_new_log(self) -> None:
        log.warning("`%s`: the log changed (run %s -> %s: a restarted broker?); reading the "
                    "new log from its beginning", self.topic, self._watch.run_id,
                    self._watch.latest)  # fmt: skip
        self._watch.accept()
        raw = self._consumer.raw
        for tp in raw.assignment():
            raw.seek(tp, 0)

    def _apply(self, records: list) -> None:
        for record in records:
            if record.value is None and record.key is not None:  # a tombstone deletes the key
                self._rows.pop(record.key.decode(errors="replace"), None)
                continue
            if record.event is None:
                continue
            self._rows[record.event.dedup_id()] = record.event
            if self.on_change is not None:
                self.on_change(record.event)
