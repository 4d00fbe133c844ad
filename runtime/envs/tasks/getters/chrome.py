"""Chrome getters with OSWorld's names and values: the profile's files, the open tabs, pages.

Three kinds, by where the state is read:

- the profile's files under /home/user/.config/google-chrome (Preferences, Local State,
  Bookmarks, History, Cookies), read from the desktop; Chrome writes them a few seconds
  after a change (Preferences about 10 s later, History when it commits), or when it
  exits cleanly, as OSWorld's tasks that `pkill chrome` in their postconfig rely on;
- the address bar, read from the accessibility tree (`active_url_from_accessTree`: the
  URL as Chrome shows it, `https://www.` elided, so tasks add their `goto_prefix`);
- the browser itself over the DevTools protocol, through the desktop server
  (runtime/envs/desktop/cdp.py): open tabs, a page's content, a page printed to PDF.

Where OSWorld's getter falls back to a value when the state cannot be read (no file, no
browser), these return the same value; where OSWorld's returns the string "Google" for a
failed read of an unrelated setting (a copy-paste slip), these return "false" or [].
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from runtime.envs.desktop.cdp import Browser, ChromeError, Page
from runtime.envs.desktop.chrome import PROFILE, WAIT_STOPPED
from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path
from runtime.envs.tasks.web import same_url
from runtime.errors import TaskError

__all__ = ["GETTERS", "active_url"]

log = logging.getLogger(__name__)

_DIR = f"/home/user/{PROFILE}"
PREFERENCES = f"{_DIR}/Default/Preferences"
SECURE_PREFERENCES = f"{_DIR}/Default/Secure Preferences"
LOCAL_STATE = f"{_DIR}/Local State"
BOOKMARKS = f"{_DIR}/Default/Bookmarks"
HISTORY = f"{_DIR}/Default/History"
COOKIES = (f"{_DIR}/Default/Network/Cookies", f"{_DIR}/Default/Cookies")
DESKTOP = "/home/user/Desktop"
# Chrome's defaults, which it does not write down until they change.
FONT_DEFAULTS = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}
BROWSER_APPS = ("Google Chrome", "Chromium")  # the browser's name in the accessibility tree
ADDRESS_BAR = "Address and search bar"
LOAD_TIMEOUT = 60.0
TAB_SETTLE = 10.0  # per open tab: how long to wait for it to finish loading before reading it
RELAUNCH = ["google-chrome", "--remote-debugging-port=1337"]
_ENGINE_NAMES = {"Microsoft Bing": "Bing"}  # renamed since OSWorld's tasks were written


# -- the profile's files ----------------------------------------------------------------------
async def _profile_file(ctx: EvalContext, path: str) -> bytes | None:
    """A file of the profile, once a browser that `pkill chrome` stopped has saved it."""
    await ctx.controller.execute(WAIT_STOPPED, shell=True)
    return await ctx.controller.get_file(path)


async def _json_file(ctx: EvalContext, path: str) -> Any:
    data = await _profile_file(ctx, path)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.info("%s is not JSON", path)
        return None


async def _preferences(ctx: EvalContext) -> dict[str, Any]:
    prefs = await _json_file(ctx, PREFERENCES)
    return prefs if isinstance(prefs, dict) else {}


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


async def get_default_search_engine(ctx: EvalContext, config: dict[str, Any]) -> str:
    """The default search engine's name; "Google" when none was chosen (Chrome's default).

    Names are those of the Chrome OSWorld's tasks were written on: newer ones call Bing
    "Microsoft Bing", and a task expects "Bing".
    """
    prefs = await _preferences(ctx)
    name = _dig(prefs, "default_search_provider_data", "template_url_data", "short_name")
    if not isinstance(name, str):
        return "Google"
    return _ENGINE_NAMES.get(name, name)


async def get_profile_name(ctx: EvalContext, config: dict[str, Any]) -> str | None:
    """The profile's name (Settings > You and Google), or None."""
    return _dig(await _preferences(ctx), "profile", "name")


async def get_enabled_experiments(ctx: EvalContext, config: dict[str, Any]) -> list[str]:
    """The chrome://flags experiments switched on (`name@option` entries of Local State)."""
    found = _dig(await _json_file(ctx, LOCAL_STATE), "browser", "enabled_labs_experiments")
    return list(found) if isinstance(found, list) else []


async def get_chrome_font_size(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    """The font sizes (`webkit.webprefs`), Chrome's defaults filled in for those never changed."""
    prefs = _dig(await _preferences(ctx), "webkit", "webprefs")
    return {**FONT_DEFAULTS, **(prefs if isinstance(prefs, dict) else {})}


async def get_bookmarks(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """The Bookmarks file's `roots` (bookmark_bar, other, synced); [] when there is none."""
    data = await _json_file(ctx, BOOKMARKS)
    return data.get("roots", {}) if isinstance(data, dict) else []


def _flag(value: Any) -> str:
    return "true" if value else "false"


async def get_enable_do_not_track(ctx: EvalContext, config: dict[str, Any]) -> str:
    """ "true" when Do Not Track is on."""
    return _flag(_dig(await _preferences(ctx), "enable_do_not_track"))


async def get_enable_enhanced_safety_browsing(ctx: EvalContext, config: dict[str, Any]) -> str:
    """ "true" when Enhanced Safe Browsing is on."""
    return _flag(_dig(await _preferences(ctx), "safebrowsing", "enhanced"))


async def get_new_startup_page(ctx: EvalContext, config: dict[str, Any]) -> str:
    """ "true" when Chrome opens the New Tab page at start (no `session`, or restore mode 5)."""
    prefs = await _preferences(ctx)
    if "session" not in prefs:
        return "true"
    return _flag(_dig(prefs, "session", "restore_on_startup") == 5)


async def get_data_delete_automacally(ctx: EvalContext, config: dict[str, Any]) -> str:
    """ "true" when a default content setting is set (clearing site data on exit sets the
    cookies one), as OSWorld decides "delete browsing data automatically"; the bookkeeping
    entries newer versions keep there (`has_migrated_*`) do not count."""
    values = _dig(await _preferences(ctx), "profile", "default_content_setting_values")
    if not isinstance(values, dict):
        return "false"
    return _flag(any(not key.startswith("has_migrated") for key in values))


async def _extension_settings(ctx: EvalContext) -> dict[str, Any]:
    """`extensions.settings` by extension id, from Preferences and Secure Preferences."""
    merged: dict[str, Any] = {}
    for path in (PREFERENCES, SECURE_PREFERENCES):
        found = _dig(await _json_file(ctx, path), "extensions", "settings")
        if isinstance(found, dict):
            for ident, settings in found.items():
                if isinstance(settings, dict):
                    merged.setdefault(ident, {}).update(settings)
    return merged


async def get_find_unpacked_extension_path(ctx: EvalContext, config: dict[str, Any]) -> list[str]:
    """The folders of the installed extensions (an unpacked one's is where it was loaded from)."""
    settings = await _extension_settings(ctx)
    return [s["path"] for s in settings.values() if isinstance(s.get("path"), str)]


async def get_find_installed_extension_name(ctx: EvalContext, config: dict[str, Any]) -> list[str]:
    """The names of the installed extensions (from their manifests)."""
    names = []
    for ident, settings in (await _extension_settings(ctx)).items():
        name = _dig(settings, "manifest", "name")
        if not isinstance(name, str):
            name = await _manifest_name(ctx, ident, settings.get("path"))
        if name:
            names.append(name)
    return names


async def _manifest_name(ctx: EvalContext, ident: str, path: Any) -> str | None:
    """An extension's name from its manifest on disk, `__MSG_key__` names resolved."""
    if not isinstance(path, str):
        return None
    folder = path if path.startswith("/") else f"{_DIR}/Default/Extensions/{ident}/{path}"
    manifest = await _json_file(ctx, f"{folder}/manifest.json")
    name = _dig(manifest, "name")
    if not isinstance(name, str):
        return None
    if name.startswith("__MSG_") and name.endswith("__"):
        locale = _dig(manifest, "default_locale") or "en"
        messages = await _json_file(ctx, f"{folder}/_locales/{locale}/messages.json")
        key = name[6:-2]
        entry = next((v for k, v in (messages or {}).items() if k.lower() == key.lower()), None)
        name = _dig(entry, "message") if isinstance(entry, dict) else name
    return name if isinstance(name, str) else None


async def _copy_sqlite(ctx: EvalContext, paths: tuple[str, ...], dest: str | None) -> Path | None:
    """Copy the first of `paths` the desktop has into the cache folder."""
    for path in paths:
        data = await _profile_file(ctx, path)
        if data is not None:
            local = dest_path(ctx, dest, path)
            await asyncio.to_thread(local.write_bytes, data)
            return local
    return None


def _query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def get_history(ctx: EvalContext, config: dict[str, Any]) -> list[tuple] | None:
    """(url, title, last_visit_time) of every URL in the History database; None if unreadable."""
    local = await _copy_sqlite(ctx, (HISTORY,), config.get("dest"))
    if local is None:
        return None
    try:
        return await asyncio.to_thread(
            _query, local, "SELECT url, title, last_visit_time FROM urls"
        )
    except sqlite3.Error as exc:
        log.info("History unreadable: %s", exc)
        return None


async def get_cookie_data(ctx: EvalContext, config: dict[str, Any]) -> list[tuple] | None:
    """The browser's cookies as rows of its cookies table (host_key second); None if unreadable.

    A running browser is asked for its live cookies (it writes its Cookies file only every
    so often); a stopped one's are read from the file.
    """
    try:
        async with await Browser.connect(ctx.controller) as browser:
            return [_cookie_row(c) for c in await browser.cookies()]
    except ChromeError:
        pass
    local = await _copy_sqlite(ctx, COOKIES, config.get("dest"))
    if local is None:
        return None
    try:
        return await asyncio.to_thread(_query, local, "SELECT * FROM cookies")
    except sqlite3.Error as exc:
        log.info("Cookies unreadable: %s", exc)
        return None


def _cookie_row(cookie: dict[str, Any]) -> tuple:
    """A live cookie in the cookies table's first columns: creation_utc, host_key,
    top_frame_site_key, name, value, encrypted_value, path, expires_utc, is_secure, is_httponly."""
    return (
        0,
        cookie.get("domain", ""),
        "",
        cookie.get("name", ""),
        cookie.get("value", ""),
        b"",
        cookie.get("path", "/"),
        cookie.get("expires", -1),
        int(bool(cookie.get("secure"))),
        int(bool(cookie.get("httpOnly"))),
    )


async def get_shortcuts_on_desktop(ctx: EvalContext, config: dict[str, Any]) -> dict[str, str]:
    """{file name: text} of the .desktop launchers on the Desktop."""
    try:
        tree = await ctx.controller.list_directory(DESKTOP)
    except Exception:  # noqa: BLE001 - no Desktop folder: no shortcuts
        return {}
    children = (tree.get("directory_tree") or tree).get("children") or []
    shortcuts = {}
    for child in children:
        name = child.get("name", "")
        if name.endswith(".desktop") and child.get("type") != "directory":
            data = await ctx.controller.get_file(f"{DESKTOP}/{name}")
            if data is not None:
                shortcuts[name] = data.decode("utf-8", errors="replace")
    return shortcuts


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
            events = browser.events()
            await browser.send("Target.setDiscoverTargets", {"discover": True})
            await _click(page, ".search-result-highlight--success")
            popup = await _popup(browser, events, page.target_id)
            await popup.wait_loaded(LOAD_TIMEOUT)
            await asyncio.sleep(2)
            await _click(popup, "button.next-available")
            texts = await _call(popup, _CLASS_TEXTS, config["class"])
        finally:
            await browser.discard(page)
    if config.get("selector") != "class":
        return {"expected": {}}
    return {"expected": {config["class"]: texts[int(config.get("order", 0))]}}


async def _popup(browser: Browser, events: asyncio.Queue, opener: str) -> Page:
    """The tab `opener` opened, from the target events (within 30 s)."""
    async with asyncio.timeout(30):
        while True:
            event = await events.get()
            info = event.get("params", {}).get("targetInfo", {})
            if event.get("method") == "Target.targetCreated" and info.get("openerId") == opener:
                return await browser.attach(info["targetId"])


GETTERS: dict[str, Getter] = {
    "default_search_engine": get_default_search_engine,
    "profile_name": get_profile_name,
    "enabled_experiments": get_enabled_experiments,
    "chrome_font_size": get_chrome_font_size,
    "bookmarks": get_bookmarks,
    "enable_do_not_track": get_enable_do_not_track,
    "enable_enhanced_safety_browsing": get_enable_enhanced_safety_browsing,
    "new_startup_page": get_new_startup_page,
    "data_delete_automacally": get_data_delete_automacally,
    "find_unpacked_extension_path": get_find_unpacked_extension_path,
    "find_installed_extension_name": get_find_installed_extension_name,
    "history": get_history,
    "cookie_data": get_cookie_data,
    "shortcuts_on_desktop": get_shortcuts_on_desktop,
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
