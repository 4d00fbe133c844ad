"""The archive across runs of the in-memory broker (offsets restart at 0 every run), resuming a
run from the archive, and the archiver's own storage failing (a full file system)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from consumers.archiver.service import Archiver, ArchiverConfig
from runtime.archive.store import ArchiveStore
from runtime.broker import EmbeddedBroker
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from runtime.replay import ReplayIncomplete, read_live
from runtime.retry import RetryPolicy
from runtime.runs import current_run, reseed_from_archive, run_resolver
from runtime.service import ServiceRunner
from topics.events import PolicyUpdate, RolloutStep, TaskEvent, TaskStats

SCALECUA = [sys.executable, "-m", "cli"]


async def _produce_steps(settings: BusSettings, n: int, tag: str) -> set[str]:
    ids = set()
    async with EventProducer(settings) as producer:
        futures = []
        for i in range(n):
            ev = RolloutStep(trajectory_id=f"{tag}-{i % 7}", step=i)
            ids.add(ev.event_id)
            futures.append(await producer.send("rollout-step", ev))
        await producer.wait_acks(futures)
    return ids


async def _archive_until(
    settings: BusSettings, root: Path, topic_name: str, n: int, runs: list[str] | None = None
) -> Archiver:
    archiver = Archiver(ArchiverConfig(root=str(root), max_age_s=0.2), run_resolver(settings))
    runner = ServiceRunner(archiver, settings)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    store = ArchiveStore(str(root))
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and not task.done():
        table = store.read(topic_name, runs=runs)
        if table is not None and table.num_rows >= n:
            break
        await asyncio.sleep(0.2)
    runner.stop()
    await asyncio.wait_for(task, 30)
    return archiver


async def test_a_second_run_of_the_broker_is_archived_in_full_and_apart(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    ids: dict[str, set[str]] = {}
    for tag, n in (("first", 80), ("second", 30)):
        async with EmbeddedBroker(log_file=tmp_path / f"{tag}.log") as broker:
            settings = BusSettings(bootstrap=broker.bootstrap)
            ids[broker.run_id] = await _produce_steps(settings, n, tag)
            archiver = await _archive_until(settings, root, "rollout-step", n, [broker.run_id])
            assert archiver.run_id == broker.run_id == (await current_run(settings)).run_id
    first, second = sorted(ids)  # run ids sort by start time
    store = ArchiveStore(str(root))
    assert store.runs("rollout-step") == [first, second]
    table = store.read("rollout-step")
    by_run = {r: set() for r in ids}
    for row in table.select(["_run", "event_id"]).to_pylist():
        by_run[row["_run"]].add(row["event_id"])
    # Before runs, the second run's offsets 0..29 were taken for redeliveries of the first's.
    assert by_run == ids

    every, one = tmp_path / "every.parquet", tmp_path / "one.parquet"
    for out, extra in ((every, []), (one, ["--run", second])):
        res = subprocess.run(
            [*SCALECUA, "replay", "rollout-step", "--archive", str(root), "--out", str(out), *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    assert pq.read_table(every).num_rows == 110
    assert set(pq.read_table(one).column("event_id").to_pylist()) == ids[second]
    res = subprocess.run(
        [*SCALECUA, "replay", "rollout-step", "--archive", str(root), "--out", str(one),
         "--run", "no-such-run"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 1 and "no run 'no-such-run'" in res.stderr


async def test_a_restarted_broker_resumes_a_run_from_the_archive(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    async with EmbeddedBroker(log_file=tmp_path / "first.log") as broker:
        settings = BusSettings(bootstrap=broker.bootstrap)
        async with EventProducer(settings) as producer:
            for version in (1, 2):  # a task updated once, stats updated twice, two checkpoints
                await producer.send_and_wait(
                    "tasks", TaskEvent(task_id="t1", task={"id": "t1", "v": version})
                )
                await producer.send_and_wait(
                    "policy-updates",
                    PolicyUpdate(policy_version=version, checkpoint_uri=f"c{version}"),
                )
            await producer.send_and_wait("tasks", TaskEvent(task_id="t2", task={"id": "t2"}))
            for rate in (0.2, 0.6):
                stats = TaskStats(task_id="t1", ema_pass_rate=rate, weight=1.0, attempts=1)
                await producer.send_and_wait("task-stats", stats)
        first_run = broker.run_id
        await _archive_until(settings, root, "task-stats", 2)

    second = EmbeddedBroker(log_file=tmp_path / "second.log")
    res = subprocess.Popen(
        [*SCALECUA, "broker", "--port", str(second.port), "--resume", "--resume-archive", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = res.stdout.readline().strip()
        assert line == second.bootstrap, res.stderr.read() if res.poll() is not None else line
        settings = BusSettings(bootstrap=second.bootstrap)
        run = await current_run(settings)
        assert run.resumed_from == first_run and run.run_id != first_run
        assert run.seeded == {"tasks": 2, "task-stats": 1, "policy-updates": 1}
        seeded: dict[str, list] = {}
        async with EventConsumer(settings, ["tasks", "task-stats", "policy-updates"], None) as c:
            tps = [tp for t in ("tasks", "task-stats", "policy-updates")
                   for tp in await c.partitions_of(t)]  # fmt: skip
            c.raw.assign(tps)
            await c.raw.seek_to_beginning(*tps)
            deadline = time.monotonic() + 10
            while sum(map(len, seeded.values())) < 4 and time.monotonic() < deadline:
                for r in await c.getmany(timeout_ms=200):
                    seeded.setdefault(r.topic, []).append(r.event)
    finally:
        res.terminate()
        res.wait(10)
    assert sorted((e.task_id, e.task.get("v")) for e in seeded["tasks"]) == [
        ("t1", 2),
        ("t2", None),
    ]
    assert [e.ema_pass_rate for e in seeded["task-stats"]] == [0.6]
    assert [e.policy_version for e in seeded["policy-updates"]] == [2]


async def test_a_full_archive_disk_is_retried_not_dead_lettered(
    tmp_path: Path, bus_settings: BusSettings
) -> None:
    root = tmp_path / "small"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(root)], check=True)
    try:
        ids = await _produce_steps(bus_settings, 300, "disk")
        config = ArchiverConfig(
            root=str(root), topics=("rollout-step",), max_rows=50, max_age_s=0.2
        )
        archiver = Archiver(config, run_resolver(bus_settings))
        retry = RetryPolicy(first_delay_s=0.1, max_delay_s=0.3, give_up_after_s=600)
        runner = ServiceRunner(archiver, bus_settings, retry=retry)
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        deadline = time.monotonic() + 30
        while runner.metrics.retries < 3 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        assert runner.metrics.retries >= 3, "the full disk was never hit"
        assert not task.done(), "the archiver died on a full disk"
        # The operator frees space: everything lands, once, and nothing was dead-lettered.
        subprocess.run(["mount", "-o", "remount,size=64m", str(root)], check=True)
        store = ArchiveStore(str(root))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            table = store.read("rollout-step")
            if table is not None and table.num_rows >= 300:
                break
            await asyncio.sleep(0.2)
        runner.stop()
        await asyncio.wait_for(task, 30)
        rows = store.read("rollout-step").select(["_offset", "_partition", "event_id"]).to_pylist()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
    assert runner.metrics.dead_lettered == 0
    assert len(rows) == len({(r["_partition"], r["_offset"]) for r in rows}) == 300
    assert {r["event_id"] for r in rows} == ids


async def test_a_replay_that_loses_the_broker_says_it_is_incomplete(tmp_path: Path) -> None:
    broker = await EmbeddedBroker(log_file=tmp_path / "b.log").start()
    try:
        settings = BusSettings(bootstrap=broker.bootstrap, max_poll_records=50)
        await _produce_steps(settings, 2000, "replay")
        got = 0
        try:
            async for _record in read_live(settings, "rollout-step", idle_timeout_s=1.0):
                got += 1
                if got == 1:
                    broker.stop()  # the log goes away mid-replay
            raise AssertionError(f"the replay ended quietly after {got} records")
        except ReplayIncomplete as exc:
            assert "incomplete" in str(exc)
        assert 0 < got < 2000
    finally:
        broker.stop()


async def test_resume_takes_the_newest_run_with_tasks_and_says_when_none_has_any(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archive"
    async with EmbeddedBroker(log_file=tmp_path / "first.log") as broker:
        settings = BusSettings(bootstrap=broker.bootstrap)
        async with EventProducer(settings) as producer:
            await producer.send_and_wait("tasks", TaskEvent(task_id="t1", task={"id": "t1"}))
        with_tasks = broker.run_id
        await _archive_until(settings, root, "tasks", 1)
    async with EmbeddedBroker(log_file=tmp_path / "second.log") as broker:  # a restart, then
        settings = BusSettings(bootstrap=broker.bootstrap)  # stopped before any import
        stats = TaskStats(task_id="t1", ema_pass_rate=0.5, weight=1.0, attempts=1)
        async with EventProducer(settings) as producer:
            await producer.send_and_wait("task-stats", stats)
        await _archive_until(settings, root, "task-stats", 1, [broker.run_id])
    assert ArchiveStore(str(root)).runs()[-1] != with_tasks

    async with EmbeddedBroker() as third:
        source, seeded = await reseed_from_archive(
            BusSettings(bootstrap=third.bootstrap), str(root)
        )
    assert source == with_tasks and seeded["tasks"] == 1

    empty = tmp_path / "empty"
    async with EmbeddedBroker(log_file=tmp_path / "fourth.log") as broker:
        settings = BusSettings(bootstrap=broker.bootstrap)
        async with EventProducer(settings) as producer:
            await producer.send_and_wait("task-stats", stats)
        await _archive_until(settings, empty, "task-stats", 1)
    res = subprocess.run(
        [*SCALECUA, "broker", "--resume", "--resume-archive", str(empty)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode != 0
    assert "holds tasks" in res.stderr and broker.run_id in res.stderr, res.stderr
