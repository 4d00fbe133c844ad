"""Chrome getters that read the address bar and the browser, with OSWorld's names and values.

- the address bar, from the accessibility tree (`active_url_from_accessTree`: the URL as
  Chrome shows it, `https://www.` elided, so tasks add their `goto_prefix`), and what the
  URL says (`active_tab_url_parse`, `url_dashPart`);
- the browser itself over the DevTools protocol, through the desktop server
  (runtime/envs/desktop/cdp.py): the open tabs, a page's content and texts, a page printed
  to PDF, facts read off a website.

Where OSWorld's getter starts the browser when none answers, these do too; the tabs they
open themselves they close again. The profile's files are read by chrome_profile.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from runtime.envs.desktop.cdp import Browser, ChromeError, Page
from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path
from runtime.envs.tasks.web import same_url
from runtime.errors import TaskError

__all__ = [
    "GETTERS",
    "active_url",
    "ADDRESS_BAR",
    "BROWSER_APPS",
    "LOAD_TIMEOUT",
    "RELAUNCH",
    "TAB_SETTLE",
    "get_active_tab_html_parse",
    "get_active_tab_info",
    "get_active_tab_url_parse",
    "get_active_url_from_accessTree",
    "get_gotoRecreationPage_and_get_html_content",
    "get_info_from_website",
    "get_open_tabs_info",
    "get_page_info",
    "get_pdf_from_url",
    "get_url_dashPart",
]

log = logging.getLogger(__name__)

BROWSER_APPS = ("Google Chrome", "Chromium")  # the browser's name in the accessibility tree
ADDRESS_BAR = "Address and search bar"
LOAD_TIMEOUT = 60.0
TAB_SETTLE = 10.0  # per open tab: how long to wait for it to finish loading before reading it
RELAUNCH = ["google-chrome", "--remote-debugging-port=1337"]


# -- the address bar ------------------------------------------------------------------------------
async def active_url(ctx: EvalContext, config: dict[str, Any]) -> str | None:
    """The active tab's URL as the address bar shows it, after `goto_prefix` ("https://")."""
    bars: list[ET.Element] = []
    # What shows first (fast); the whole tree when the browser's window is not showing.
    for compact in (True, False):
        try:
            root = ET.fromstring(await ctx.controller.accessibility_tree(compact=compact))
        except (ET.ParseError, TypeError) as exc:
            log.info("no accessibility tree to read the address bar from: %s", exc)
            return None
        bars = [
            entry
            for app in root.iter("application")
            if app.get("name") in BROWSER_APPS
            for entry in app.iter("entry")
            if entry.get("name") == ADDRESS_BAR
        ]
        if bars:
            break
    if not bars or not (bars[-1].text or "").strip():
        return None
    return f"{config.get('goto_prefix', 'https://')}{(bars[0].text or '').strip()}"


async def get_active_url_from_accessTree(ctx: EvalContext, config: dict[str, Any]) -> str | None:  # noqa: N802 - OSWorld's name
    """The active tab's URL from the address bar (see `active_url`)."""
    return await active_url(ctx, config)


async def get_active_tab_url_parse(
    ctx: EvalContext, config: dict[str, Any]
) -> dict[str, str] | None:
    """Chosen query parameters of the active tab's URL (`parse_keys`, renamed by `replace`)."""
    url = await active_url(ctx, config)
    if url is None:
        return None
    query = parse_qs(urlparse(url).query)
    found = {key: query.get(key, [""])[0] for key in config["parse_keys"]}
    for old, new in (config.get("replace") or {}).items():
        found[new] = found.pop(old, "")
    return found


async def get_url_dashPart(ctx: EvalContext, config: dict[str, Any]) -> Any:  # noqa: N802 - OSWorld's name
    """One `/`-separated part of the active tab's URL (`partIndex`), its query cut off on
    `needDeleteId`; a string, or {key: part} for `returnType` json."""
    url = await active_url(ctx, config)
    if url is None:
        return None
    part = url.split("/")[int(config["partIndex"])]
    if config.get("needDeleteId"):
        part = part.split("?")[0]
    return {config["key"]: part} if config.get("returnType") == "json" else part


# -- the browser, over the DevTools protocol ------------------------------------------------------
async def _browser(ctx: EvalContext, relaunch: bool) -> Browser | None:
    """The desktop's browser; if it does not answer, optionally start it (as OSWorld does)."""
    try:
        return await Browser.connect(ctx.controller)
    except ChromeError:
        if not relaunch:
            return None
    await ctx.controller.launch(RELAUNCH)
    try:
        return await Browser.connect(ctx.controller, timeout=15)
    except ChromeError:
        return None


async def _settled_tabs(browser: Browser) -> list[dict[str, Any]]:
    """The open tabs, each given up to TAB_SETTLE s to finish loading, with url and title."""
    for tab in await browser.pages():
        with contextlib.suppress(ChromeError):
            page = await browser.attach(tab["targetId"])
            await page.wait_loaded(TAB_SETTLE)
    return await browser.pages()


async def get_open_tabs_info(ctx: EvalContext, config: dict[str, Any]) -> list[dict[str, str]]:
    """[{"title", "url"}] of every open tab; [] when no browser answers."""
    browser = await _browser(ctx, relaunch=True)
    if browser is None:
        return []
    async with browser:
        return [
            {"title": t.get("title", ""), "url": t.get("url", "")}
            for t in await _settled_tabs(browser)
        ]


async def _tab_showing(browser: Browser, url: str) -> Page | None:
    """The open tab at `url` (exactly, percent-escapes aside, or as OSWorld compares URLs)."""
    tabs = await _settled_tabs(browser)
    for matches in (lambda u: unquote(u) == unquote(url), lambda u: same_url(u, url)):
        for tab in tabs:
            if matches(tab.get("url", "")):
                return await browser.attach(tab["targetId"])
    return None


async def get_active_tab_info(ctx: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """{"title", "url", "content"} of the active tab (its URL from the address bar).

    The open tab showing that URL is read as it is; if none does, the URL is loaded afresh
    in an isolated context, as OSWorld always does.
    """
    url = await active_url(ctx, config)
    if url is None:
        return None
    browser = await _browser(ctx, relaunch=False)
    if browser is None:
        return None
    async with browser:
        page = await _tab_showing(browser, url)
        if page is not None:
            return await page.info()
        page = await browser.new_page(url, LOAD_TIMEOUT, isolated=True)
        try:
            return await page.info()
        finally:
            await browser.discard(page)


_CLASS_TEXTS = "cls => Array.from(document.querySelectorAll('.' + cls), e => e.textContent.trim())"
_XPATH_NODE = (
    "document.evaluate({xpath}, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null)"
    ".singleNodeValue"
)
_LABEL_TEXT = """label => {
  const norm = s => (s || '').toLowerCase().replace(/\\s+/g, ' ');
  const want = norm(label).trim();
  for (const el of document.querySelectorAll('body *')) {
    if (['SCRIPT', 'STYLE'].includes(el.tagName) || !norm(el.textContent).includes(want)) continue;
    if (![...el.children].some(c => norm(c.textContent).includes(want))) return el.textContent.trim();
  }
  return null;
}"""


async def _call(page: Page, function: str, *args: Any) -> Any:
    return await page.evaluate(f"({function})({', '.join(json.dumps(a) for a in args)})")


async def get_active_tab_html_parse(
    ctx: EvalContext, config: dict[str, Any]
) -> dict[str, str] | None:
    """Texts picked from the active tab's page, by `category`: `class` (class_singleObject,
    class_multiObject), `label` (labelObject), `xpath` (xpathObject) or `input`
    (inputObject, the field's value); {} when the active tab is not open."""
    url = await active_url(ctx, config)
    if url is None:
        return None
    browser = await _browser(ctx, relaunch=True)
    if browser is None:
        return None
    async with browser:
        page = await _tab_showing(browser, url)
        if page is None:
            log.info("no open tab shows %s", url)
            return {}
        return await _pick_texts(page, config)


async def _pick_texts(page: Page, config: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    category = config.get("category")
    if category == "class":
        for name, by_rank in (config.get("class_multiObject") or {}).items():
            texts = await _call(page, _CLASS_TEXTS, name)
            for rank, key in by_rank.items():
                if len(texts) > int(rank):
                    found[key] = texts[int(rank)]
        for name, key in (config.get("class_singleObject") or {}).items():
            texts = await _call(page, _CLASS_TEXTS, name)
            if texts:
                found[key] = texts[0]
    elif category == "label":
        for label, key in (config.get("labelObject") or {}).items():
            text = await _call(page, _LABEL_TEXT, label)
            if text:
                found[key] = text
    elif category in ("xpath", "input"):
        field = "textContent" if category == "xpath" else "value"
        for xpath, key in (config.get(f"{category}Object") or {}).items():
            node = _XPATH_NODE.format(xpath=json.dumps(xpath))
            value = await page.evaluate(f"(n => n ? String(n.{field} ?? '').trim() : null)({node})")
            if value is not None:
                found[key] = value
    else:
        raise TaskError(f"active_tab_html_parse: unknown category {category!r}")
    return found


async def get_page_info(ctx: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """{"title", "url", "content"} of `url` loaded in a new tab (closed afterwards)."""
    browser = await _browser(ctx, relaunch=True)
    if browser is None:
        return None
    async with browser:
        page = await browser.new_page(config["url"], LOAD_TIMEOUT)
        try:
            return await page.info()
        finally:
            await browser.discard(page)


async def get_pdf_from_url(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """`path` (a URL) printed to PDF by the desktop's browser, as a file in the cache folder."""
    browser = await _browser(ctx, relaunch=True)
    if browser is None:
        return None
    async with browser:
        page = await browser.new_page(config["path"], LOAD_TIMEOUT, isolated=True)
        try:
            data = await page.pdf()
        finally:
            await browser.discard(page)
    local = dest_path(ctx, config.get("dest"), "page.pdf")
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


_WAIT_FOR = """async (sel, ms) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (document.querySelector(sel)) return true;
    await new Promise(r => setTimeout(r, 100));
  }
  return false;
}"""


async def _element(page: Page, selector: str, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until `selector` matches in the page; ChromeError if it never does."""
    if not await _call(page, _WAIT_FOR, selector, int(timeout * 1000)):
        raise ChromeError(f"nothing matches {selector!r}")


async def _click(page: Page, selector: str) -> None:
    """Click the element and let a navigation it starts load."""
    await _element(page, selector)
    await page.act(f"document.querySelector({json.dumps(selector)}).click()", timeout=LOAD_TIMEOUT)


async def get_info_from_website(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """Texts and attributes read from `url` by `infos` (inner_text, attribute,
    click_and_inner_text, click_and_attribute); `backups` if anything fails."""
    try:
        browser = await _browser(ctx, relaunch=True)
        if browser is None:
            raise ChromeError("no browser answers")
        async with browser:
            page = await browser.new_page(config["url"], LOAD_TIMEOUT)
            try:
                return [
                    await _website_info(page, config["url"], info)
                    for info in config.get("infos", [])
                ]
            finally:
                await browser.discard(page)
    except (ChromeError, KeyError, IndexError, TypeError) as exc:
        log.info("info_from_website %s failed (%s): using its backups", config.get("url"), exc)
        return config.get("backups")


async def _website_info(page: Page, url: str, info: dict[str, Any]) -> Any:
    if await page.evaluate("location.href") != url:
        await page.goto(url, LOAD_TIMEOUT)
    action = info.get("action", "inner_text")
    selectors = info["selector"] if action.startswith("click_and_") else [info["selector"]]
    for selector in selectors[:-1]:
        await _click(page, selector)
    await _element(page, selectors[-1])
    if action in ("inner_text", "click_and_inner_text"):
        return await _call(page, "sel => document.querySelector(sel).innerText", selectors[-1])
    if action in ("attribute", "click_and_attribute"):
        return await _call(
            page,
            "(sel, a) => document.querySelector(sel).getAttribute(a)",
            selectors[-1],
            info["attribute"],
        )
    raise ChromeError(f"unknown info action {action!r}")


async def get_gotoRecreationPage_and_get_html_content(  # noqa: N802 - OSWorld's name
    ctx: EvalContext, config: dict[str, Any]
) -> dict[str, Any]:
    """recreation.gov's next available date for Albion Basin: search it, open the result
    (a new tab), press "next available" and read the `class` element (`order`-th)."""
    browser = await _browser(ctx, relaunch=True)
    if browser is None:
        raise ChromeError("no browser answers")
    async with browser:
        page = await browser.new_page("https://www.recreation.gov/", LOAD_TIMEOUT, isolated=True)
        try:
            await _element(page, "input#hero-search-input")
            await _call(
                page,
                "(sel, v) => { const e = document.querySelector(sel); e.focus(); e.value = v;"
                " e.dispatchEvent(new Event('input', {bubbles: true}));"
                " e.dispatchEvent(new Event('change', {bubbles: true})); }",
                "input#hero-search-input",
                "Albion Basin",
            )
            await _click(page, "button.nav-search-button")
            await asyncio.sleep(2)
            popup = await _opened_by(browser, page, ".search-result-highlight--success")
            await popup.wait_loaded(LOAD_TIMEOUT)
            await asyncio.sleep(2)
            await _click(popup, "button.next-available")
            texts = await _call(popup, _CLASS_TEXTS, config["class"])
        finally:
            await browser.discard(page)
    if config.get("selector") != "class":
        return {"expected": {}}
    return {"expected": {config["class"]: texts[int(config.get("order", 0))]}}


async def _opened_by(browser: Browser, page: Page, selector: str) -> Page:
    """Click `selector` in `page` and return the tab the click opens (within 30 s)."""
    events = browser.events()
    try:
        await browser.send("Target.setDiscoverTargets", {"discover": True})
        await _click(page, selector)
        async with asyncio.timeout(30):
            while True:
                event = await events.get()
                info = event.get("params", {}).get("targetInfo", {})
                if (
                    event.get("method") == "Target.targetCreated"
                    and info.get("openerId") == page.target_id
                ):
                    return await browser.attach(info["targetId"])
    finally:
        browser.unlisten(events)


GETTERS: dict[str, Getter] = {
    "active_url_from_accessTree": get_active_url_from_accessTree,
    "active_tab_url_parse": get_active_tab_url_parse,
    "url_dashPart": get_url_dashPart,
    "open_tabs_info": get_open_tabs_info,
    "active_tab_info": get_active_tab_info,
    "active_tab_html_parse": get_active_tab_html_parse,
    "page_info": get_page_info,
    "pdf_from_url": get_pdf_from_url,
    "info_from_website": get_info_from_website,
    "gotoRecreationPage_and_get_html_content": get_gotoRecreationPage_and_get_html_content,
}
