"""A worker runs a bounded number of episode setups at once (issue 32, bench/density.py).

A worker starts all its episodes together (when it starts, and after new weights between
episodes); at 64 Calc desktops on 2 cores all 64 Calc windows were then starting at once
and every episode failed, each setup timing out waiting for its window.
"""

from __future__ import annotations

import asyncio

import pytest

from consumers.rollout.players import ScriptedPlayer
from consumers.rollout.service import RolloutConfig, rollout_service
from producers.rollout_requests import publish_requests, request_group
from runtime.blobstore import BlobStore
from runtime.config import BusSettings
from tests.bus_reading import read_until
from tests.consumers.rollout.harness import publish_task

pytestmark = pytest.mark.desktop

SETUP_S = 1.5
SLOW_SETUP_TASK = {
    "id": "test-slow-setup",
    "instruction": "Finish.",
    "config": [{"type": "sleep", "parameters": {"seconds": SETUP_S}}],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo ok", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
    },
    "solution": [{"action": "done"}],
}


async def test_episodes_set_up_one_at_a_time_when_told(
    bus_settings: BusSettings, blobs: BlobStore
) -> None:
    await publish_task(bus_settings, SLOW_SETUP_TASK)
    config = RolloutConfig(desktops=3, setups=1)
    async with rollout_service(bus_settings, config, ScriptedPlayer(), blobs) as runner:
        running = asyncio.create_task(runner.run(install_signal_handlers=False))
        try:
            await asyncio.wait_for(runner.ready.wait(), 60)
            await publish_requests(bus_settings, request_group(SLOW_SETUP_TASK["id"], 3))
            steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 3)
        finally:
            runner.stop()
            await asyncio.wait_for(running, 90)
    # Each episode's first (and only) turn starts as its setup ends: one setup after another.
    # (When its turn ended, less how long it took: a loaded machine slows turns unevenly.)
    starts = sorted((s.event.ts_ms - s.event.latency_ms) / 1000 for s in steps)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(starts) == 3 and min(gaps) > SETUP_S * 0.8, gaps
