"""`scalecua up`, the README's main command: the whole RL loop end to end on real desktops."""

from __future__ import annotations

import asyncio
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

from tests.consumers.dashboard.harness import CHROMIUM, CHROMIUM_ARGS, until

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
        sys.executable, "-m", "runtime.cli", "up", "--policy", "tiny", "--iterations", "3",
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
            [sys.executable, "-m", "runtime.cli", "replay", topic_name, "--archive",
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
    # The worker followed the trainer: some episodes were played by a trained policy.
    assert max(r["policy_version"] for r in rewards) >= 1
    checkpoint = Path(summary["checkpoint"].removeprefix("file://"))
    assert (checkpoint / "config.json").is_file()
