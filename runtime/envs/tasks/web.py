"""The web as tasks see it: URLs compared the way OSWorld's checks compare them, and the
pages a task opens in the browser that only the live web serves.

`live_web_urls(task)` lists the http(s) URLs a task loads in the browser (`chrome_open_tabs`,
a browser started on a URL, the getters that load a page: `page_info`, `info_from_website`,
`pdf_from_url`, `gotoRecreationPage_and_get_html_content`, the Chrome Web Store for a
task scored by `is_expected_installed_extensions`, and VS Code's marketplace for an
extension a task installs by id or checks for without a `.vsix` of its own) whose host is
not loopback and not mapped to a local server (`SCALECUA_BROWSER_HOSTS`, see
runtime/envs/desktop/browser_net.py).
Files a task downloads are not pages: they come from the file cache. A task that sends the
agent to a site it names only in its instruction is not found by this.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse, urlunparse

from runtime.addresses import is_loopback
from runtime.envs.desktop.browser_net import HostMap
from runtime.envs.tasks.model import Task

__all__ = ["live_web_urls", "needs_live_web", "same_url"]

# Getters that load a page themselves, and where its URL is in their config.
_PAGE_GETTERS = {"page_info": "url", "info_from_website": "url", "pdf_from_url": "path"}
_RECREATION = "https://www.recreation.gov/"  # what gotoRecreationPage_and_get_html_content loads
# Metrics whose passing state only a live site gives: extensions come from the Web Store.
_IMPLIED = {"is_expected_installed_extensions": "https://chromewebstore.google.com/"}
_BROWSERS = re.compile(r"(^|[/\s])(google-chrome(-stable)?|chromium(-browser)?|chrome)(\s|$)")
_URL = re.compile(r"https?://[^\s'\"<>]+")
# VS Code installs an extension by id from its marketplace (code-server: from Open VSX).
_MARKETPLACE = "https://marketplace.visualstudio.com/items?itemName="
_INSTALL_EXTENSION = re.compile(r"--install-extension[=\s]+['\"]?([^\s'\"]+)")


def same_url(a: str | None, b: str | None) -> bool:
    """OSWorld's URL equality: scheme defaults to http, host case and `www.` and a lone
    trailing `/` path are ignored; query and fragment count."""
    if a is None or b is None:
        return a == b
    return _normal(a) == _normal(b)


def _normal(url: str) -> str:
    parts = urlparse(url)
    return urlunparse(
        parts._replace(
            scheme=(parts.scheme or "http").lower(),
            netloc=parts.netloc.lower().replace("www.", ""),
            path="" if parts.path == "/" else parts.path,
        )
    )


def live_web_urls(task: Task | dict[str, Any], hosts: HostMap | None = None) -> list[str]:
    """The live-web URLs the task opens in the browser, each once, in order of appearance."""
    if not isinstance(task, Task):
        task = Task.from_dict(task)
    hosts = hosts or HostMap()
    found = [url for url in _opened_urls(task) if _is_live(url, hosts)]
    return list(dict.fromkeys(found))


def needs_live_web(task: Task | dict[str, Any], hosts: HostMap | None = None) -> bool:
    """Whether the task opens a page only the live web serves (see `live_web_urls`)."""
    return bool(live_web_urls(task, hosts))


def _is_live(url: str, hosts: HostMap) -> bool:
    parts = urlparse(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return not is_loopback(parts.hostname) and hosts.lookup(parts.hostname, port) is None


def _opened_urls(task: Task) -> Iterator[str]:
    for step in [*task.config, *task.evaluator.postconfig]:
        params = step.get("parameters") or {}
        kind = step.get("type")
        if kind == "chrome_open_tabs":
            yield from (u for u in params.get("urls_to_open") or [] if isinstance(u, str))
        elif kind in ("launch", "execute", "command"):
            command = params.get("command")
            text = " ".join(command) if isinstance(command, list) else str(command or "")
            if _BROWSERS.search(text):
                yield from _URL.findall(text)
    for spec in [*task.evaluator.results, *task.evaluator.expecteds]:
        for getter in spec if isinstance(spec, list) else [spec]:
            if not isinstance(getter, dict):
                continue
            kind = getter.get("type")
            if kind in _PAGE_GETTERS and isinstance(getter.get(_PAGE_GETTERS[kind]), str):
                yield getter[_PAGE_GETTERS[kind]]
            elif kind == "gotoRecreationPage_and_get_html_content":
                yield _RECREATION
    yield from (_IMPLIED[f] for f in task.evaluator.funcs if f in _IMPLIED)
    yield from (_MARKETPLACE + name for name in _marketplace_extensions(task))


def _marketplace_extensions(task: Task) -> list[str]:
    """VS Code extensions a task installs by id (`code --install-extension ID`), or checks
    for in `code --list-extensions` when none of its files is a `.vsix` (the agent must
    then install it from the marketplace)."""
    names: list[str] = []
    vsix = False
    for step in [*task.config, *task.evaluator.postconfig]:
        params = step.get("parameters") or {}
        for name in _INSTALL_EXTENSION.findall(_words(params.get("command"))):
            vsix = vsix or name.endswith(".vsix")
            names += [] if name.endswith(".vsix") else [name]
        files = params.get("files") if step.get("type") == "download" else None
        vsix = vsix or any(str(f.get("path", "")).endswith(".vsix") for f in files or [])
    evaluator = task.evaluator
    checks = zip(evaluator.funcs, evaluator.results, evaluator.expecteds, strict=True)
    for func, result, expected in checks:
        command = result.get("command") if isinstance(result, dict) else None
        listed = "--list-extensions" in _words(command)
        rules = expected.get("rules") if isinstance(expected, dict) else None
        if func == "is_extension_installed" and listed and isinstance(rules, dict) and not vsix:
            if rules.get("type") == "contain" and isinstance(rules.get("expected"), str):
                names.append(rules["expected"])
    return names


def _words(command: Any) -> str:
    """A step's or getter's command (argv or shell line) as one line."""
    return " ".join(map(str, command)) if isinstance(command, list) else str(command or "")
