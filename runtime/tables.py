"""A compacted topic as a live table: every partition read from the start, then followed.

Services that need the current value per key of a compacted topic (the rollout worker and
the sampler need every task from `tasks`) keep a `TopicTable`: no consumer group, all
partitions assigned, the latest event per dedup id kept in a dict.

    table = await TopicTable(settings, "tasks").start()   # returns once caught up
    event = table.get("calc_sum_total")
    await table.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.errors import BrokerTimeout
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
    ) -> None:
        self.settings = settings
        self.topic = topic_name
        self.on_change = on_change  # called for every event read, in log order per partition
        self._rows: dict[str, Event] = {}
        self._consumer: EventConsumer | None = None
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
        try:
            async for batch in self._consumer.catch_up(self.topic, timeout_s=timeout_s):
                self._apply(batch)
        except BrokerTimeout:
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
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _follow(self) -> None:
        while True:
            try:
                self._apply(await self._consumer.getmany(timeout_ms=500))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broker hiccup: keep the table, try again
                log.warning("following `%s` failed: %s", self.topic, exc)
                await asyncio.sleep(1.0)

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
