"""The embedded broker killed (kill -9) and started again on the same port while the services
run, as separate processes: they reconnect to an empty log, and every request written to it
afterwards still yields its episode, reward, segments and archive rows (the old log's
positions are never applied to the new one)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runtime.archive.store import ArchiveStore
from runtime.broker import free_port
from runtime.config import BusSettings
from runtime.runs import current_run
from tests.broker_process import SCALECUA, start_broker
from tests.bus_reading import read_until

TASK = "terminal_write_greeting"

pytestmark = pytest.mark.desktop


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*SCALECUA, *argv], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
        start_new_session=True,
    )  # fmt: skip


def _cli(argv: list[str], env: dict[str, str]) -> None:
    res = subprocess.run([*SCALECUA, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


async def _round(settings: BusSettings, env: dict[str, str], n: int) -> set[str]:
    """Import the tasks, request one group of n and wait for its rewards; their trajectories."""
    _cli(["tasks", "import", "--builtin"], env)
    group = f"{TASK}-{time.monotonic_ns()}"
    _cli(["request", TASK, "--n", str(n), "--max-steps", "4", "--group-id", group], env)
    rewards = await read_until(
        settings, "reward", lambda rs: sum(r.event.group_id == group for r in rs) >= n, 240
    )
    return {r.event.trajectory_id for r in rewards if r.event.group_id == group}


async def test_services_follow_a_restarted_broker_to_its_new_log(tmp_path: Path) -> None:
    port = free_port()
    archive = tmp_path / "archive"
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path), "SCALECUA_BOOTSTRAP": f"127.0.0.1:{port}"}
    env.pop("SCALECUA_CONFIG", None)
    settings = BusSettings(bootstrap=env["SCALECUA_BOOTSTRAP"])
    broker = start_broker(port, env, tmp_path / "broker.log")
    services = {
        "rollout": ["rollout", "--policy", "scripted", "--desktops", "1"],
        "judge": ["judge"],
        "segment": ["segment"],
        "archive": ["archive", "--dir", str(archive), "--max-age", "0.5"],
    }
    procs = {name: _start(argv, env, tmp_path / f"{name}.log") for name, argv in services.items()}
    try:
        first_run = (await current_run(settings)).run_id
        await _round(settings, env, 2)

        os.killpg(broker.pid, signal.SIGKILL)  # kill -9: the in-memory log is gone
        broker.wait(10)
        await asyncio.sleep(2.0)  # the services notice the outage and retry
        broker = start_broker(port, env, tmp_path / "broker.log")
        second_run = (await current_run(settings)).run_id
        assert second_run != first_run

        trajectories = await _round(settings, env, 3)
        segments = await read_until(
            settings, "segment-ready",
            lambda rs: trajectories <= {r.event.trajectory_id for r in rs}, 120,
        )  # fmt: skip
        assert trajectories <= {r.event.trajectory_id for r in segments}
        store = ArchiveStore(str(archive))
        deadline = time.monotonic() + 60
        while True:
            table = store.read("reward", runs=[second_run])
            archived = set(table.column("trajectory_id").to_pylist()) if table else set()
            steps = store.read("rollout-step", runs=[second_run])
            stepped = set(steps.column("trajectory_id").to_pylist()) if steps else set()
            if trajectories <= archived and trajectories <= stepped:
                break
            assert time.monotonic() < deadline, (trajectories, archived, stepped)
            await asyncio.sleep(0.5)
        for name, proc in procs.items():
            assert proc.poll() is None, (name, (tmp_path / f"{name}.log").read_text()[-3000:])
        logs = "".join((tmp_path / f"{n}.log").read_text() for n in services)
        assert "the log changed under this service" in logs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGTERM)
            broker.wait(10)
