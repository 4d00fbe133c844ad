"""Sampler tests with real processes: `scalecua sample` as a subprocess, rewards written where
a test wants them (the partition follows from the trajectory id, as the broker's producers
hash it), and the sampler's task-stats and commits read back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from aiokafka.partitioner import murmur2

from runtime.bus import EventProducer
from runtime.config import BusSettings
from tests.broker_process import SCALECUA
from tests.bus_reading import committed, read_until
from topics.events import Reward, TaskStats
from topics.registry import topic

JUDGE = "osworld-metrics-v1"


def reward_on(partition: int, task_id: str, group_id: str, index: int, size: int = 2) -> Reward:
    """A reward of a group's sample whose trajectory id lands on `partition` of `reward`."""
    partitions = topic("reward").partitions
    attempt = 0
    while True:
        trajectory = f"{group_id}/{index}@{attempt:x}"
        if (murmur2(trajectory.encode()) & 0x7FFFFFFF) % partitions == partition:
            break
        attempt += 1
    return Reward(
        trajectory_id=trajectory, task_id=task_id, group_id=group_id, group_size=size,
        sample_index=index, request_id=f"{group_id}/{index}", score=float(index % 2),
        judge_version=JUDGE,
    )  # fmt: skip


async def write_rewards(settings: BusSettings, rewards: list[Reward]) -> dict[str, tuple]:
    """Write rewards in order, acknowledged; return each trajectory's (partition, offset)."""
    async with EventProducer(settings) as producer:
        where = {}
        for r in rewards:  # one at a time: the order on each partition is the test's order
            meta = await (await producer.send("reward", r))
            where[r.trajectory_id] = (meta.partition, meta.offset)
    return where


async def latest_stats(settings: BusSettings, done) -> dict[str, list[TaskStats]]:  # noqa: ANN001
    """Every task-stats record per task, in log order, once `done(by_task)` holds."""

    def by_task(records: list) -> dict[str, list[TaskStats]]:
        out: dict[str, list[TaskStats]] = {}
        for r in records:
            out.setdefault(r.event.task_id, []).append(r.event)
        return out

    return by_task(await read_until(settings, "task-stats", lambda rs: done(by_task(rs)), 60))


async def commits_reach(settings: BusSettings, ends: dict[int, int], timeout: float = 20) -> dict:
    """Wait until the sampler's commit on each reward partition is at least `ends`; return them."""
    deadline = time.monotonic() + timeout
    while True:
        offsets = await committed(settings, "sampler", "reward")
        if all(offsets.get(p, 0) >= end for p, end in ends.items()):
            return offsets
        if time.monotonic() > deadline:
            return offsets
        await asyncio.sleep(0.2)


class SamplerProcess:
    """`scalecua sample` in a process of its own, its log in a file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [*SCALECUA, "sample", *args], env=env, stdout=self._out, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def text(self) -> str:
        """The log so far."""
        return self.log.read_text(errors="replace")

    async def wait_for(self, needle: str, count: int = 1, timeout: float = 60) -> None:
        """Wait until `needle` appears `count` times in the log (fail if the process exits)."""
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            assert self.proc.poll() is None, (
                f"exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"no {needle!r} in:\n{self.text()[-3000:]}"
            await asyncio.sleep(0.05)

    def kill9(self) -> None:
        """kill -9, and reap it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM; return the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._out.close()
        return code

    def close(self) -> None:
        """Make sure the process is gone (after a failed test)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()
