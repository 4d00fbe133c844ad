"""Chrome setup steps with OSWorld's names: open and close tabs, seed the browsing history.

The tab steps drive the desktop's Chrome over the DevTools protocol (through the desktop
server, see runtime/envs/desktop/cdp.py), on port 9222 where the task's socat forwards
Chrome's debugging port; they wait for a browser the task has just launched.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runtime.envs.desktop.cdp import Browser, ChromeError
from runtime.envs.desktop.chrome import PROFILE
from runtime.envs.tasks.setup.step import Step
from runtime.envs.tasks.web import same_url
from runtime.errors import TaskError

__all__ = ["HISTORY", "STEPS", "chrome_time", "connect", "CONNECT_TIMEOUT", "PAGE_TIMEOUT"]

HISTORY = f"/home/user/{PROFILE}/Default/History"
CONNECT_TIMEOUT = 60.0  # a browser a task launched a moment ago starts in 1-2 s
PAGE_TIMEOUT = 60.0  # OSWorld's wait for each tab to load
_TYPED_LINK = 805306368  # the visit transition OSWorld records (a typed link, chain start and end)
_CHROME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)


async def connect(controller: Any, what: str) -> Browser:
    """The desktop's Chrome, waited for; a TaskError naming the step if it never answers."""
    try:
        return await Browser.connect(controller, timeout=CONNECT_TIMEOUT)
    except ChromeError as exc:
        raise TaskError(f"{what}: {exc} (did the task launch google-chrome and socat?)") from exc


def _strings(params: dict[str, Any], key: str) -> list[str]:
    values = params.get(key)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TaskError(f"`{key}` must be a list of URLs")
    return values


async def _open_tabs(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    """Open each URL in a new tab (the last one is active), then close the tab Chrome began with."""
    urls = _strings(params, "urls_to_open")
    browser = await connect(controller, "chrome_open_tabs")
    async with browser:
        before = await browser.pages()
        for i, url in enumerate(urls):
            # As in OSWorld, a page that does not load in time stays open as it is.
            await browser.new_page(url, timeout=PAGE_TIMEOUT)
            if i == 0 and before:
                await browser.close_page(before[0]["targetId"])


async def _close_tabs(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    """Close the first open tab showing each URL (compared as OSWorld compares URLs)."""
    urls = _strings(params, "urls_to_close")
    browser = await connect(controller, "chrome_close_tabs")
    async with browser:
        for url in urls:
            for page in await browser.pages():
                if same_url(page.get("url"), url):
                    await browser.close_page(page["targetId"])
                    break


def chrome_time(when: datetime) -> int:
    """A time as Chrome's history stores it: microseconds since 1601-01-01 UTC."""
    return int((when - _CHROME_EPOCH) / timedelta(microseconds=1))


async def _update_browse_history(
    controller: Any, params: dict[str, Any], base_dir: Path | None
) -> None:
    """Add visits to the profile's History database (before the task starts Chrome).

    OSWorld uploads a History file it keeps on Google Drive; here the desktop's own
    chromium creates one for this profile if there is none yet (a headless start, ~2 s),
    so the schema is always the installed browser's.
    """
    items = params.get("history")
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("url"), str) for i in items
    ):
        raise TaskError("update_browse_history needs `history`: a list of {url, title, ...}")
    data = await controller.get_file(HISTORY)
    if data is None:
        made = await controller.execute(
            ["google-chrome", "--headless=new", "--dump-dom", "about:blank"], timeout=60
        )
        data = await controller.get_file(HISTORY)
        if data is None:
            raise TaskError(f"update_browse_history: Chrome made no History: {made.get('error')}")
    now = datetime.now(UTC)
    rows = [
        (
            item["url"],
            str(item.get("title", "")),
            chrome_time(
                now - timedelta(seconds=float(item.get("visit_time_from_now_in_seconds", 0)))
            ),
        )
        for item in items
    ]
    updated = await asyncio.to_thread(_add_visits, data, rows)
    await controller.upload_file(HISTORY, updated)


def _add_visits(database: bytes, rows: list[tuple[str, str, int]]) -> bytes:
    """Insert one url row and one visit per (url, title, time) into a History file's bytes."""
    with tempfile.TemporaryDirectory(prefix="scalecua-history-") as tmp:
        path = Path(tmp) / "History"
        path.write_bytes(database)
        conn = sqlite3.connect(path)
        try:
            for url, title, when in rows:
                cursor = conn.execute(
                    "INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time,"
                    " hidden) VALUES (?, ?, 1, 0, ?, 0)",
                    (url, title, when),
                )
                conn.execute(
                    "INSERT INTO visits (url, visit_time, from_visit, transition, segment_id,"
                    " visit_duration) VALUES (?, ?, 0, ?, 0, 0)",
                    (cursor.lastrowid, when, _TYPED_LINK),
                )
            conn.commit()
        except sqlite3.Error as exc:
            raise TaskError(f"update_browse_history: the History database refused: {exc}") from exc
        finally:
            conn.close()
        return path.read_bytes()


STEPS: dict[str, Step] = {
    "chrome_open_tabs": _open_tabs,
    "chrome_close_tabs": _close_tabs,
    "update_browse_history": _update_browse_history,
}
