"""Browser metrics with OSWorld's names and semantics: tabs, URLs, bookmarks, settings, pages.

Each takes the getters' values (runtime/envs/tasks/getters/chrome*.py) and the task's rule.
URLs compare as OSWorld's `compare_urls` does (`runtime.envs.tasks.web.same_url`: no
`www.`, no lone trailing `/`). A rule type OSWorld does not define is a TaskError (a
malformed task); a missing value (no browser, no file) scores 0.

`check_direct_json_object` is OSWorld's general JSON check; it lives here because the
browser tasks are nearly all of its users. `is_extension_installed` checks a command's
output (VS Code's `code --list-extensions`).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import lxml.etree
import lxml.html

from runtime.envs.tasks.web import same_url
from runtime.errors import TaskError

__all__ = [
    "METRICS",
    "check_enabled_experiments",
    "check_font_size",
    "check_history_deleted",
    "compare_htmls",
    "is_added_to_steam_cart",
    "is_cookie_deleted",
    "is_expected_active_tab",
    "is_expected_bookmarks",
    "is_expected_installed_extensions",
    "is_expected_search_query",
    "is_expected_tabs",
    "is_expected_url_pattern_match",
]


def _url_of(value: Any) -> Any:
    return value.get("url") if isinstance(value, dict) else value


def is_expected_active_tab(active_tab_info: Any, rule: dict[str, Any]) -> float:
    """1.0 when the active tab is at `rule["url"]` (rule type "url")."""
    if not active_tab_info:
        return 0.0
    if rule.get("type") != "url":
        raise TaskError(f"is_expected_active_tab: unknown rule type {rule.get('type')!r}")
    return float(same_url(rule["url"], _url_of(active_tab_info)))


def is_expected_url_pattern_match(result: Any, rules: dict[str, Any]) -> float:
    """1.0 when every regex in `rules["expected"]` is found in the URL (or the tab's URL)."""
    url = _url_of(result) if result else None
    if not isinstance(url, str):
        return 0.0
    return float(all(re.search(pattern, url) for pattern in rules["expected"]))


def is_expected_installed_extensions(installed: Any, expected: dict[str, Any]) -> float:
    """1.0 when every extension named in `expected["expected"]` is installed."""
    return float(set(expected["expected"]) <= set(installed or []))


def is_expected_tabs(open_tabs: Any, rule: dict[str, Any]) -> float:
    """1.0 when the open tabs are exactly `rule["urls"]`, in any order (rule type "url")."""
    if rule.get("type") != "url":
        raise TaskError(f"is_expected_tabs: unknown rule type {rule.get('type')!r}")
    actual = [tab.get("url") for tab in open_tabs or []]
    expected = rule["urls"]
    return float(
        len(actual) == len(expected) and all(any(same_url(e, a) for a in actual) for e in expected)
    )


def is_expected_bookmarks(bookmarks: Any, rule: dict[str, Any]) -> float:
    """Bookmark bar checks by rule type: `bookmark_bar_folders_names` (its folders' names),
    `bookmark_bar_websites_urls` (its links), `liked_authors_websites_urls` (the links in its
    "Liked Authors" folder; each expected URL may be a list of alternatives)."""
    if not bookmarks:
        return 0.0
    bar = bookmarks.get("bookmark_bar", {}).get("children", [])
    kind = rule.get("type")
    if kind == "bookmark_bar_folders_names":
        return float({b["name"] for b in bar if b.get("type") == "folder"} == set(rule["names"]))
    if kind == "bookmark_bar_websites_urls":
        return float({b["url"] for b in bar if b.get("type") == "url"} == set(rule["urls"]))
    if kind == "liked_authors_websites_urls":
        folder = next(
            (b for b in bar if b.get("type") == "folder" and b.get("name") == "Liked Authors"), None
        )
        if folder is None:
            return 0.0
        liked = {b["url"] for b in folder.get("children", []) if b.get("type") == "url"}
        choices = [[u] if isinstance(u, str) else list(u) for u in rule["urls"]]
        return float(any(set(pick) == liked for pick in itertools.product(*choices)))
    raise TaskError(f"is_expected_bookmarks: unknown rule type {kind!r}")


def is_expected_search_query(active_tab_info: Any, rules: dict[str, Any]) -> float:
    """1.0 when the active tab's URL matches `rules["expect"]["pattern"]`."""
    url = _url_of(active_tab_info) if active_tab_info else None
    if not isinstance(url, str):
        return 0.0
    return float(re.search(rules["expect"]["pattern"], url) is not None)


def is_cookie_deleted(cookie_data: Any, rule: dict[str, Any]) -> float:
    """1.0 when no cookie's host is one of `rule["domains"]` (rule type "domains")."""
    if rule.get("type") != "domains":
        raise TaskError(f"is_cookie_deleted: unknown rule type {rule.get('type')!r}")
    if cookie_data is None:
        return 0.0
    hosts = [row[1] for row in cookie_data]
    return float(not any(same_url(d, h) for d in rule["domains"] for h in hosts))


def check_history_deleted(history_data: Any, rule: dict[str, Any]) -> float:
    """1.0 when no history URL contains any of `rule["keywords"]` (rule type "keywords")."""
    if rule.get("type") != "keywords":
        raise TaskError(f"check_history_deleted: unknown rule type {rule.get('type')!r}")
    if history_data is None:
        return 0.0
    urls = [row[0] for row in history_data]
    return float(not any(k in url for k in rule["keywords"] for url in urls))


def check_enabled_experiments(enabled_experiments: Any, rule: dict[str, Any]) -> float:
    """1.0 when the enabled chrome://flags experiments are `rule["names"]`, in that order."""
    if rule.get("type") != "names":
        raise TaskError(f"check_enabled_experiments: unknown rule type {rule.get('type')!r}")
    names = [str(e).split("@")[0] for e in enabled_experiments or []]
    return float(names == list(rule["names"]))


def check_font_size(font_size: Any, rule: dict[str, Any]) -> float:
    """The default font size: equal to `value`, or strictly between `min` and `max` ("range")."""
    size = font_size["default_font_size"]
    if rule.get("type") == "value":
        return float(size == rule["value"])
    if rule.get("type") == "range":
        return float(rule["min"] < size < rule["max"])
    raise TaskError(f"check_font_size: unknown rule type {rule.get('type')!r}")


def is_added_to_steam_cart(active_tab_info: Any, rule: dict[str, Any]) -> float:
    """1.0 when the page's content names every item of `rule["items"]`."""
    content = (active_tab_info or {}).get("content") or ""
    return float(all(item in content for item in rule["items"]))


_LIST_ATTRIBUTES = {"class", "rel", "rev", "accept-charset", "headers", "accesskey", "dropzone"}


class _Tag:
    """An element as OSWorld's comparison sees it: name, all its text, its attributes."""

    __slots__ = ("attrs", "name", "text")

    def __init__(self, element: lxml.html.HtmlElement) -> None:
        self.name = element.tag
        self.text = element.text_content().strip()
        self.attrs = {
            k: v.split() if k in _LIST_ATTRIBUTES else v for k, v in element.attrib.items()
        }

    def same(self, other: Any) -> bool:
        return isinstance(other, _Tag) and (self.name, self.text, self.attrs) == (
            other.name,
            other.text,
            other.attrs,
        )


def _walk(element: Any) -> Any:
    """Every element and text node below `element`, in document order (BeautifulSoup's
    `recursiveChildGenerator`: an element, its text, then each child and its tail)."""
    if isinstance(element.tag, str):
        yield _Tag(element)
    else:  # a comment or processing instruction: compared by its text
        yield element.text or ""
    if isinstance(element.tag, str) and element.text:
        yield element.text
    for child in element:
        yield from _walk(child)
        if child.tail:
            yield child.tail


def _html_nodes(path: str) -> list[Any]:
    text = Path(path).read_text(encoding="utf-8")
    root = lxml.html.document_fromstring(text)
    doctype = root.getroottree().docinfo.doctype
    return ([doctype] if doctype else []) + list(_walk(root))


def compare_htmls(html_path1: str, html_path2: str, **options: Any) -> float:
    """1.0 when the two HTML files' element trees agree node by node (tag names, texts,
    attributes), as far as the shorter one goes, as OSWorld compares them."""
    if not html_path1 or not html_path2:
        return 0.0
    try:
        nodes1, nodes2 = _html_nodes(html_path1), _html_nodes(html_path2)
    except (lxml.etree.ParserError, ValueError):
        return float(Path(html_path1).read_bytes().strip() == Path(html_path2).read_bytes().strip())
    for a, b in zip(nodes1, nodes2, strict=False):
        if isinstance(a, _Tag) or isinstance(b, _Tag):
            if not (isinstance(a, _Tag) and a.same(b)):
                return 0.0
        elif a != b:
            return 0.0
    return 1.0


METRICS = {
    "is_expected_active_tab": is_expected_active_tab,
    "is_expected_url_pattern_match": is_expected_url_pattern_match,
    "is_expected_installed_extensions": is_expected_installed_extensions,
    "is_expected_tabs": is_expected_tabs,
    "is_expected_bookmarks": is_expected_bookmarks,
    "is_expected_search_query": is_expected_search_query,
    "is_cookie_deleted": is_cookie_deleted,
    "check_history_deleted": check_history_deleted,
    "check_enabled_experiments": check_enabled_experiments,
    "check_font_size": check_font_size,
    "is_added_to_steam_cart": is_added_to_steam_cart,
    "compare_htmls": compare_htmls,
}
