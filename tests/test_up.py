"""`scalecua up`, the README's main command: the whole RL loop end to end on real desktops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from playwright.async_api import async_playwright

from runtime.broker import EmbeddedBroker
from runtime.bus import EventProducer
from runtime.config import BusSettings
from tests.bus_reading import read_records
from tests.cli.test_trace import check_a_real_run
from tests.consumers.dashboard.harness import CHROMIUM, CHROMIUM_ARGS, until
from topics.events import Event, PolicyUpdate, Reward, RunStarted, TaskEvent, TrajectoryComplete

TASKS = ["terminal_write_greeting", "terminal_mkdir_projects"]


async def _watch_dashboard(url: str, seen: dict) -> None:
    """Open the live page and wait until it shows a trained policy version and rewards."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(url)
        await until(page, "document.getElementById('status').textContent === 'live'", 30)
        await until(page, "Number(document.getElementById('kpi-version').textContent) >= 1", 240)
        seen["version"] = await page.text_content("#kpi-version")
        seen["tasks_rows"] = await page.locator("#tasks-table tbody tr").count()
        seen["errors"] = errors
        await browser.close()


@pytest.mark.desktop
async def test_up_runs_the_rl_loop_and_leaves_a_replayable_archive(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path)}
    for name in ("SCALECUA_BOOTSTRAP", "SCALECUA_BLOBS", "SCALECUA_CONFIG"):
        env.pop(name, None)
    argv = [
        sys.executable, "-m", "cli", "up", "--policy", "tiny", "--iterations", "3",
        "--batch", "1", "--n",
        "2", "--max-steps", "2", "--max-tokens", "16", "--desktops", "2", "--dashboard-port",
        "0", "--tasks", *TASKS,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    seen: dict = {}
    stderr: list[str] = []
    watcher = None
    try:
        async with asyncio.timeout(420):
            assert proc.stderr is not None and proc.stdout is not None
            while line := (await proc.stderr.readline()).decode():
                stderr.append(line)
                found = re.search(r"\[scalecua up\] dashboard: (http://\S+)", line)
                if found:
                    watcher = asyncio.create_task(_watch_dashboard(found.group(1), seen))
            out = (await proc.stdout.read()).decode()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    log = "".join(stderr)
    assert proc.returncode == 0, log[-4000:]
    assert watcher is not None, log[-4000:]
    await watcher  # the page showed the loop live, without script errors
    assert int(seen["version"]) >= 1 and seen["tasks_rows"] >= 1 and not seen["errors"], seen
    iterations = [i for i, line in enumerate(stderr) if "] iteration " in line]
    assert len(iterations) == 3, log[-4000:]
    last_step = [i for i, line in enumerate(stderr) if "took its last step" in line]
    assert last_step and last_step[0] > iterations[-1], log[-4000:]  # the story in order
    assert "did not finish its backlog" not in log, log[-4000:]

    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["outcome"] == "done" and len(summary["iterations"]) == 3, summary
    # Each iteration reports the rollouts its step trained on: its groups, n = 2 each.
    for row in summary["iterations"]:
        assert row["rollouts"] == 2 * row["groups"] and row["pass_rate"] is not None, row
    archive = Path(summary["archive"])
    tables = {}
    for topic_name in ("tasks", "rollout-requests", "rollout-step", "trajectory-complete",
                       "reward", "segment-ready", "task-stats", "policy-updates"):  # fmt: skip
        path = tmp_path / f"{topic_name}.parquet"
        replay = subprocess.run(
            [sys.executable, "-m", "cli", "replay", topic_name, "--archive",
             str(archive), "--run", summary["run"], "--out", str(path)],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stderr
        tables[topic_name] = pq.read_table(path).to_pylist()
    assert {t["task_id"] for t in tables["tasks"]} == set(TASKS)
    assert len(tables["rollout-requests"]) >= 3 * 2
    completes = tables["trajectory-complete"]
    steps = Counter(s["trajectory_id"] for s in tables["rollout-step"])
    assert completes and all(steps[c["trajectory_id"]] == c["num_steps"] for c in completes)
    rewards = tables["reward"]
    assert len(rewards) >= 3 * 2 and all(r["scored"] for r in rewards)
    # The judge and the segmenter finished what the rollouts wrote before the stack stopped.
    segmented = {s["trajectory_id"] for s in tables["segment-ready"]}
    assert {c["trajectory_id"] for c in completes} <= segmented
    assert {c["trajectory_id"] for c in completes} <= {r["trajectory_id"] for r in rewards}
    assert {s["task_id"] for s in tables["task-stats"]} == set(TASKS)
    versions = sorted(u["policy_version"] for u in tables["policy-updates"])
    assert versions[-3:] == [1, 2, 3]
    # `scalecua trace` follows one of its trained trajectories through every stage (issue 34).
    check_a_real_run(str(archive), summary["run"], env)
    # The worker followed the trainer: some episodes were played by a trained policy.
    assert max(r["policy_version"] for r in rewards) >= 1
    checkpoint = Path(summary["checkpoint"].removeprefix("file://"))
    assert (checkpoint / "config.json").is_file()


async def _write(settings: BusSettings, events: list[tuple[str, Event]]) -> None:
    async with EventProducer(settings) as producer:
        await producer.wait_acks([await producer.send(name, e) for name, e in events])


async def test_up_refuses_a_log_that_holds_another_run_s_records(
    broker: EmbeddedBroker, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 30, finding 11: `up --bootstrap` on a log with history took another trainer's
    updates for its iterations and its worker played that trainer's policy. It refuses, with
    the reason, before it starts anything; a log that holds only tasks is its own."""
    from cli.up.local_stack import _start_broker

    settings = BusSettings(bootstrap=broker.bootstrap)
    await _write(settings, [("tasks", TaskEvent(task_id="t0", task={"id": "t0"}))])
    assert await _start_broker(broker.bootstrap, None, str(tmp_path / "archive")) == (
        broker.bootstrap, None,
    )  # fmt: skip
    old = PolicyUpdate(policy_version=2, checkpoint_uri="file:///another/run/v000002")
    reward = Reward(trajectory_id="g/0@1", task_id="t0", group_id="g", group_size=1, score=1.0)
    await _write(settings, [("policy-updates", old), ("reward", reward)])
    env = {**cli_env, "SCALECUA_HOME": str(tmp_path)}
    env.pop("SCALECUA_CONFIG", None)
    argv = [sys.executable, "-m", "cli", "up", "--bootstrap", broker.bootstrap,
            "--policy", "tiny", "--iterations", "1", "--batch", "1", "--n", "2",
            "--no-dashboard", "--tasks", *TASKS]  # fmt: skip
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr[-3000:]
    error = [line for line in res.stderr.splitlines() if line.startswith("scalecua: error:")]
    assert len(error) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert f"the log at {broker.bootstrap} already holds run {broker.run_id}'s records" in error[0]
    assert "1 reward, 1 policy-updates" in error[0] and "tasks" not in error[0].split(")")[0]
    tasks = await read_records(settings, "tasks", 2, timeout=2)
    assert len(tasks) == 1  # nothing was started: its pool was not imported


async def test_up_s_progress_shows_only_updates_written_after_it_started(
    broker: EmbeddedBroker,
) -> None:
    """The console's iterations, and the checkpoint its summary names, are the run's own: an
    update already in the log (another run's, or a resumed run's re-seeded one) is not."""
    from cli.up.progress import Progress
    from runtime.runs import log_ends

    settings = BusSettings(bootstrap=broker.bootstrap)
    old = PolicyUpdate(policy_version=2, checkpoint_uri="file:///another/run/v000002")
    await _write(settings, [("policy-updates", old)])
    progress = Progress(settings, 3, "v1", await log_ends(settings, Progress.TOPICS))
    task = asyncio.create_task(progress.run())
    try:
        mine = PolicyUpdate(policy_version=1, checkpoint_uri="file:///mine/v000001")
        await _write(settings, [("policy-updates", mine)])
        async with asyncio.timeout(30):
            while not progress.rows:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # anything else it would read has been read by now
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [(r["iteration"], r["policy_version"]) for r in progress.rows] == [(1, 1)]
    assert progress.last_uri == mine.checkpoint_uri


async def test_up_takes_a_resumed_log_s_reseeded_records_as_where_its_run_starts(
    bare_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """`scalecua broker --resume` re-seeds a log (task-stats, the last policy update): `up`
    against it is that run, not a log with another run's history; one more record is."""
    from cli.up.local_stack import _start_broker
    from runtime.broker import create_topics
    from runtime.errors import ConfigError

    settings = BusSettings(bootstrap=bare_broker.bootstrap)
    await create_topics(bare_broker.bootstrap)
    resumed = RunStarted(run_id="r2", resumed_from="r1", seeded={"policy-updates": 1})
    update = PolicyUpdate(policy_version=3, checkpoint_uri="file:///r1/v000003")
    await _write(settings, [("runs", resumed), ("policy-updates", update)])
    archive = str(tmp_path / "archive")
    assert await _start_broker(bare_broker.bootstrap, None, archive) == (
        bare_broker.bootstrap, None,
    )  # fmt: skip
    later = PolicyUpdate(policy_version=4, checkpoint_uri="file:///elsewhere/v000004")
    await _write(settings, [("policy-updates", later)])
    with pytest.raises(ConfigError, match=r"already holds run r2's records \(1 policy-updates\)"):
        await _start_broker(bare_broker.bootstrap, None, archive)


async def test_up_s_progress_follows_a_restarted_broker_to_its_new_log(tmp_path: Path) -> None:
    """After a broker restart the console read the new log at the old log's positions, so it
    showed the same rollouts played for minutes (issue 30, finding 7); it reads the new log
    from its beginning."""
    from cli.up.progress import Progress
    from runtime.runs import log_ends

    first = await EmbeddedBroker(log_file=tmp_path / "first.log").start()
    settings = BusSettings(bootstrap=first.bootstrap)
    second: EmbeddedBroker | None = None

    def completes(n: int) -> list[tuple[str, Event]]:  # one request id: one partition
        return [("trajectory-complete", TrajectoryComplete(
            trajectory_id=f"g/0@{i}", status="done", num_steps=1, request_id="g/0",
        )) for i in range(n)]  # fmt: skip

    progress = Progress(settings, 3, "v1", await log_ends(settings, Progress.TOPICS))
    progress.run_check_interval_s = 0.5
    task = asyncio.create_task(progress.run())
    try:
        await _write(settings, completes(4))
        async with asyncio.timeout(30):
            while progress.played < 4:
                await asyncio.sleep(0.05)
        first._proc.kill()
        first._proc.wait(5)
        second = await EmbeddedBroker(port=first.port, log_file=tmp_path / "second.log").start()
        await _write(settings, completes(2))  # offsets 0-1, below the old log's 4
        async with asyncio.timeout(30):
            while progress.played < 6:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        assert progress.played == 6
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        first.stop()
        if second is not None:
            second.stop()
