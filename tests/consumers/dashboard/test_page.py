"""The dashboard in headless Chromium against the real broker: live charts, thumbnails, no errors.

The screenshot lands in the test's tmp folder (run with `--basetemp DIR` to look at it).
"""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image
from playwright.async_api import Page, async_playwright

from consumers.dashboard import service
from consumers.dashboard.service import serve_dashboard
from runtime.blobstore import LocalBlobStore
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from tests.consumers.dashboard.harness import CHROMIUM, CHROMIUM_ARGS, screenshot_png, until
from topics.events import PolicyUpdate, Reward, RolloutStep, TaskStats, TrajectoryComplete


def _reward(i: int, score: float, version: int, task: str, scored: bool = True) -> Reward:
    return Reward(
        trajectory_id=f"{task}/g{version}/{i}@0", task_id=task, group_id=f"g{version}",
        group_size=8, score=score, policy_version=version, scored=scored,
        status="done" if scored else "error", judge_version="osworld-metrics-v1",
    )  # fmt: skip


async def _publish(settings: BusSettings, events: list[tuple[str, object]]) -> None:
    async with EventProducer(settings) as producer:
        await producer.wait_acks([await producer.send(t, e) for t, e in events])


async def _commit_all(settings: BusSettings, group: str, topic_name: str) -> None:
    """Commit a group at the end of a topic, as a caught-up service would."""
    async with EventConsumer(settings, [topic_name], group_id=None) as probe:
        tps = await probe.partitions_of(topic_name)
        probe.raw.assign(tps)
        await probe.raw.seek_to_beginning(*tps)
        deadline = time.monotonic() + 10
        while any(probe.raw.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
            await probe.getmany(timeout_ms=100)
        ends = {tp: probe.raw.highwater(tp) for tp in tps}
    consumer = EventConsumer(settings, [], group_id=group)
    await consumer.start()
    try:
        consumer.raw.assign(tps)
        await consumer.commit({tp: end for tp, end in ends.items() if end})
    finally:
        await consumer.stop()


async def _text(page: Page, selector: str) -> str:
    return (await page.text_content(selector) or "").strip()


def _trajectory(blobs: LocalBlobStore, task: str, version: int) -> list[tuple[str, object]]:
    tid = f"{task}/g{version}/0@0"
    actions = [
        {"action": "left_click", "coordinate": [250, 180]},
        {"action": "type", "text": "=SUM(B2:B9)"},
        None,
        {"action": "key", "keys": "ctrl+s"},
    ]
    colors = [(230, 230, 230), (210, 235, 210), (235, 215, 200), (200, 215, 240)]
    events: list[tuple[str, object]] = []
    for step, (action, color) in enumerate(zip(actions, colors, strict=True)):
        events.append(("rollout-step", RolloutStep(
            trajectory_id=tid, step=step, task_id=task, group_id=f"g{version}",
            request_id=f"{task}/g{version}/0", policy_version=version,
            observation_ref=blobs.put(screenshot_png(f"turn {step}", color)), action=action,
            action_error=None if action else "parse: no tool call in the response",
        )))  # fmt: skip
    final = blobs.put(screenshot_png("final", (255, 255, 255)))
    events.append(("trajectory-complete", TrajectoryComplete(
        trajectory_id=tid, status="done", num_steps=4, task_id=task, group_id=f"g{version}",
        request_id=f"{task}/g{version}/0", policy_version=version, seconds=12.5,
        artifacts={"final_screenshot": final},
    )))  # fmt: skip
    events.append(("reward", _reward(0, 1.0, version, task)))
    return events


async def test_the_page_follows_the_log_live(bus_settings: BusSettings, tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: bash infra/install.sh --dev"  # noqa: ASYNC240
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    tasks = [f"calc_task_{i:02d}" for i in range(14)]
    emas = [-1.0, 0.0, 0.05, 0.2, 0.3, 0.35, 0.45, 0.5, 0.55, 0.6, 0.7, 0.85, 1.0, 0.95]
    before: list[tuple[str, object]] = [
        ("task-stats", TaskStats(
            task_id=t, ema_pass_rate=e, weight=0.3, attempts=0 if e < 0 else 2, rollouts=16,
            successes=round(16 * max(e, 0)), state="excluded" if e >= 0.95 else "active",
        ))
        for t, e in zip(tasks, emas, strict=True)
    ]  # fmt: skip
    scores = [1, 0, -0.2, 1, 0, 0, -0.2, 1]  # -0.2: an episode cut at the step limit
    before += [("reward", _reward(i, s, 0, tasks[i])) for i, s in enumerate(scores)]
    before.append(("reward", _reward(8, 0.0, 0, tasks[8], scored=False)))
    before.append(("policy-updates", PolicyUpdate(
        policy_version=1, checkpoint_uri="file:///ckpt/v1",
        metrics={"loss": 0.41, "kl": 0.0012, "clip_frac_high": 0.03, "step_time_s": 41.0},
    )))  # fmt: skip
    await _publish(bus_settings, before)

    errors: list[str] = []
    images: list[tuple[str, int, str]] = []
    started = time.monotonic()
    async with (
        serve_dashboard(bus_settings, port=0, blobs=blobs, poll_s=0.5, interval_s=0.2) as url,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS,
            # A fresh profile per run: nothing cached from an earlier page.
        )  # fmt: skip
        context = await browser.new_context(viewport={"width": 1440, "height": 1000})
        page = await context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on(
            "response",
            lambda r: (
                images.append((r.url, r.status, r.headers.get("content-type", "")))
                if "/blob/" in r.url
                else None
            ),
        )
        await page.goto(url)
        await until(page, "document.getElementById('status').textContent === 'live'")
        assert await _text(page, "#kpi-version") == "1"
        assert await _text(page, "#kpi-pass-rate") == "37.5%"  # 3 of 8 scored
        assert await _text(page, "#kpi-mean-reward") == "0.325"
        assert await _text(page, "#kpi-unscored") == "1"
        assert await page.locator("#tasks-table tbody tr").count() == 14
        assert await page.locator("#trainer-metrics .metric").count() == 4

        # While the page is open: the next iteration, a trained step, new stats, an episode.
        await _commit_all(bus_settings, "judge", "trajectory-complete")
        after = [
            ("reward", _reward(i, s, 1, tasks[i])) for i, s in enumerate([1, 1, 1, 0, 1, 1, 0])
        ]
        after.append(("policy-updates", PolicyUpdate(
            policy_version=2, checkpoint_uri="file:///ckpt/v2",
            metrics={"loss": 0.33, "kl": 0.0021, "clip_frac_high": 0.05, "step_time_s": 39.5,
                     "grad_norm": 0.8},
        )))  # fmt: skip
        after.append(("task-stats", TaskStats(
            task_id=tasks[0], ema_pass_rate=0.4, weight=0.9, attempts=1, rollouts=8, successes=3,
        )))  # fmt: skip
        after += _trajectory(blobs, tasks[3], 1)
        await _publish(bus_settings, after)
        await _commit_all(bus_settings, "judge", "trajectory-complete")

        # Panels move independently as records arrive: wait for each one's final value.
        await until(page, "document.getElementById('kpi-version').textContent === '2'")
        await until(page, "document.getElementById('chart-iterations').dataset.points === '2'")
        # Version 1: 6 passes of 8 scored (the episode's reward included).
        await until(page, "document.getElementById('kpi-pass-rate').textContent === '75.0%'")
        chart = await page.evaluate("window.dashboard.charts.iterations.data.datasets[0].data")
        assert chart == [0.375, 0.75]
        await until(page, "document.querySelectorAll('#trainer-metrics .metric').length === 5")
        first_row = "document.querySelector('#tasks-table tbody tr')"
        await until(page, f"{first_row}.dataset.task === '{tasks[0]}'")  # newest update first
        assert await page.text_content("#tasks-table tbody tr td.ema") == "0.4"
        assert await page.get_attribute("#chart-pool", "data-measured") == "14"

        film = page.locator(f'.film[data-trajectory="{tasks[3]}/g1/0@0"]')
        await film.wait_for(timeout=10_000)
        assert await film.locator(".frame").count() == 5  # four turns and the final screenshot
        assert "score 1" in (await film.locator(".badge").text_content() or "")
        captions = await film.locator(".frame .caption").all_text_contents()
        assert captions[1] == "#1 type '=SUM(B2:B9)'"
        assert captions[2].startswith("#2 no action: parse")
        await until(
            page,
            "[...document.querySelectorAll('.film img')].length === 5 && "
            "[...document.querySelectorAll('.film img')].every(i => i.complete && i.naturalWidth > 0)",
        )

        await until(page, "document.querySelector('#services-table tr[data-group=judge] td.lag')"
                           "?.dataset.value === '0'")  # fmt: skip
        lag = await page.get_attribute(
            "#services-table tr[data-group=archiver] td.lag", "data-value"
        )
        assert lag == ""  # no archiver ran: no commits, no lag figure
        await page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        await browser.close()
    elapsed = time.monotonic() - started

    assert images and all(status == 200 for _, status, _ in images), images
    assert {kind for _, _, kind in images} == {"image/jpeg"}
    assert not errors, errors
    assert elapsed < 30, f"the browser test took {elapsed:.1f} s"


async def test_blobs_are_checked_cached_and_shrunk(
    bus_settings: BusSettings, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    ref = blobs.put(screenshot_png("x", (200, 200, 200)))
    text = blobs.put(b"not an image")
    async with serve_dashboard(bus_settings, port=0, blobs=blobs) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            small = await client.get(f"/blob/{ref}?w=320")
            assert small.status_code == 200
            assert small.headers["content-type"] == "image/jpeg"
            assert "immutable" in small.headers["cache-control"]
            assert Image.open(io.BytesIO(small.content)).size == (320, 200)
            again = await client.get(
                f"/blob/{ref}?w=320", headers={"If-None-Match": small.headers["etag"]}
            )
            assert again.status_code == 304
            full = await client.get(f"/blob/{ref}")
            assert (full.status_code, full.headers["content-type"]) == (200, "image/png")
            assert (await client.get(f"/blob/{text}?w=320")).status_code == 415
            assert (await client.get("/blob/sha256:" + "0" * 64)).status_code == 404
            assert (await client.get("/blob/..%2F..%2Fetc%2Fpasswd")).status_code in (400, 404)
            assert (await client.get(f"/blob/{ref}?w=99999")).status_code == 400
            page = await client.get("/")
            assert "default-src 'self'" in page.headers["content-security-policy"]
            assert (await client.get("/static/chart.umd.min.js")).status_code == 200
            assert (await client.get("/static/package.json")).status_code == 404
    await asyncio.sleep(0)


async def test_without_the_chart_library_the_page_says_how_to_install_it(
    bus_settings: BusSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "CHART_JS", tmp_path / "node_modules/chart.js/missing.js")
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    async with serve_dashboard(bus_settings, port=0, blobs=blobs) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            page = await client.get("/")
            assert page.status_code == 503
            assert "bash infra/install.sh" in page.text and "npm ci" in page.text
            assert (await client.get("/static/chart.umd.min.js")).status_code == 503
