"""One trainer writes per consumer group (issue 30, finding 9): a second `scalecua train` on
the same log and group is refused with a message naming the active one, and the first keeps
every partition and trains every group."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from aiokafka import TopicPartition

from consumers.trainer.checkpoints import CheckpointStore
from consumers.trainer.service import TrainerConfig
from consumers.trainer.startup import trainer_service
from runtime.blobstore import BlobStore
from runtime.config import BusSettings
from runtime.policy.model import Policy
from runtime.service import ServiceRunner
from tests.bus_reading import read_until
from tests.consumers.trainer.harness import make_group, publish

SCALECUA = [sys.executable, "-m", "cli"]


async def test_a_second_trainer_on_the_group_is_refused_and_the_first_trains_every_group(
    bus_settings: BusSettings, cli_env: dict[str, str], tiny: Policy, blobs: BlobStore,
    tmp_path: Path,
) -> None:  # fmt: skip
    # Issue 30: a second `scalecua train` split the partitions; every group expired ("3 of 4
    # rewards never came") on both, no step was taken, and nothing named the second trainer.
    config = TrainerConfig(checkpoints=str(tmp_path / "first"), batch_groups=2, max_steps=2,
                           group_timeout_s=60)  # fmt: skip
    async with trainer_service(bus_settings, config, blobs=blobs) as runner:
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        await asyncio.wait_for(runner.ready.wait(), 60)
        held = set(runner.consumer.raw.assignment())
        second = await asyncio.create_subprocess_exec(
            *SCALECUA, "train", "--policy", "tiny", "--batch-groups", "2",
            "--checkpoints", str(tmp_path / "second"),
            env={**cli_env, "SCALECUA_BLOBS": blobs.url}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(second.communicate(), 90)
        finally:
            if second.returncode is None:
                second.kill()
                await second.wait()
        kept = set(runner.consumer.raw.assignment())
        groups = {f"g{i}": make_group(tiny, blobs, f"g{i}", [1.0, 0.0]) for i in range(4)}
        await publish(bus_settings, [r for g in groups.values() for r in g])
        await asyncio.wait_for(task, 240)  # max_steps: both steps taken
        stats = runner.processor.stats()
    message = err.decode()
    assert second.returncode == 1, message[-2000:]
    assert "another trainer of group 'trainer' is active on this log" in message, message
    assert f"{socket.gethostname()} pid {os.getpid()}" in message  # the active one, named
    every = {tp for t in ("segment-ready", "reward") for tp in _partitions(runner, t)}
    assert held == kept == every  # the first kept every partition
    assert not (tmp_path / "second").exists() or not any((tmp_path / "second").iterdir())
    assert stats.get("groups_expired", 0) == 0 and stats["groups_trained"] == 4
    store = CheckpointStore(str(tmp_path / "first"))
    trained = {g for v in store.versions() for g in store.metadata(v)["groups"]}
    assert store.versions() == [1, 2] and trained == set(groups)
    updates = await read_until(bus_settings, "policy-updates", lambda r: len(r) >= 2)
    assert {u.event.policy_version for u in updates} == {1, 2}


def _partitions(runner: ServiceRunner, topic_name: str) -> set[TopicPartition]:
    found = runner.consumer.raw.partitions_for_topic(topic_name) or ()
    return {TopicPartition(topic_name, p) for p in found}
