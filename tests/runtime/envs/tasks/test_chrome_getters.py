"""The Chrome setup steps and getters against a real chromium on a real desktop.

One desktop and one browser for the module (the tests run in order and build on each
other's state, as a task does): the history is seeded before the browser starts, tabs are
opened and closed over the DevTools protocol, pages come from loopback https servers under
their real-looking names (tests/web_sites.py), settings are changed through the browser's
own settings pages (the settings API of chrome://settings, chrome://flags, the DevTools
extension loader) and read back from the files the browser writes.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.envs.desktop.cdp import Browser
from runtime.envs.desktop.controller import DesktopController
from runtime.envs.desktop.lifecycle import Desktop
from runtime.envs.tasks.getters import EvalContext, get_state
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.setup import run_steps
from runtime.errors import TaskError
from tests.web_sites import LoopbackSites

pytestmark = pytest.mark.desktop

RESULTS = "https://www.example.com/search/results-page?q=drip+coffee&tbs=mr:1&id=7"
SECOND = "https://www.example.com/second"
NEWS = "https://news.example.org/today"
RESULTS_HTML = """<!DOCTYPE html><html><head><title>Results</title></head><body>
<div class="city">NYC</div><div class="city">CMH</div><span class="date">Mon, Dec 1, 2025</span>
<div id="main"><p>first</p><p> second </p></div>
<form><input name="who" value=" James Smith "></form>
<section><h2>Price range</h2></section>
<a id="next" href="/second">Next</a>
<script>document.cookie = "sid=42; domain=.example.com; path=/; max-age=3600";</script>
</body></html>"""
SECOND_HTML = (
    "<html><head><title>Second page</title></head><body><h1 id='t'>Second</h1></body></html>"
)
# recreation.gov as the getter that scores OSWorld's task b4f95342 walks it: search, a
# result that opens a new tab, a "next available" button that fills in the dates.
RECREATION_HTML = """<html><body><input id="hero-search-input">
<button class="nav-search-button" onclick="document.getElementById('r').hidden = false">Go</button>
<a id="r" hidden class="search-result-highlight--success" href="/camping/233" target="_blank">Albion</a>
</body></html>"""
CAMPGROUND_HTML = """<html><body><button class="next-available" onclick="
for (const d of ['Site', 'Loop', 'Jun 3']) { const e = document.createElement('div');
e.className = 'camp-sortable-column-header'; e.textContent = d; document.body.append(e); }">
Next available</button></body></html>"""
LAUNCH = [
    {
        "type": "launch",
        "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]},
    },
    {
        "type": "launch",
        "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]},
    },
]


@pytest.fixture(scope="module")
async def sites() -> AsyncIterator[LoopbackSites]:
    """The pages the browser opens, served on loopback."""
    pages = {
        ("www.example.com", "/search/results-page"): RESULTS_HTML,
        ("www.example.com", "/second"): SECOND_HTML,
        ("www.recreation.gov", "/"): RECREATION_HTML,
        ("www.recreation.gov", "/camping/233"): CAMPGROUND_HTML,
    }
    async with LoopbackSites(pages) as served:
        yield served


@pytest.fixture(scope="module")
async def desktop(sites: LoopbackSites, task_desktop_root: Path) -> AsyncIterator[Desktop]:
    """One desktop whose browser reaches the loopback sites (and may load extensions)."""
    with sites.desktop_env(
        ["www.example.com", "news.example.org", "www.recreation.gov"],
        flags=("--enable-unsafe-extension-debugging",),
    ):
        started = await Desktop.start(root=task_desktop_root)
    try:
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def ctx(desktop: Desktop) -> AsyncIterator[EvalContext]:
    """An evaluation context on the module's desktop (not reset between tests)."""
    with tempfile.TemporaryDirectory() as tmp:
        async with desktop.controller() as controller:
            yield EvalContext(controller, Path(tmp))


async def _settings(controller: DesktopController, page: str, script: str) -> object:
    """Run `script` in one of the browser's own settings pages."""
    async with await Browser.connect(controller, timeout=30) as browser:
        tab = await browser.new_page(page)
        try:
            return await tab.evaluate(script)
        finally:
            await browser.discard(tab)


async def test_seeded_history_is_in_the_browsers_database(ctx: EvalContext) -> None:
    # Before the browser first starts, as OSWorld's history task does it.
    history = [
        {
            "url": "https://www.youtube.com/watch?v=1",
            "title": "A video",
            "visit_time_from_now_in_seconds": 60,
        },
        {"url": "https://www.bbc.co.uk/", "title": "BBC", "visit_time_from_now_in_seconds": 600},
    ]
    await run_steps(
        ctx.controller,
        [{"type": "update_browse_history", "parameters": {"history": history}}],
        None,
    )
    rows = await get_state(ctx, {"type": "history", "dest": "history.sqlite"})
    assert {(url, title) for url, title, _ in rows} >= {
        ("https://www.youtube.com/watch?v=1", "A video"),
        ("https://www.bbc.co.uk/", "BBC"),
    }
    newest = max(when for url, _, when in rows if "youtube" in url)
    assert newest > max(when for url, _, when in rows if "bbc" in url)  # 1 min ago vs 10
    rule = {"type": "keywords", "keywords": ["youtube"]}
    assert METRICS["check_history_deleted"](rows, rule) == 0.0


async def test_tabs_open_and_close_over_devtools(ctx: EvalContext) -> None:
    steps = [
        *LAUNCH,
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [SECOND, NEWS, RESULTS]}},
        {
            "type": "chrome_close_tabs",
            "parameters": {"urls_to_close": ["https://example.com/second"]},
        },
    ]
    await run_steps(ctx.controller, steps, None)
    tabs = await get_state(ctx, {"type": "open_tabs_info"})
    # The tab the browser started with is gone; `www.` does not matter in a URL to close.
    assert [t["url"] for t in tabs] == [NEWS, RESULTS] or [t["url"] for t in tabs] == [
        RESULTS,
        NEWS,
    ]
    assert {t["title"] for t in tabs} == {"news.example.org", "Results"}
    assert METRICS["is_expected_tabs"](tabs, {"type": "url", "urls": [RESULTS, NEWS]}) == 1.0
    assert METRICS["is_expected_tabs"](tabs, {"type": "url", "urls": [RESULTS]}) == 0.0


async def test_address_bar_getters_read_the_active_tab(ctx: EvalContext) -> None:
    # The address bar shows "example.com/search/..." (https://www. elided), as on the VM.
    url = await get_state(
        ctx, {"type": "active_url_from_accessTree", "goto_prefix": "https://www."}
    )
    assert url == RESULTS
    assert (
        await get_state(ctx, {"type": "active_url_from_accessTree", "goto_prefix": ""})
        == RESULTS[12:]
    )
    parsed = await get_state(
        ctx,
        {
            "type": "active_tab_url_parse",
            "parse_keys": ["q", "tbs", "id"],
            "replace": {"id": "item"},
        },
    )
    assert parsed == {"q": "drip coffee", "tbs": "mr:1", "item": "7"}
    dash = {
        "type": "url_dashPart",
        "goto_prefix": "https://www.",
        "partIndex": -1,
        "needDeleteId": True,
    }
    assert await get_state(ctx, {**dash, "returnType": "string"}) == "results-page"
    assert await get_state(ctx, {**dash, "returnType": "json", "key": "page"}) == {
        "page": "results-page"
    }


async def test_page_getters_read_the_pages_the_browser_shows(ctx: EvalContext) -> None:
    info = await get_state(ctx, {"type": "active_tab_info", "goto_prefix": "https://www."})
    assert info["title"] == "Results" and info["url"] == RESULTS
    assert info["content"].startswith("<!DOCTYPE html>") and "CMH" in info["content"]
    assert (
        METRICS["is_expected_url_pattern_match"](info, {"expected": ["results-page", "q=drip"]})
        == 1.0
    )
    assert METRICS["is_added_to_steam_cart"](info, {"items": ["NYC", "Dec 1"]}) == 1.0

    picked = await get_state(
        ctx,
        {
            "type": "active_tab_html_parse",
            "goto_prefix": "https://www.",
            "category": "class",
            "class_singleObject": {"date": "time"},
            "class_multiObject": {"city": {"0": "start", "1": "end", "5": "nowhere"}},
        },
    )
    assert picked == {"start": "NYC", "end": "CMH", "time": "Mon, Dec 1, 2025"}
    xpath = {"/html/body/div[3]/p[2]": "second", "/html/body/div[9]": "missing"}
    spec = {"type": "active_tab_html_parse", "goto_prefix": "https://www."}
    assert await get_state(ctx, {**spec, "category": "xpath", "xpathObject": xpath}) == {
        "second": "second"
    }
    inputs = {"/html/body/form/input": "name"}
    assert await get_state(ctx, {**spec, "category": "input", "inputObject": inputs}) == {
        "name": "James Smith"
    }
    labels = {"price range": "label"}
    assert await get_state(ctx, {**spec, "category": "label", "labelObject": labels}) == {
        "label": "Price range"
    }
    with pytest.raises(TaskError, match="unknown category"):
        await get_state(ctx, {**spec, "category": "colour"})

    page = await get_state(ctx, {"type": "page_info", "url": SECOND})
    assert page["title"] == "Second page" and page["url"] == SECOND
    pdf = await get_state(ctx, {"type": "pdf_from_url", "path": RESULTS, "dest": "results.pdf"})
    assert pdf.endswith("results.pdf")
    assert (await asyncio.to_thread(Path(pdf).read_bytes)).startswith(b"%PDF")
    infos = [
        {"action": "inner_text", "selector": "span.date"},
        {"action": "attribute", "selector": "#next", "attribute": "href"},
        {"action": "click_and_inner_text", "selector": ["#next", "#t"]},
    ]
    spec = {"type": "info_from_website", "url": RESULTS, "infos": infos, "backups": ["b"]}
    assert await get_state(ctx, spec) == ["Mon, Dec 1, 2025", "/second", "Second"]
    broken = {**spec, "infos": [{"action": "scroll", "selector": "#next"}]}
    assert await get_state(ctx, broken) == ["b"]  # (a missing element: after 10 s, as OSWorld)
    spec = {"type": "gotoRecreationPage_and_get_html_content", "selector": "class"}
    camp = await get_state(ctx, {**spec, "class": "camp-sortable-column-header", "order": "2"})
    assert camp == {"expected": {"camp-sortable-column-header": "Jun 3"}}
    # The getters' own tabs are closed again: only the task's tabs are open.
    assert len(await get_state(ctx, {"type": "open_tabs_info"})) == 2


async def test_cookies_are_the_browsers_live_jar(ctx: EvalContext) -> None:
    rule = {"type": "domains", "domains": [".example.com"]}
    rows = await get_state(ctx, {"type": "cookie_data", "dest": "Cookies"})
    assert (".example.com", "sid") in {(row[1], row[3]) for row in rows}
    assert METRICS["is_cookie_deleted"](rows, rule) == 0.0
    async with await Browser.connect(ctx.controller) as browser:  # what Clear browsing data does
        await browser.send("Storage.clearCookies")
    assert (
        METRICS["is_cookie_deleted"](
            await get_state(ctx, {"type": "cookie_data", "dest": "C"}), rule
        )
        == 1.0
    )


async def test_settings_are_read_from_the_profile_the_browser_saves(ctx: EvalContext) -> None:
    untouched = {
        "default_search_engine": "Google",
        "enable_do_not_track": "false",
        "enable_enhanced_safety_browsing": "false",
        "data_delete_automacally": "false",
        "new_startup_page": "true",
        "enabled_experiments": [],
    }
    for name, value in untouched.items():
        assert await get_state(ctx, {"type": name}) == value, name
    extension = "/home/user/Desktop/helloExtension"
    assert extension not in await get_state(ctx, {"type": "find_unpacked_extension_path"})
    controller = ctx.controller
    await controller.upload_file(
        "/home/user/Desktop/helloExtension/manifest.json",
        json.dumps({"name": "Hello Extension", "version": "1.0", "manifest_version": 3}).encode(),
    )
    async with await Browser.connect(controller) as browser:  # the Load unpacked button's call
        await browser.send("Extensions.loadUnpacked", {"path": extension})
    set_pref = "new Promise(r => chrome.settingsPrivate.setPref({!r}, {}, '', r))"
    for pref, value in (
        ("webkit.webprefs.default_font_size", "20"),
        ("enable_do_not_track", "true"),
        ("safebrowsing.enhanced", "true"),
        ("session.restore_on_startup", "4"),
    ):
        assert (
            await _settings(controller, "chrome://settings/", set_pref.format(pref, value)) is True
        )
    await _settings(
        controller,
        "chrome://flags/",
        "chrome.send('enableExperimentalFeature', ['smooth-scrolling', 'true'])",
    )
    # OSWorld's postconfig: the browser saves everything as it exits, and starts again.
    await run_steps(
        controller,
        [
            {"type": "launch", "parameters": {"command": ["pkill", "chrome"]}},
            {
                "type": "launch",
                "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]},
            },
        ],
        None,
    )
    sizes = await get_state(ctx, {"type": "chrome_font_size"})
    assert sizes == {
        "default_fixed_font_size": 13,
        "default_font_size": 20,
        "minimum_font_size": 13,
    }
    assert METRICS["check_font_size"](sizes, {"type": "range", "min": 16, "max": 99999}) == 1.0
    assert await get_state(ctx, {"type": "enable_do_not_track"}) == "true"
    assert await get_state(ctx, {"type": "enable_enhanced_safety_browsing"}) == "true"
    assert await get_state(ctx, {"type": "new_startup_page"}) == "false"  # 4: restore tabs
    flags = await get_state(ctx, {"type": "enabled_experiments"})
    assert (
        METRICS["check_enabled_experiments"](
            flags, {"type": "names", "names": ["smooth-scrolling"]}
        )
        == 1.0
    )
    paths = await get_state(ctx, {"type": "find_unpacked_extension_path"})
    assert METRICS["is_in_list"](paths, {"expected": extension}) == 1.0
    names = await get_state(ctx, {"type": "find_installed_extension_name"})
    assert (
        METRICS["is_expected_installed_extensions"](names, {"expected": ["Hello Extension"]}) == 1.0
    )
    assert isinstance(await get_state(ctx, {"type": "profile_name"}), str)
    # The relaunched browser is back behind the task's socat.
    async with await Browser.connect(controller, timeout=30) as browser:
        assert await browser.pages()


async def test_desktop_shortcuts(ctx: EvalContext) -> None:
    launcher = "[Desktop Entry]\nType=Application\nName=Play Puzzle Game 2048\nExec=chromium\n"
    await ctx.controller.upload_file("/home/user/Desktop/chrome-2048.desktop", launcher.encode())
    await ctx.controller.upload_file(
        "/home/user/Desktop/notes.txt", b"Name=Play Puzzle Game 2048\n"
    )
    shortcuts = await get_state(ctx, {"type": "shortcuts_on_desktop"})
    assert shortcuts == {"chrome-2048.desktop": launcher}
    rule = {"type": "name", "name": "Play Puzzle Game 2048"}
    assert METRICS["is_shortcut_on_desktop"](shortcuts, rule) == 1.0
    assert METRICS["is_shortcut_on_desktop"](shortcuts, {**rule, "name": "2048"}) == 0.0


async def test_the_search_engine_is_named_as_on_the_chrome_the_tasks_were_written_on(
    ctx: EvalContext,
) -> None:
    # Newer Chrome names Bing "Microsoft Bing"; OSWorld's task bb5e4c0d expects "Bing".
    await ctx.controller.execute(["pkill", "chrome"])
    prefs = {
        "default_search_provider_data": {"template_url_data": {"short_name": "Microsoft Bing"}}
    }
    path = "/home/user/.config/google-chrome/Default/Preferences"
    await ctx.controller.upload_file(path, json.dumps(prefs).encode())
    engine = await get_state(ctx, {"type": "default_search_engine"})
    assert METRICS["exact_match"](engine, {"expected": "Bing"}) == 1.0
