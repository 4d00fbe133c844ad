"""`scalecua dashboard --archive`: an archived run on the same page, with no broker at all."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
from playwright.async_api import async_playwright

from runtime.archive.layout import events_to_table
from runtime.archive.store import ArchiveStore
from runtime.blobstore import LocalBlobStore
from tests.consumers.dashboard.harness import CHROMIUM, CHROMIUM_ARGS, screenshot_png, until
from topics.events import (
    Event,
    PolicyUpdate,
    Reward,
    RolloutStep,
    RunStarted,
    TaskStats,
    TrajectoryComplete,
)
from topics.registry import TOPICS

OLD, NEW = "20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb"


def _archive(store: ArchiveStore, run_id: str, events: list[tuple[str, Event]]) -> None:
    """Write events as the archiver would: one file per topic, partition 0, offsets from 0."""
    by_topic: dict[str, list[Event]] = {}
    for name, event in events:
        by_topic.setdefault(name, []).append(event)
    for name, items in by_topic.items():
        rows = [(0, i, e.ts_ms, None, e) for i, e in enumerate(items)]
        table = events_to_table(TOPICS[name].event_type, rows)
        store.write(name, 0, run_id, 0, len(items) - 1, table)


def _reward(i: int, score: float, version: int) -> Reward:
    return Reward(
        trajectory_id=f"t{version}-{i}", task_id="calc_sum_total", group_id=f"g{version}",
        group_size=4, score=score, policy_version=version,
    )  # fmt: skip


def _run_events(blobs: LocalBlobStore, run_id: str, passes: int) -> list[tuple[str, Event]]:
    events: list[tuple[str, Event]] = [("runs", RunStarted(run_id=run_id))]
    events += [("reward", _reward(i, 1.0 if i < passes else 0.0, 0)) for i in range(4)]
    events.append(
        (
            "policy-updates",
            PolicyUpdate(policy_version=1, checkpoint_uri="c1", metrics={"loss": 0.7}),
        )
    )
    events.append(("task-stats", TaskStats(task_id="calc_sum_total", ema_pass_rate=passes / 4, weight=1.0, attempts=1)))  # fmt: skip
    for n in range(8):  # eight episodes: the filmstrip shows the newest six
        tid = f"{run_id}-ep{n}"
        for step in range(2):
            ref = blobs.put(screenshot_png(f"{run_id} ep {n} turn {step}", (220, 220, 220)))
            events.append(("rollout-step", RolloutStep(
                trajectory_id=tid, step=step, task_id="calc_sum_total", observation_ref=ref,
                action={"action": "left_click", "coordinate": [100 * step, 500]},
            )))  # fmt: skip
        events.append(("trajectory-complete", TrajectoryComplete(
            trajectory_id=tid, status="done", num_steps=2, task_id="calc_sum_total",
            ts_ms=1_000 + n,
        )))  # fmt: skip
    return events


async def test_an_archived_run_opens_without_a_broker(tmp_path: Path) -> None:
    store = ArchiveStore(str(tmp_path / "archive"))
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    _archive(store, OLD, _run_events(blobs, OLD, passes=1))
    _archive(store, NEW, _run_events(blobs, NEW, passes=3))
    env = {
        **os.environ, "SCALECUA_BLOBS": str(tmp_path / "blobs"),
        "SCALECUA_BOOTSTRAP": "127.0.0.1:1",  # nothing listens there: archive mode must not care
    }  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "dashboard", "--archive", str(tmp_path / "archive"),
        "--port", "0", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    errors: list[str] = []
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:"), (line, await proc.stderr.read())
        async with httpx.AsyncClient(base_url=url) as client:
            runs = (await client.get("/api/runs")).json()
            assert runs == {"mode": "archive", "runs": [OLD, NEW], "current": NEW}
            latest = (await client.get("/api/panels")).json()
            (row,) = latest["iterations"]["rows"]
            assert (row["version"], row["pass_rate"]) == (0, 0.75)
            assert latest["summary"]["status"] == "archive"
            assert latest["trainer"]["metrics"] == {"loss": [0.7]}
            films = latest["filmstrip"]["trajectories"]
            assert [f["trajectory_id"] for f in films] == [f"{NEW}-ep{n}" for n in range(7, 1, -1)]
            assert [len(f["frames"]) for f in films] == [2] * 6
            records = {t["topic"]: t["records"] for t in latest["services"]["topics"]}
            assert (records["rollout-step"], records["reward"]) == (16, 4)
            old = (await client.get(f"/api/panels?run={OLD}")).json()
            assert old["iterations"]["rows"][0]["pass_rate"] == 0.25
            missing = await client.get("/api/panels?run=nope")
            assert (missing.status_code, missing.text[:10]) == (404, "no run 'no")
            thumb = await client.get(f"/blob/{films[0]['frames'][0]['ref']}?w=320")
            assert (thumb.status_code, thumb.headers["content-type"]) == (200, "image/jpeg")

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{url}?run={OLD}")
            await until(page, "document.querySelectorAll('.film').length === 6")
            await until(
                page,
                "[...document.querySelectorAll('.film')].slice(0, 2).flatMap(f => [...f.querySelectorAll('img')])"
                ".every(i => i.complete && i.naturalWidth > 0)",
            )
            assert not await page.is_visible("#chart-lag")  # no live services in an archive
            assert (await page.text_content("#status")) == "archive"
            assert (await page.text_content("#kpi-pass-rate")) == "25.0%"
            assert await page.is_visible("#run-picker")
            assert await page.locator("#run-select").input_value() == OLD
            await page.screenshot(path=str(tmp_path / "archive.png"), full_page=True)
            await browser.close()
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    assert not errors, errors


async def test_a_missing_run_or_a_wide_host_from_config_is_refused(tmp_path: Path) -> None:
    store = ArchiveStore(str(tmp_path / "archive"))
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    _archive(store, OLD, _run_events(blobs, OLD, passes=1)[:3])
    base = [sys.executable, "-m", "cli", "dashboard", "--archive", str(tmp_path / "archive"), "--port", "0"]  # fmt: skip
    cases = [
        (base + ["--run", "nope"], {}, "no run 'nope'"),
        (base, {"SCALECUA_DASHBOARD_HOST": "0.0.0.0"}, "typed on the command line"),
    ]
    for argv, extra, message in cases:
        proc = await asyncio.create_subprocess_exec(
            *argv, env={**os.environ, **extra}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 1, (out, err)
        assert message in err.decode(), err.decode()
        assert out == b""
