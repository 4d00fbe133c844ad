"""The trajectory page in Chromium: screenshots turn by turn with the action drawn where it
points, the timeline and the GRPO group side by side; reached from the filmstrip, the tasks
table and the search box; the latency panel; an archived run and a live one.

The page's screenshot lands in the test's tmp folder (run with `--basetemp DIR` to look).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from consumers.dashboard.service import serve_dashboard
from runtime.blobstore import LocalBlobStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from tests.consumers.dashboard.harness import CHROMIUM, CHROMIUM_ARGS, screenshot_png, until
from tests.runtime.trace.story import BETA, RETRIED, RUN, TRAJECTORY, story
from tests.runtime.trace.test_reading import write_archive
from topics.events import RunStarted

_STAGES = ["request", "turn 0", "turn 1", "complete", "segments", "reward", "trained", "announced"]


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """One Chromium for the file's tests (a launch costs seconds)."""
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


async def _open(page: Page, url: str) -> None:
    await page.goto(url)
    await until(page, "window.trajectory && window.trajectory.loaded")
    assert await page.evaluate("window.trajectory.error") is None


async def _check_trajectory(page: Page, tmp_path: Path) -> None:
    """The page of TRAJECTORY shows its turns, timeline and group."""
    # two screenshots, loaded, each with a ring where its click points (x = 100 and 200 of 1000)
    await until(page, "[...document.querySelectorAll('.turn img')].every(i => i.naturalWidth > 0)")
    assert await page.locator(".turn img").count() == 2
    lefts = await page.eval_on_selector_all(".turn .dot", "ds => ds.map(d => d.style.left)")
    assert lefts == ["10%", "20%"]
    assert await page.text_content(".turn .action") == '#0 left_click {"coordinate":[100,500]}'
    stages = await page.eval_on_selector_all(
        "#timeline tbody tr", "rs => rs.map(r => r.dataset.stage)"
    )
    assert [s for s in stages if s != "step start"] == _STAGES
    gap = await page.text_content("#gaps tr[data-gap='complete_to_reward'] td.num")
    assert gap == "0.500 s"
    rows = page.locator("#group tbody tr")
    assert await rows.count() == 2 and await page.locator("#group tr.me").count() == 1
    assert "+0.707" in (await rows.nth(0).text_content() or "")
    # side by side: the timeline's card and the group's card share a row of the grid
    timeline = await page.locator("#timeline-card").bounding_box()
    group = await page.locator("#group-card").bounding_box()
    assert timeline and group and abs(timeline["y"] - group["y"]) < 2 and group["x"] > timeline["x"]
    await page.screenshot(path=str(tmp_path / "trajectory.png"), full_page=True)


async def test_the_trajectory_page_of_an_archived_run(browser: Browser, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    shades = [(230, 230, 230), (210, 235, 210)]
    events = story(lambda i: blobs.put(screenshot_png(f"turn {i}", shades[i % 2])))
    root = str(tmp_path / "archive")
    write_archive(root, RUN, [("runs", RunStarted(run_id=RUN)), *events])
    errors: list[str] = []
    async with serve_dashboard(archive=root, run=RUN, port=0, blobs=blobs) as url:
        page = await browser.new_page(viewport={"width": 1440, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        # from the filmstrip of the main page
        await page.goto(url)
        await until(page, "document.getElementById('status').textContent === 'archive'")
        await page.click(f"#filmstrip a.tid:text-is('{TRAJECTORY}')")
        await until(page, "window.trajectory && window.trajectory.loaded")
        await _check_trajectory(page, tmp_path)

        # to another member of its group, a retry after an environment failure
        await page.click(f"#group a:text-is('{RETRIED}')")
        await until(page, f"window.trajectory && window.trajectory.timeline && "
                          f"window.trajectory.timeline.trajectory_id === '{RETRIED}'")  # fmt: skip
        assert "attempt 0" in (await page.text_content("#details") or "")

        # the search box, and the tasks table, open a search
        await page.goto(url)
        await until(page, "window.latency && window.latency.loaded > 0")
        href = await page.get_attribute("#tasks-table tr[data-task='alpha'] a", "href")
        assert href == "/trajectory?q=alpha"
        assert await page.locator("#latency-table tr[data-gap='segments_to_trained']").count() == 2
        await page.fill("#search", "beta")
        await page.press("#search", "Enter")
        await until(page, "window.trajectory && window.trajectory.loaded")
        results = await page.eval_on_selector_all("#results a", "as => as.map(a => a.textContent)")
        assert sorted(results) == [f"{BETA}/0@0ccc", f"{BETA}/1@0ccc"]
        await page.goto(f"{url}trajectory?id=nope/0@0&run={RUN}")
        await until(page, "window.trajectory && window.trajectory.loaded")
        assert "no trajectory 'nope/0@0'" in await page.evaluate("window.trajectory.error")
        await page.close()
    assert errors == [] or all("404" in e for e in errors), errors


async def test_the_trajectory_page_of_a_live_run(
    browser: Browser, bus_settings: BusSettings, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs", fsync=False)
    events = story(lambda i: blobs.put(screenshot_png(f"turn {i}", (220, 220, 220))))
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send(n, e) for n, e in events])
    async with serve_dashboard(bus_settings, port=0, blobs=blobs, poll_s=0.5) as url:
        page = await browser.new_page(viewport={"width": 1440, "height": 1000})
        await _open(page, f"{url}trajectory?id={TRAJECTORY}")
        await _check_trajectory(page, tmp_path)
        await page.close()
