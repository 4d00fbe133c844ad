"""What a service hands the service runner (runtime/service.py): its processor and its outputs.

A service subclasses `Processor`: it names itself (`name`, also its consumer group), lists
its `topics` and implements `process`; every other member has a default that does nothing
or changes nothing, and a service overrides the ones it needs. A processor that holds
records in memory also implements `StatefulProcessor`, and the runner then commits its
low-watermark instead of the next offset.

    class Counter(Processor):
        name = "counter"
        topics = ["reward"]
        seen = 0

        async def process(self, record: Record) -> list[Output]:
            self.seen += 1
            return []

        def stats(self) -> dict[str, float]:
            return {"seen": self.seen}
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from aiokafka import TopicPartition

from runtime.bus import Record
from topics.events import Event

__all__ = ["Output", "Processor", "StatefulProcessor"]


@dataclass(frozen=True)
class Output:
    """An event a processor wants written, with an optional explicit key."""

    topic: str
    event: Event
    key: bytes | None = None


class Processor:
    """What a service does with each record; the runner does everything else.

    `process` should return within the group's rebalance timeout: long work (an episode)
    belongs in tasks a stateful processor starts and reports from `tick`.
    """

    name: str  # also the consumer group id
    topics: list[str]
    # Drop a record whose dedup id was handled on its partition (compacted topics excepted).
    dedup: bool = False
    # Its topics are keyed alike: a member gets the same partition numbers of each.
    co_partitioned: bool = False

    async def process(self, record: Record) -> list[Output]:
        """Handle one decoded record and return the events to write."""
        raise NotImplementedError

    def wants(self) -> int | None:
        """Return how many more records it can take now: 0 pauses fetching, None is no bound."""
        return None

    def remember(self, record: Record) -> None:
        """With dedup, see a record a predecessor handled (before the committed offset).

        The warm-up re-reads these so a processor can rebuild what it knows about finished
        work from the log; they are never processed again.
        """

    def bind_reader(self, read_to_end: Callable[[TopicPartition], Awaitable[bool]]) -> None:
        """Take the runner's `read_to_end`, to tell a record not read yet from one the log
        does not hold."""

    async def on_new_log(self, run_id: str | None) -> None:
        """Hear that the log was replaced (a restarted broker): it is now run `run_id`.

        What the processor held of the old log was already handed back as on a revocation.
        """

    def stats(self) -> dict[str, Any]:
        """Return the processor's own counters and gauges, shown with the runner's metrics."""
        return {}


@runtime_checkable
class StatefulProcessor(Protocol):
    """A processor that holds records in memory and so commits a low-watermark."""

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the lowest offset of `tp` still needed, or None if nothing is held."""
        ...

    async def tick(self) -> list[Output]:
        """Do periodic work (e.g. flush by age); return events to write."""
        ...

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Prepare state for newly assigned partitions."""
        ...

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Persist what can be persisted before partitions move elsewhere, then forget them."""
        ...

    async def close(self) -> list[Output]:
        """Persist what can be persisted on a graceful shutdown."""
        ...
