"""Consumer groups on the embedded broker when members stop together.

Tansu 0.6 keeps a departed leader as the leader of a re-forming group when a follower's
LeaveGroup reaches it before the leader's: every later member then waits for that leader's
assignment forever. The first test pins that behaviour of the broker (when it starts to
fail, the broker is fixed and the workaround in runtime/bus.py can go); the second shows
that our consumers, which never send LeaveGroup to Tansu, leave no wedged group behind.

Tansu 0.6 also ignores a rejoin whose member metadata is unchanged (same generation, the
stored assignment handed back), so a group formed before its topics existed stays empty
when they appear. The third test pins that; the fourth shows our consumers, whose join
metadata names the partition counts they see, getting their partitions (runtime/bus.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from runtime.broker import EmbeddedBroker, create_topics
from runtime.bus import EventConsumer
from runtime.config import BusSettings
from topics.registry import topic


async def _join(settings: BusSettings, group: str) -> EventConsumer:
    consumer = EventConsumer(settings, ["reward"], group, join_on_start=False)
    await consumer.start()
    consumer.raw.subscribe(["reward"])
    return consumer


async def _assigned_within(consumer: EventConsumer, timeout_s: float) -> bool:
    # aiokafka's getmany waits for an assignment however long it takes: bound it here.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(consumer.getmany(timeout_ms=100), deadline - time.monotonic())
        except TimeoutError:
            return False
        if consumer.raw.assignment():
            return True
    return False


async def _two_members(settings: BusSettings, group: str) -> tuple[EventConsumer, EventConsumer]:
    """Two members of a formed group: (leader, follower)."""
    a = await _join(settings, group)
    assert await _assigned_within(a, 30)
    b = await _join(settings, group)
    deadline = time.monotonic() + 30
    while not (a.raw.assignment() and b.raw.assignment()):  # both polled through the rebalance
        assert time.monotonic() < deadline, "the second member never got partitions"
        await asyncio.gather(a.getmany(timeout_ms=100), b.getmany(timeout_ms=100))
    # aiokafka keeps the group's subscription only on the member that computed the assignment.
    leader = a if a.raw._coordinator._group_subscription is not None else b
    return leader, (b if leader is a else a)


async def test_the_embedded_broker_wedges_a_group_whose_leader_leaves_after_a_follower(
    bus_settings: BusSettings,
) -> None:
    leaving = dataclasses.replace(bus_settings, leave_group_on_stop=True)
    leader, follower = await _two_members(leaving, "wedge")
    assert leader.leaves_group and follower.leaves_group
    await follower.stop()  # LeaveGroup: the group re-forms with the leader still in it
    await leader.stop()  # LeaveGroup: the leader goes, but stays named as the leader
    newcomer = await _join(bus_settings, "wedge")
    try:
        # A healthy group takes a newcomer within ~8 s here (session and rebalance timeouts).
        assert not await _assigned_within(newcomer, 15), "Tansu no longer wedges the group"
    finally:
        await newcomer.stop()


async def test_members_stopped_together_leave_a_group_a_newcomer_joins(
    bus_settings: BusSettings,
) -> None:
    async def trial(i: int) -> bool:
        group = f"together-{i}"
        leader, follower = await _two_members(bus_settings, group)
        assert not leader.leaves_group  # the embedded broker is recognised by its cluster id
        if i % 2:
            await asyncio.gather(leader.stop(), follower.stop())  # at the same moment
        else:
            await follower.stop()  # the order that wedges a group on leaves
            await leader.stop()
        newcomer = await _join(bus_settings, group)
        try:
            return await _assigned_within(newcomer, 30)
        finally:
            await newcomer.stop()

    joined = await asyncio.gather(*(trial(i) for i in range(5)))
    assert joined == [True] * 5


async def _topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await admin.list_topics()
    finally:
        await admin.close()


async def _member_before_its_topic(
    settings: BusSettings, group: str, *, naming_partitions: bool
) -> EventConsumer:
    """A lone member that joined while its topic did not exist yet (an empty assignment)."""
    consumer = EventConsumer(settings, ["reward"], group, join_on_start=False)
    if not naming_partitions:  # aiokafka's own assignor, as a plain client would join
        consumer.raw._partition_assignment_strategy = (RoundRobinPartitionAssignor,)
    await consumer.start()
    consumer.raw.subscribe(["reward"])
    deadline = time.monotonic() + 30
    while consumer.raw._coordinator.generation < 0:  # joined (with nothing to assign)
        assert time.monotonic() < deadline, "the member never joined"
        await consumer.getmany(timeout_ms=100)
    assert not consumer.raw.assignment()
    return consumer


async def test_the_embedded_broker_ignores_a_rejoin_whose_metadata_is_unchanged(
    bare_broker: EmbeddedBroker,
) -> None:
    # Pins Tansu's behaviour: when the topic appears, the leader rejoins and assigns its
    # partitions, but the broker keeps the generation and hands back the old, empty assignment.
    settings = BusSettings(bootstrap=bare_broker.bootstrap)
    consumer = await _member_before_its_topic(settings, "plain", naming_partitions=False)
    await create_topics(bare_broker.bootstrap, ["reward"])
    assert not await _assigned_within(consumer, 15), "Tansu starts a new generation now"
    await consumer.stop()


async def test_a_member_that_joined_before_its_topic_existed_gets_its_partitions(
    bare_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    settings = BusSettings(bootstrap=bare_broker.bootstrap, metadata_max_age_ms=500)
    with caplog.at_level(logging.INFO, logger="aiokafka"):
        consumer = await _member_before_its_topic(settings, "ours", naming_partitions=True)
        await asyncio.sleep(2)  # a few metadata refreshes that miss the topic
    assert await _topics(bare_broker.bootstrap) == []  # joining created nothing
    assert not [r for r in caplog.records if "not found in cluster metadata" in r.getMessage()]
    await create_topics(bare_broker.bootstrap, ["reward"])
    assert await _assigned_within(consumer, 30)
    assert len(consumer.raw.assignment()) == topic("reward").partitions
    await consumer.stop()
