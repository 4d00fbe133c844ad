"""Real OSWorld Chrome tasks, unchanged (tests/data/osworld/chrome/<id>.json), on a real
desktop: 0.0 untouched, 1.0 after an agent's real keystrokes.

Their pages are real https URLs (www.lonelyplanet.com, jalammar.github.io, ...). The test
serves them from loopback under those names: the desktop's browser gateway maps each task
host's ports 443 and 80 to a local https/http server (`SCALECUA_BROWSER_HOSTS`), and the
browser trusts that server's key (`SCALECUA_CHROME_FLAGS`); every other name stays
unreachable, so nothing leaves the machine (tests/web_sites.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.envs.desktop.lifecycle import Desktop
from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.runner import check_solution
from runtime.envs.tasks.web import live_web_urls
from tests.web_sites import LoopbackSites

pytestmark = pytest.mark.desktop

TASKS = Path(__file__).parents[3] / "data" / "osworld" / "chrome"
REOPEN_TAB = "06fe7178-4491-4589-810f-2e2bc9502122"  # "bring back the last tab I shut down"
BOOKMARK_BAR = "7a5a7856-f1b6-42a4-ade9-1ca81ca0f263"  # "save this webpage to bookmarks bar"
HOSTS = [
    "www.lonelyplanet.com",
    "www.airbnb.com",
    "www.tripadvisor.com",
    "blog.eleuther.ai",
    "jalammar.github.io",
]


@pytest.fixture(scope="module")
async def sites() -> AsyncIterator[LoopbackSites]:
    """The tasks' sites, each a page titled after its host, on loopback."""
    async with LoopbackSites() as served:
        yield served


@pytest.fixture(scope="module")
async def desktop(sites: LoopbackSites, task_desktop_root: Path) -> AsyncIterator[Desktop]:
    """One desktop whose browser reaches the tasks' hosts on loopback, and nothing else."""
    with sites.desktop_env(HOSTS):
        started = await Desktop.start(root=task_desktop_root)
    try:
        yield started
    finally:
        await started.stop()


def test_the_tasks_need_the_live_web_unless_their_hosts_are_served() -> None:
    task = load_task(TASKS / f"{REOPEN_TAB}.json")
    assert live_web_urls(task) == [
        "https://www.lonelyplanet.com",
        "https://www.airbnb.com",
        "https://www.tripadvisor.com",
    ]


async def test_reopen_the_last_closed_tab(desktop: Desktop, sites: LoopbackSites) -> None:
    task = load_task(TASKS / f"{REOPEN_TAB}.json")
    await desktop.reset()
    result = await check_solution(desktop, task, [{"action": "key", "text": "ctrl+shift+t"}])
    assert (result["untouched"], result["solved"]) == (0.0, 1.0), result
    served = {host for host, _ in sites.requests}
    assert {"www.lonelyplanet.com", "www.airbnb.com", "www.tripadvisor.com"} <= served


async def test_bookmark_the_page_on_the_bookmarks_bar(desktop: Desktop) -> None:
    task = load_task(TASKS / f"{BOOKMARK_BAR}.json")
    await desktop.reset()  # the same desktop again: its socat must get port 9222 back
    pause = {"action": "wait", "duration": 0.5}  # an agent's turns are this far apart, at least
    solution = [
        {"action": "key", "text": "ctrl+d"},  # bookmark the active tab: a bubble opens
        {"action": "wait", "duration": 1},
        {"action": "key", "text": "Tab"},  # to its Folder box, which says "Other bookmarks"
        pause,
        {"action": "key", "text": "Up"},  # "Bookmarks bar"
        pause,
        {"action": "key", "text": "Escape"},  # close the bubble, keeping the bookmark
        {"action": "wait", "duration": 2},  # the browser writes its Bookmarks file
    ]
    result = await check_solution(desktop, task, solution)
    assert (result["untouched"], result["solved"]) == (0.0, 1.0), result
