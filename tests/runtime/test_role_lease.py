"""A role held by a service that refuses rather than waits (runtime/leader.py's RoleLease),
against the real broker: the first member holds it, a second is told who does and the first
keeps it, and once the first leaves the next member gets it."""

from __future__ import annotations

import asyncio

from runtime.config import BusSettings
from runtime.leader import RoleLease


async def test_a_second_member_is_told_who_holds_the_role_and_the_holder_keeps_it(
    bus_settings: BusSettings,
) -> None:
    first = await RoleLease(bus_settings, "writer", who="host-a pid 1").join()
    try:
        assert first.held and first.holder == "host-a pid 1"
        second = await RoleLease(
            bus_settings, "writer", who="host-b pid 2; with a semicolon"
        ).join()
        await second.release()
        assert not second.held and second.holder == "host-a pid 1"
        await asyncio.sleep(2.0)  # the group settles again without the second member
        assert first.held and not first.lost.is_set()
    finally:
        await first.release()
    third = await RoleLease(bus_settings, "writer", who="host-c pid 3").join()
    try:
        assert third.held
    finally:
        await third.release()
