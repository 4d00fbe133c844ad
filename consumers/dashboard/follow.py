"""The live log into a DashboardState: a reader outside every consumer group, and a lag poller.

The reader assigns itself every partition of every topic (no group, so it never commits
and never takes partitions from a service): `runs`, `reward`, `task-stats` and
`policy-updates` from the beginning (the charts span the whole run), `rollout-step` and
`trajectory-complete` from a short tail (the filmstrip shows only the newest episodes),
and the other topics from their end, read only so that every fetch reports each
partition's high-watermark. Tansu's `end_offsets()` is wrong while producers batch, so lag
is taken against those high-watermarks, minus each service group's committed offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import TopicPartition

from consumers.dashboard.state import DashboardState, OffsetSample
from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.errors import SchemaError
from topics.codec import decode
from topics.registry import topic_names

__all__ = ["LogFollower"]

log = logging.getLogger(__name__)

_FROM_START = ("runs", "reward", "task-stats", "policy-updates")
_SAMPLE_TIMEOUT_S = 5.0  # one offset sample; longer means the broker is unreachable


class LogFollower:
    """Keeps a DashboardState current from the live log and samples offsets every poll."""

    def __init__(self, settings: BusSettings, state: DashboardState, poll_s: float = 2.0) -> None:
        self.settings = settings
        self.state = state
        self.poll_s = poll_s
        c = state.config
        # Records per partition read back at start: the newest trajectories may all share one.
        self._tails = {
            "trajectory-complete": 2 * c.trajectories,
            "rollout-step": 2 * c.trajectories * c.frames,
        }
        self._reader: EventConsumer | None = None
        self._groups: dict[str, EventConsumer] = {}
        self._tps: dict[str, list[TopicPartition]] = {}
        self._caught_up = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> LogFollower:
        """Connect, assign and seek; then read and poll in the background."""
        self._reader = EventConsumer(self.settings, list(topic_names()), group_id=None)
        await self._reader.start()
        await self._assign()
        self.state.set_status("catching up")
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._poll())]
        return self

    async def caught_up(self, timeout_s: float = 60.0) -> None:
        """Wait until everything in the log when the follower started has been read."""
        await asyncio.wait_for(self._caught_up.wait(), timeout_s)

    async def stop(self) -> None:
        """Stop reading and polling and disconnect."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        for consumer in [*self._groups.values(), self._reader]:
            if consumer is None:
                continue
            try:
                await consumer.stop()
            except asyncio.CancelledError:
                # aiokafka's fetcher re-raises the cancellation of its own retry task when it
                # is closed while the broker is down; only a cancellation of ours propagates.
                if asyncio.current_task().cancelling():
                    raise
        self._groups, self._reader = {}, None

    async def _assign(self) -> None:
        """Assign every existing topic's partitions (keeping positions) and seek new ones."""
        raw = self._reader.raw
        kept = {tp: await raw.position(tp) for tps in self._tps.values() for tp in tps}
        fresh: dict[str, list[TopicPartition]] = {}
        for name in topic_names():
            if name not in self._tps and (tps := await self._reader.partitions_of(name)):
                fresh[name] = tps
        if not fresh:
            return
        self._tps.update(fresh)
        raw.assign([tp for tps in self._tps.values() for tp in tps])
        for tp, offset in kept.items():
            raw.seek(tp, offset)
        for name, tps in fresh.items():
            if name in _FROM_START:
                await raw.seek_to_beginning(*tps)
                continue
            ends = await raw.end_offsets(tps)  # may fall short by a batch on Tansu: harmless here
            for tp in tps:
                raw.seek(tp, max(0, ends[tp] - self._tails.get(name, 0)))
        missing = [t for t in topic_names() if t not in self._tps]
        if missing:
            log.warning("dashboard: topics not on the broker yet: %s", ", ".join(missing))

    async def _read(self) -> None:
        raw, wanted = self._reader.raw, set(self.state.topics)
        targets: dict[TopicPartition, int] | None = None  # what "caught up" means
        while True:
            try:
                batches = await raw.getmany(timeout_ms=500, max_records=5000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broker hiccup: the poller reports the broker's health
                log.warning("dashboard: reading the log failed: %s", exc)
                await asyncio.sleep(1.0)
                continue
            for tp, messages in batches.items():
                if tp.topic not in wanted:
                    continue  # read for its high-watermark only
                for m in messages:
                    self._apply(tp.topic, m.key, m.value)
            if not self._caught_up.is_set():
                targets = targets or self._highwaters()
                if targets is not None and await self._reached(targets):
                    self._caught_up.set()
                    self.state.set_status("live")
            await asyncio.sleep(0)  # a long catch-up must not starve the page's requests

    async def _reached(self, targets: dict[TopicPartition, int]) -> bool:
        for tp, highwater in targets.items():
            if await self._reader.raw.position(tp) < highwater:
                return False
        return True

    def _highwaters(self) -> dict[TopicPartition, int] | None:
        raw = self._reader.raw
        wanted = [tp for name in self.state.topics for tp in self._tps.get(name, [])]
        marks = {tp: raw.highwater(tp) for tp in wanted}
        return None if any(v is None for v in marks.values()) else marks

    def _apply(self, topic_name: str, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            if topic_name == "task-stats" and key is not None:
                self.state.forget_task(key.decode(errors="replace"))
            return
        try:
            self.state.apply(topic_name, decode(topic_name, value))
        except SchemaError:
            self.state.undecodable()
        except Exception:  # one odd event must not stop the page: count it, log it, go on
            log.exception("dashboard: a `%s` event could not be shown", topic_name)
            self.state.undecodable()

    async def _poll(self) -> None:
        last_assign = time.monotonic()
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                if len(self._tps) < len(topic_names()) and time.monotonic() - last_assign > 10:
                    last_assign = time.monotonic()
                    await self._assign()
                sample = await asyncio.wait_for(self._sample(), _SAMPLE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                self.state.set_status(f"broker unreachable: no answer in {_SAMPLE_TIMEOUT_S:g} s")
                continue
            except Exception as exc:
                self.state.set_status(f"broker unreachable: {exc or type(exc).__name__}")
                continue
            self.state.add_offsets(sample)
            if self._caught_up.is_set():
                self.state.set_status("live")

    async def _sample(self) -> OffsetSample:
        raw = self._reader.raw
        highwater = {
            name: sum(raw.highwater(tp) or 0 for tp in tps) for name, tps in self._tps.items()
        }
        groups = self.state.config.groups
        results = await asyncio.gather(*(self._committed(g, t) for g, t in groups.items()))
        committed = dict(zip(groups, results, strict=True))
        return OffsetSample(time.monotonic(), highwater, committed)

    async def _committed(self, group: str, group_topics: tuple[str, ...]) -> dict[str, int | None]:
        """Return the group's committed offsets per topic (summed), None where it has none."""
        consumer = self._groups.get(group)
        if consumer is None:
            # Never subscribed: it only asks the group's coordinator, it never joins the group.
            consumer = await EventConsumer(self.settings, [], group_id=group).start()
            self._groups[group] = consumer
        out: dict[str, int | None] = {}
        for name in group_topics:
            tps = self._tps.get(name, [])
            offsets = await asyncio.gather(*(consumer.raw.committed(tp) for tp in tps))
            known = [o for o in offsets if o is not None]
            out[name] = sum(known) if known else None
        return out
