"""The archiver as real `scalecua archive` processes: exactly-once under kill -9, group
scaling and takeover, dead-letters for garbage, and replay from the archive and the log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runtime.archive.store import ArchiveStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from topics.events import RolloutStep
from topics.registry import TOPICS

SCALECUA = [sys.executable, "-m", "cli"]


def _spawn(archive: Path, env: dict[str, str], log: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        *SCALECUA,
        "archive",
        "--dir",
        str(archive),
        "--max-age",
        "0.3",
        "--max-rows",
        "200",
        *extra,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))  # noqa: SIM115


def _archived(archive: Path, topic_name: str) -> list[dict]:
    table = ArchiveStore(str(archive)).read(topic_name)
    return (
        []
        if table is None
        else table.select(["_partition", "_offset", "event_id", "step"]).to_pylist()
    )


async def _wait_rows(archive: Path, topic_name: str, n: int, timeout: float = 45) -> list[dict]:
    deadline = time.monotonic() + timeout
    rows = _archived(archive, topic_name)
    while len(rows) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        rows = _archived(archive, topic_name)
    return rows


async def _produce_steps(
    settings: BusSettings, start: int, n: int, pause_every: int = 0
) -> set[str]:
    ids = set()
    async with EventProducer(settings) as producer:
        futures = []
        for i in range(start, start + n):
            ev = RolloutStep(
                trajectory_id=f"traj-{i % 17}", step=i, response_ids=list(range(i % 50))
            )
            ids.add(ev.event_id)
            futures.append(await producer.send("rollout-step", ev))
            if pause_every and i % pause_every == 0:
                await producer.wait_acks(futures)
                futures = []
                await asyncio.sleep(0.05)
        await producer.wait_acks(futures)
    return ids


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _assert_exactly_once(rows: list[dict], ids: set[str]) -> None:
    coords = [(r["_partition"], r["_offset"]) for r in rows]
    assert len(coords) == len(set(coords)), "a record was archived twice"
    assert {r["event_id"] for r in rows} == ids
    assert len(rows) == len(ids)


async def test_kill_9_mid_stream_then_restart_archives_every_record_once(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    archive = tmp_path / "archive"
    proc = _spawn(archive, cli_env, tmp_path / "a1.log")
    try:
        producing = asyncio.create_task(_produce_steps(bus_settings, 0, 3000, pause_every=50))
        await _wait_rows(archive, "rollout-step", 600)
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream, with rows still buffered
        proc.wait(10)
        ids = await producing
        partial = _archived(archive, "rollout-step")
        assert 0 < len(partial) < 3000
        proc = _spawn(archive, cli_env, tmp_path / "a2.log")
        rows = await _wait_rows(archive, "rollout-step", 3000)
        await asyncio.sleep(1.0)  # would any duplicate still arrive?
        rows = _archived(archive, "rollout-step")
    finally:
        _stop(proc)
    _assert_exactly_once(rows, ids)
    assert not list(archive.rglob(".tmp-*")), "a half-written file became visible"


def _assignments(log: Path) -> list[set[str]]:
    """Return each partition assignment an archiver logged, in order."""
    out = []
    for line in log.read_text().splitlines():
        if " assigned " in line and " partitions: " in line:
            names = line.split(" partitions: ", 1)[1].split()
            out.append(
                {
                    f"{n.split('[')[0]}[{p}]"
                    for n in names
                    for p in n[n.index("[") + 1 : -1].split(",")
                }
            )
    return out


async def test_two_archivers_split_partitions_and_one_takes_over(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    archive = tmp_path / "archive"
    logs = [tmp_path / "x.log", tmp_path / "y.log"]
    procs = [_spawn(archive, cli_env, logs[0]), _spawn(archive, cli_env, logs[1])]
    total = sum(spec.partitions for spec in TOPICS.values())
    try:
        ids = await _produce_steps(bus_settings, 0, 1000, pause_every=100)
        await _wait_rows(archive, "rollout-step", 1000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            x, y = (_assignments(log) for log in logs)
            if x and y and x[-1] and y[-1] and len(x[-1] | y[-1]) == total:
                break
            await asyncio.sleep(0.2)
        assert x[-1] and y[-1] and not (x[-1] & y[-1]), "the group did not split the partitions"
        assert len(x[-1] | y[-1]) == total
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        ids |= await _produce_steps(bus_settings, 1000, 1000, pause_every=100)
        await _wait_rows(archive, "rollout-step", 2000, timeout=60)
        await asyncio.sleep(1.0)
        rows = _archived(archive, "rollout-step")
    finally:
        for p in procs:
            _stop(p)
    _assert_exactly_once(rows, ids)
    assert len(_assignments(logs[1])[-1]) == total, "the survivor did not take over"


async def test_garbage_goes_to_dead_letter_and_archiving_goes_on(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    archive = tmp_path / "archive"
    proc = _spawn(archive, cli_env, tmp_path / "a.log")
    try:
        ids = await _produce_steps(bus_settings, 0, 20)
        async with EventProducer(bus_settings) as producer:
            await producer.wait_acks(
                [await producer.send_raw("rollout-step", b"\xc1 not msgpack", b"traj-1")]
            )
            await producer.wait_acks(
                [await producer.send_raw("reward", b'{"json": "not msgpack"}')]
            )
        ids |= await _produce_steps(bus_settings, 20, 20)
        rows = await _wait_rows(archive, "rollout-step", 40)
        dead = ArchiveStore(str(archive))
        deadline = time.monotonic() + 20
        while (t := dead.read("dead-letter")) is None or t.num_rows < 2:
            assert time.monotonic() < deadline, "dead letters never archived"
            await asyncio.sleep(0.2)
        assert proc.poll() is None, "archiver died on garbage"
    finally:
        _stop(proc)
    _assert_exactly_once(rows, ids)
    letters = t.to_pylist()
    assert {d["source_topic"] for d in letters} == {"rollout-step", "reward"}
    assert all(d["error_type"] == "decode" and "not a" in d["error"] for d in letters)
    assert b"\xc1 not msgpack" in {d["original_value"] for d in letters}


async def test_replay_from_archive_matches_replay_from_log(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    archive = tmp_path / "archive"
    ids = await _produce_steps(bus_settings, 0, 500)
    proc = _spawn(archive, cli_env, tmp_path / "a.log")
    try:
        await _wait_rows(archive, "rollout-step", 500)
    finally:
        _stop(proc)
    live, arch = tmp_path / "live.parquet", tmp_path / "arch.parquet"
    for out, extra in ((live, []), (arch, ["--archive", str(archive)])):
        res = subprocess.run([*SCALECUA, "replay", "rollout-step", "--out", str(out), *extra],
                             env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "wrote 500 rollout-step rows" in res.stderr
    a, b = pq.read_table(live), pq.read_table(arch)
    assert a.schema == b.schema
    assert a.to_pylist() == b.to_pylist()
    assert set(a.column("event_id").to_pylist()) == ids
    # an offset window
    res = subprocess.run([*SCALECUA, "replay", "rollout-step", "--out", str(tmp_path / "w.parquet"),
                          "--archive", str(archive), "--start-offset", "10", "--end-offset", "20"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    window = pq.read_table(tmp_path / "w.parquet")
    assert window.num_rows > 0
    assert all(10 <= o < 20 for o in window.column("_offset").to_pylist())


async def test_archive_to_s3_and_replay_from_it(
    tmp_path: Path,
    bus_settings: BusSettings,
    cli_env: dict[str, str],
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a cluster the archive is a data lake: the same archiver writes to an S3 URL."""
    import boto3

    bucket = "lake"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    env = {**cli_env, **{k: v for k, v in os.environ.items() if k.startswith("AWS_")}}
    url = f"s3://{bucket}/scalecua/archive"
    ids = await _produce_steps(bus_settings, 0, 300)
    proc = subprocess.Popen(
        [*SCALECUA, "archive", "--dir", url, "--max-age", "0.3", "--topics", "rollout-step"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "a.log", "ab"),  # noqa: SIM115
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            table = ArchiveStore(url).read("rollout-step")
            if table is not None and table.num_rows >= 300:
                break
            await asyncio.sleep(0.3)
    finally:
        _stop(proc)
    assert proc.returncode == 0, (tmp_path / "a.log").read_text()[-2000:]
    rows = table.select(["_partition", "_offset", "event_id", "step"]).to_pylist()
    _assert_exactly_once(rows, ids)
    out = tmp_path / "from-s3.parquet"
    res = subprocess.run([*SCALECUA, "replay", "rollout-step", "--archive", url, "--out", str(out)],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert pq.read_table(out).num_rows == 300


async def test_the_archiver_serves_its_metrics_where_asked(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    # `--metrics-port` was accepted and ignored: a fleet's operator scraped nothing.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _spawn(tmp_path / "archive", cli_env, tmp_path / "a.log", "--metrics-port", str(port))
    try:
        await _produce_steps(bus_settings, 0, 20)
        deadline, consumed = time.monotonic() + 60, 0.0
        while consumed < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            with contextlib.suppress(OSError):
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                for line in text.decode().splitlines():
                    if line.startswith('scalecua_consumed_total{service="archiver"}'):
                        consumed = float(line.rsplit(" ", 1)[1])
    finally:
        _stop(proc)
    assert consumed >= 20
