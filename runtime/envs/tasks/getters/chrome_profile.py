"""Chrome getters that read the profile's files, with OSWorld's names and values.

The profile is /home/user/.config/google-chrome (Preferences, Secure Preferences, Local
State, Bookmarks, History, Cookies), read from the desktop. Chrome writes a change a few
seconds later (Preferences about 8 s, Bookmarks about 1 s, History when it commits) and
everything when it exits cleanly, which OSWorld's tasks that `pkill chrome` in their
postconfig rely on: these getters first wait for such a `pkill` to finish (at most 15 s).
The cookies of a running browser are its live jar, asked over the DevTools protocol.

Where OSWorld's getter falls back to a value when a file cannot be read, these return the
same value; where OSWorld's returns the string "Google" for a failed read of an unrelated
setting (a copy-paste slip), these return "false" or [].
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

from runtime.envs.desktop.cdp import Browser, ChromeError
from runtime.envs.desktop.chrome import PROFILE, WAIT_STOPPED
from runtime.envs.tasks.getters.context import EvalContext, Getter, dest_path

__all__ = [
    "GETTERS",
    "BOOKMARKS",
    "COOKIES",
    "DESKTOP",
    "FONT_DEFAULTS",
    "HISTORY",
    "LOCAL_STATE",
    "PREFERENCES",
    "SECURE_PREFERENCES",
    "get_bookmarks",
    "get_chrome_font_size",
    "get_cookie_data",
    "get_data_delete_automacally",
    "get_default_search_engine",
    "get_enable_do_not_track",
    "get_enable_enhanced_safety_browsing",
    "get_enabled_experiments",
    "get_find_installed_extension_name",
    "get_find_unpacked_extension_path",
    "get_history",
    "get_new_startup_page",
    "get_profile_name",
]

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
_ENGINE_NAMES = {"Microsoft Bing": "Bing"}  # renamed since OSWorld's tasks were written


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
}
