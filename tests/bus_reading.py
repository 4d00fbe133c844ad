"""Reading topics back in tests: whole topics outside any group, and a group's commits."""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.bus import EventConsumer, Record
from runtime.config import BusSettings


async def read_until(
    settings: BusSettings,
    topic_name: str,
    done: Callable[[list[Record]], bool],
    timeout: float = 120,
) -> list[Record]:
    """Read a topic's decoded records from the start until `done(records)` (fail after timeout)."""
    records: list[Record] = []
    async with EventConsumer(settings, [topic_name], group_id=None) as consumer:
        await consumer.read_all(topic_name)
        deadline = time.monotonic() + timeout
        while not done(records):
            assert time.monotonic() < deadline, f"{topic_name}: gave up with {len(records)} records"
            records.extend(r for r in await consumer.getmany(timeout_ms=200) if r.event)
    return records


async def read_records(
    settings: BusSettings, topic_name: str, n: int, timeout: float = 30, grace: float = 0.0
) -> list[Record]:
    """Read a topic from the start until `n` records (decoded or not) or `timeout`, then
    `grace` seconds more (to catch records beyond n, such as duplicates)."""
    out: list[Record] = []
    async with EventConsumer(settings, [topic_name], group_id=None) as consumer:
        await consumer.read_all(topic_name)
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out.extend(await consumer.getmany(timeout_ms=200))
        end = time.monotonic() + grace
        while time.monotonic() < end:
            out.extend(await consumer.getmany(timeout_ms=100))
    return out


async def committed(settings: BusSettings, group: str, topic_name: str) -> dict[int, int]:
    """Return a group's committed offset per partition of a topic (0 if none)."""
    async with EventConsumer(settings, [topic_name], group_id=None) as probe:
        tps = await probe.partitions_of(topic_name)
    consumer = EventConsumer(settings, [], group_id=group)  # no topics: it joins nothing
    await consumer.start()
    try:
        return {tp.partition: (await consumer.raw.committed(tp)) or 0 for tp in tps}
    finally:
        await consumer.stop()


async def committed_total(settings: BusSettings, group: str, topic_name: str) -> int:
    """Return the sum of a group's committed offsets over a topic's partitions."""
    return sum((await committed(settings, group, topic_name)).values())
