"""The typed bus: producers and consumers of registry events over aiokafka.

Every broker call is bounded in time, so a down broker gives a BrokerError within seconds
instead of a hang. Settings work on both Tansu and Apache Kafka (see BusSettings).

A group member on the embedded broker (Tansu) never sends LeaveGroup when it stops. Tansu
0.6 forgets to clear a departed leader when the leader leaves a group that is already
re-forming (a follower left first): every later member is then told to wait for that
leader's assignment forever (SyncGroup error 27, REBALANCE_IN_PROGRESS), so two members
stopped at the same moment wedged their group for good in 3 of 5 tries. A member that
simply goes silent is removed by the broker's session timeout, whose path clears the
leader correctly; the cost is that its partitions move after the session timeout (3 s)
instead of at once. tests/runtime/test_group_membership.py pins both the broker's
behaviour and the workaround.

Tansu also acknowledges records produced to a topic it does not have (a restarted broker
before `scalecua topics create`), and creating the topic afterwards starts its offsets at 0
again over the batches it kept: the next produces to that partition fail with UnknownError,
and records acknowledged at offsets those batches cover never show (seen: a rollout step
counted as sent and missing from the log). A producer only learns that the topics are gone
from a metadata answer, so after a lost connection (`_ProduceFence`) it sends nothing until
the broker has answered a metadata request again; records then wait for their topics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Self

import aiokafka.client
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.conn import CloseReason
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.errors import KafkaError, StaleMetadata
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.produce import ProduceRequest

from runtime.config import BusSettings
from runtime.errors import BrokerError, BrokerTimeout, SchemaError
from topics.codec import decode, encode
from topics.events import DeadLetter, Event
from topics.registry import topic

__all__ = [
    "Record",
    "EventProducer",
    "EventConsumer",
    "TopicPartition",
    "cluster_id",
    "partition_counts",
]

log = logging.getLogger(__name__)

_TANSU_CLUSTER_PREFIX = "tansu"  # Tansu's cluster id is "tansu_cluster" unless configured


class _MetadataRequestNoAutoCreate(MetadataRequest):
    """A metadata request that never asks the broker to create the topics it names."""

    def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: bool = False):
        super().__init__(topics, allow_auto_topic_creation)


# aiokafka asks brokers to create every unknown topic a client names, and both Tansu and
# Kafka (auto.create.topics.enable) do so with their default partition count (4 on Tansu,
# 1 on Kafka), not the registry's. A service that reaches a broker before its topics exist
# (a restarted embedded broker, a cluster before `scalecua topics create`) would create them
# wrong, breaking co-partitioning and racing the real creation. aiokafka has no setting for
# it, so its client builds this request instead; clients then wait for the topics to appear.
aiokafka.client.MetadataRequest = _MetadataRequestNoAutoCreate


class _MissingTopicIsNoError(logging.Filter):
    """Drops aiokafka's ERROR for a topic missing from a metadata answer, unless debugging."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but the missing-topic one (kept at DEBUG when that is enabled)."""
        if record.msg != "Topic %s not found in cluster metadata":
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# Clients wait for missing topics instead of creating them, and refresh metadata every few
# seconds while they wait: aiokafka would log an ERROR on each refresh. A runner waiting
# for an assignment names the missing topics itself, at WARNING, every 30 s.
logging.getLogger("aiokafka.cluster").addFilter(_MissingTopicIsNoError())


@dataclass(frozen=True)
class Record:
    """One consumed record, with its decoded event or the reason it did not decode."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    event: Event | None
    decode_error: str | None = None

    @property
    def tp(self) -> TopicPartition:
        """Return the record's topic-partition."""
        return TopicPartition(self.topic, self.partition)

    def dead_letter(self, error_type: str, error: str, service: str) -> DeadLetter:
        """Return the bounded dead letter of this record (see DeadLetter.about)."""
        return DeadLetter.about(
            source_topic=self.topic, partition=self.partition, offset=self.offset, error=error,
            error_type=error_type, service=service, key=self.key, value=self.value,
        )  # fmt: skip


async def _bounded(coro, timeout_s: float, what: str):  # noqa: ANN001, ANN202 - any awaitable
    try:
        return await asyncio.wait_for(coro, timeout=timeout_s)
    except TimeoutError as exc:
        raise BrokerTimeout(f"{what} did not finish within {timeout_s:.0f}s") from exc
    except KafkaError as exc:
        raise BrokerError(f"{what} failed: {exc}") from exc


class _Client:
    """Start/stop of an aiokafka client with bounded time and quiet teardown."""

    _kind = "client"
    _close_timeout_s = 5.0

    def __init__(self, settings: BusSettings, client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
        self.settings = settings
        self._client = client
        self._started = False

    async def start(self) -> Self:
        """Connect to the broker, or raise BrokerError within the connect timeout."""
        try:
            await _bounded(
                self._client.start(), self.settings.connect_timeout_s,
                f"connecting a {self._kind} to {self.settings.bootstrap}",
            )  # fmt: skip
        except BrokerError:
            await self._close_quietly()
            raise
        self._started = True
        return self

    async def stop(self) -> None:
        """Disconnect."""
        if self._started:
            await self._close_quietly()
            self._started = False

    async def _close_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._client.stop(), timeout=self._close_timeout_s)
        except Exception as exc:  # the connection may already be gone
            log.debug("%s stop: %s", self._kind, exc)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _ProduceFence:
    """Holds back produce requests from a lost connection until metadata is read again.

    A broker restarted on the same address is reached by the next connection as if nothing
    happened, and the producer's metadata still lists the old broker's topics (its refreshes
    failed while the broker was away), so aiokafka would send at once. Here a produce request
    after a connection was lost raises a retriable StaleMetadata instead: aiokafka refreshes
    the metadata, keeps the batch, and sends it only to a partition the new answer lists.
    """

    def __init__(self, client: aiokafka.client.AIOKafkaClient) -> None:
        self.stale = False  # a connection was lost since the last metadata answer
        self.held = 0  # produce requests held back (each is retried by aiokafka)
        self._said = False  # whether the current loss was logged
        closed, send, update = (
            client._on_connection_closed,
            client.send,
            client.cluster.update_metadata,
        )

        def on_closed(conn: object, reason: CloseReason | None) -> None:
            # aiokafka closes its bootstrap connection (reason None) and its own connections
            # at shutdown on purpose; any other close may leave a different broker behind.
            if reason is not None and reason != CloseReason.SHUTDOWN:
                self.stale, self._said = True, False
            closed(conn, reason)

        async def guarded_send(node_id: object, request: object, **kwargs: object) -> object:
            if self.stale and isinstance(request, ProduceRequest):
                if not self._said:
                    self._said = True
                    log.info("producer: the broker connection was lost; records wait until "
                             "the broker has named its topics again")  # fmt: skip
                self.held += 1
                client.force_metadata_update()
                raise StaleMetadata("the connection was lost: waiting for the broker's topics")
            return await send(node_id, request, **kwargs)

        def on_metadata(metadata: object) -> object:
            # Synchronous with the answer: a request in flight when the connection broke
            # fails instead, so an answer read after a loss came from the broker now there.
            self.stale = False
            return update(metadata)

        client._on_connection_closed = on_closed
        client.send = guarded_send
        client.cluster.update_metadata = on_metadata


class EventProducer(_Client):
    """Sends registry events (or raw bytes) to topics, keyed by the registry's key field."""

    _kind = "producer"

    def __init__(self, settings: BusSettings) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap,
            client_id=settings.client_id,
            acks=settings.acks,
            linger_ms=settings.linger_ms,
            compression_type=settings.compression,
            max_request_size=settings.max_request_size,
            request_timeout_ms=settings.request_timeout_ms,
            metadata_max_age_ms=settings.metadata_max_age_ms,
            enable_idempotence=False,  # Tansu rejects InitProducerId v0; ids dedupe instead
        )
        super().__init__(settings, producer)
        self._producer = producer
        self._fence = _ProduceFence(producer.client)  # see the module doc

    async def send(self, topic_name: str, event: Event, key: bytes | None = None) -> asyncio.Future:
        """Queue one event; return a future that resolves when the broker acknowledges it."""
        spec = topic(topic_name)
        if not isinstance(event, spec.event_type):
            raise SchemaError(
                f"{topic_name} takes {spec.event_type.__name__}, not {type(event).__name__}"
            )
        return await self.send_raw(
            topic_name, encode(event), key if key is not None else spec.key_of(event)
        )

    async def send_raw(
        self, topic_name: str, value: bytes | None, key: bytes | None = None
    ) -> asyncio.Future:
        """Queue raw bytes; return the acknowledgement future."""
        # aiokafka bounds a send blocked on a full buffer by request_timeout_ms itself, so
        # no wait_for here: a task per record would cost a third of the throughput.
        try:
            return await self._producer.send(topic_name, value=value, key=key)
        except KafkaError as exc:
            raise BrokerError(f"sending to {topic_name} failed: {exc}") from exc

    async def send_and_wait(self, topic_name: str, event: Event, key: bytes | None = None) -> None:
        """Send one event and wait for its acknowledgement."""
        fut = await self.send(topic_name, event, key)
        await self.wait_acks([fut])

    async def wait_acks(self, futures: Iterable[asyncio.Future]) -> None:
        """Wait until every future is acknowledged, or raise BrokerError."""
        futures = list(futures)
        if futures:
            await _bounded(
                asyncio.gather(*futures), self.settings.request_timeout_ms / 1000 + 5,
                f"waiting for {len(futures)} acknowledgements",
            )  # fmt: skip

    async def flush(self) -> None:
        """Send everything queued."""
        await _bounded(self._producer.flush(), self.settings.request_timeout_ms / 1000, "flush")

    async def stop(self) -> None:
        """Flush and disconnect; raise BrokerError if queued records could not be sent."""
        if self._started:
            try:
                await self.flush()
            finally:
                await super().stop()

    async def abort(self) -> None:
        """Disconnect after trying to flush, logging (not raising) a failed flush.

        For shutdowns caused by another error: that error is the one the caller must see.
        """
        if self._started:
            try:
                await self.flush()
            except Exception as exc:  # the cause of the shutdown matters more
                log.warning("producer shutdown: queued records were not sent: %s", exc)
            finally:
                await super().stop()

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            await self.stop()
        else:
            await self.abort()


def partition_counts(cluster: object, topics: Iterable[str]) -> str:
    """Name how many partitions an aiokafka ClusterMetadata shows for each topic ("t:8,u:1")."""
    return ",".join(f"{t}:{len(cluster.partitions_for_topic(t) or ())}" for t in sorted(topics))


def _naming_partitions(
    base: type[AbstractPartitionAssignor], cluster: Callable[[], object]
) -> type[AbstractPartitionAssignor]:
    """`base`, with join metadata that names how many partitions this member sees per topic.

    Tansu 0.6 treats a rejoin with unchanged metadata as a no-op: same generation, and the
    leader's new assignment is dropped for the stored one. A group that formed before its
    topics existed (a service started before `topics create`, or reconnecting to a restarted
    broker) would then keep its empty assignment when they appear. Naming the partition
    counts makes such a rejoin a change, so the broker starts a new generation, as Kafka does.
    """

    class Assignor(base):
        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            topics = sorted(topics)
            return ConsumerProtocolMemberMetadata(
                cls.version, topics, partition_counts(cluster(), topics).encode()
            )

    Assignor.__name__ = Assignor.__qualname__ = base.__name__
    return Assignor


async def cluster_id(client: object) -> str | None:
    """Return the cluster id the broker reports in its metadata (None if it reports none)."""
    node = client.get_random_node()  # an aiokafka AIOKafkaClient
    if node is None:
        return None
    response = await client.send(node, MetadataRequest([]))
    return getattr(response, "cluster_id", None)


class EventConsumer(_Client):
    """Reads topics in a consumer group (or by manual assignment) with manual commits.

    With a group and topics, `start()` returns once the group has assigned partitions;
    `join_on_start=False` returns once connected, and the caller subscribes (joining then
    happens while it polls, for as long as the group takes).
    """

    _kind = "consumer"
    _close_timeout_s = 10.0

    def __init__(
        self,
        settings: BusSettings,
        topics: list[str],
        group_id: str | None,
        *,
        from_beginning: bool = True,
        co_partitioned: bool = False,
        join_on_start: bool = True,
    ) -> None:
        for name in topics:
            topic(name)  # fail early on unknown topics
        self.topics = topics
        self.group_id = group_id
        self.leaves_group = True  # whether stop() sends LeaveGroup (see the module doc)
        consumer = AIOKafkaConsumer(
            *(topics if group_id and join_on_start else ()),
            bootstrap_servers=settings.bootstrap,
            client_id=settings.client_id,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_poll_records=settings.max_poll_records,
            request_timeout_ms=settings.request_timeout_ms,
            metadata_max_age_ms=settings.metadata_max_age_ms,
            # Range assignment gives a member the same partition numbers of every topic, so
            # topics keyed alike (steps and completions of a request) meet in one member.
            partition_assignment_strategy=(
                _naming_partitions(
                    RangePartitionAssignor if co_partitioned else RoundRobinPartitionAssignor,
                    lambda: consumer._client.cluster,
                ),
            ),
        )
        super().__init__(settings, consumer)
        self._consumer = consumer

    async def start(self) -> Self:
        """Connect (and, with topics and a group, join it), or raise BrokerError in time."""
        await super().start()
        if self.group_id is not None:
            await self._decide_leaving()
        return self

    async def _decide_leaving(self) -> None:
        """On Tansu, stop without LeaveGroup: the broker's session timeout removes us safely."""
        leave = self.settings.leave_group_on_stop
        if leave is None:
            try:
                found = await _bounded(
                    cluster_id(self._consumer._client), self.settings.connect_timeout_s,
                    "reading the cluster id",
                )  # fmt: skip
            except BrokerError as exc:
                log.debug("cluster id unknown (%s): leaving groups as usual", exc)
                found = None
            leave = not (found or "").startswith(_TANSU_CLUSTER_PREFIX)
        if leave:
            return
        self.leaves_group = False
        coordinator = self._consumer._coordinator

        async def forget_membership() -> None:
            # What aiokafka does after its LeaveGroup request, without the request.
            coordinator.reset_generation()

        coordinator._maybe_leave_group = forget_membership

    @property
    def raw(self) -> AIOKafkaConsumer:
        """Return the underlying aiokafka consumer (for seeks and assignment)."""
        return self._consumer

    async def partitions_of(self, topic_name: str) -> list[TopicPartition]:
        """Return the partitions of a topic."""
        parts = self._consumer.partitions_for_topic(topic_name)
        if not parts:
            await _bounded(self._consumer._client.force_metadata_update(), 10, "metadata")
            parts = self._consumer.partitions_for_topic(topic_name) or set()
        return [TopicPartition(topic_name, p) for p in sorted(parts)]

    async def read_all(
        self, *topic_names: str, from_beginning: bool = True
    ) -> list[TopicPartition]:
        """Assign every partition of the topics to this (group-less) consumer, from the start or
        the end; return them."""
        tps = [tp for name in topic_names for tp in await self.partitions_of(name)]
        self._consumer.assign(tps)
        if not tps:  # the topics do not exist (yet): aiokafka's seeks refuse no partitions
            return tps
        if from_beginning:
            await self._consumer.seek_to_beginning(*tps)
        else:
            await self._consumer.seek_to_end(*tps)
        return tps

    async def catch_up(
        self, *topic_names: str, timeout_s: float = 30.0
    ) -> AsyncIterator[list[Record]]:
        """Read the topics (group-less) from the start to their current end, batch by batch.

        Raises BrokerTimeout if the end is not reached within timeout_s.
        """
        tps = await self.read_all(*topic_names)
        deadline = time.monotonic() + timeout_s
        while tps:
            batch = await self.getmany(timeout_ms=200)
            if batch:
                yield batch
            if await self.at_end(tps):
                return
            if time.monotonic() > deadline:
                names = ", ".join(topic_names)
                raise BrokerTimeout(f"reading {names} did not reach its end in {timeout_s:g} s")

    async def at_end(self, tps: Iterable[TopicPartition]) -> bool:
        """Whether each partition's position has reached its last fetched high-watermark.

        The fetch high-watermark, not `end_offsets()`, which Tansu reports wrong; a partition
        not fetched yet has none and is not at its end.
        """
        for tp in tps:
            high = self._consumer.highwater(tp)
            if high is None or await self._consumer.position(tp) < high:
                return False
        return True

    async def getmany(self, timeout_ms: int = 200, max_records: int | None = None) -> list[Record]:
        """Fetch the next batch of records, decoded; undecodable ones carry the reason."""
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        out: list[Record] = []
        for tp, messages in batches.items():
            for m in messages:
                try:
                    event, error = decode(tp.topic, m.value), None
                except SchemaError as exc:
                    event, error = None, str(exc)
                out.append(
                    Record(
                        tp.topic, tp.partition, m.offset, m.key, m.value, m.timestamp, event, error
                    )
                )
        return out

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit the given next-offsets for this group."""
        if offsets and self.group_id:
            await _bounded(
                self._consumer.commit(offsets),
                self.settings.request_timeout_ms / 1000 + 5,
                "commit",
            )
