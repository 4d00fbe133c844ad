"""The browser metrics, the date rules and the live-web check, on values built here
(the getters that produce such values run against a real browser in
test_chrome_getters.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.envs.desktop.browser_net import HostMap
from runtime.envs.tasks.getters import EvalContext, get_state
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.support import unsupported_parts
from runtime.envs.tasks.web import live_web_urls, needs_live_web, same_url
from runtime.errors import TaskError

TASKS = Path(__file__).parents[3] / "data" / "osworld" / "chrome"


def test_urls_compare_as_osworld_compares_them() -> None:
    assert same_url("https://www.Apple.com/", "https://apple.com")
    assert same_url("example.com/a", "example.com/a")  # no scheme: both read as http
    assert not same_url("https://a.com/x/", "https://a.com/x")  # only a lone / is ignored
    assert not same_url("https://a.com/?q=1", "https://a.com/?q=2")
    assert not same_url("http://a.com", "https://a.com")
    assert same_url(None, None) and not same_url(None, "https://a.com")


def test_tab_metrics() -> None:
    tabs = [{"url": "https://www.airbnb.com/", "title": "a"}, {"url": "https://lonelyplanet.com"}]
    rule = {"type": "url", "urls": ["https://www.lonelyplanet.com", "https://www.airbnb.com"]}
    assert METRICS["is_expected_tabs"](tabs, rule) == 1.0
    assert METRICS["is_expected_tabs"](tabs[:1], rule) == 0.0
    assert METRICS["is_expected_tabs"]([*tabs, {"url": "https://x.org"}], rule) == 0.0
    with pytest.raises(TaskError, match="unknown rule type"):
        METRICS["is_expected_tabs"](tabs, {"type": "title", "urls": []})
    active = {"type": "url", "url": "https://www.nfl.com/scores/2019/POST4"}
    assert METRICS["is_expected_active_tab"]("https://nfl.com/scores/2019/POST4", active) == 1.0
    assert METRICS["is_expected_active_tab"]({"url": "https://www.nfl.com/scores"}, active) == 0.0
    assert METRICS["is_expected_active_tab"](None, active) == 0.0
    pattern = {"expected": ["AgeAppropriate:Kids", "S=4"]}
    url = "https://www.kohls.com/search.jsp?search=spider-man&AgeAppropriate:Kids&S=4"
    assert METRICS["is_expected_url_pattern_match"](url, pattern) == 1.0
    assert METRICS["is_expected_url_pattern_match"]({"url": url[:-3]}, pattern) == 0.0
    assert METRICS["is_expected_url_pattern_match"](None, pattern) == 0.0
    search = {"expect": {"pattern": r"www\.google\.com.*?/search\?q=Nereida&"}}
    info = {"url": "https://www.google.com/search?q=Nereida&ie=UTF-8"}
    assert METRICS["is_expected_search_query"](info, search) == 1.0
    assert (
        METRICS["is_expected_search_query"]({"url": "https://duckduckgo.com/?q=Nereida"}, search)
        == 0.0
    )
    assert (
        METRICS["is_added_to_steam_cart"](
            {"content": "<li>The Dota 2 Official Soundtrack</li>"},
            {"items": ["The Dota 2 Official Soundtrack"]},
        )
        == 1.0
    )
    assert METRICS["is_added_to_steam_cart"]({"content": "empty cart"}, {"items": ["Dota"]}) == 0.0


def test_bookmark_metric() -> None:
    bar = {
        "bookmark_bar": {
            "children": [
                {"type": "folder", "name": "Favorites", "children": []},
                {
                    "type": "url",
                    "name": "t",
                    "url": "https://jalammar.github.io/illustrated-transformer/",
                },
                {
                    "type": "folder",
                    "name": "Liked Authors",
                    "children": [
                        {"type": "url", "url": "https://a.org/1"},
                        {"type": "url", "url": "https://b.org/2"},
                    ],
                },
            ]
        }
    }
    metric = METRICS["is_expected_bookmarks"]
    folders = {"type": "bookmark_bar_folders_names"}
    assert metric(bar, {**folders, "names": ["Favorites", "Liked Authors"]}) == 1.0
    assert metric(bar, {**folders, "names": ["Favorites"]}) == 0.0
    links = {
        "type": "bookmark_bar_websites_urls",
        "urls": ["https://jalammar.github.io/illustrated-transformer/"],
    }
    assert metric(bar, links) == 1.0
    liked = {
        "type": "liked_authors_websites_urls",
        "urls": [["https://x.org", "https://a.org/1"], "https://b.org/2"],
    }
    assert metric(bar, liked) == 1.0
    assert metric(bar, {**liked, "urls": ["https://a.org/1"]}) == 0.0
    assert metric([], links) == 0.0  # no Bookmarks file yet
    with pytest.raises(TaskError):
        metric(bar, {"type": "other_folder"})


def test_profile_metrics() -> None:
    cookies = [(0, ".amazon.com", "", "session-id"), (0, "www.bbc.co.uk", "", "ckns")]
    rule = {"type": "domains", "domains": [".amazon.com"]}
    assert METRICS["is_cookie_deleted"](cookies, rule) == 0.0
    assert METRICS["is_cookie_deleted"](cookies[1:], rule) == 1.0
    assert METRICS["is_cookie_deleted"](None, rule) == 0.0
    history = [("https://www.youtube.com/watch?v=1", "v", 1), ("https://www.bbc.co.uk/", "BBC", 2)]
    keywords = {"type": "keywords", "keywords": ["youtube"]}
    assert METRICS["check_history_deleted"](history, keywords) == 0.0
    assert METRICS["check_history_deleted"](history[1:], keywords) == 1.0
    names = {"type": "names", "names": ["chrome-refresh-2023", "chrome-webui-refresh-2023"]}
    assert (
        METRICS["check_enabled_experiments"](
            ["chrome-refresh-2023@2", "chrome-webui-refresh-2023@1"], names
        )
        == 1.0
    )
    assert (
        METRICS["check_enabled_experiments"](
            ["chrome-webui-refresh-2023@1", "chrome-refresh-2023@2"], names
        )
        == 0.0
    )
    sizes = {"default_font_size": 20}
    assert METRICS["check_font_size"](sizes, {"type": "range", "min": 16, "max": 99999}) == 1.0
    assert (
        METRICS["check_font_size"](
            {"default_font_size": 16}, {"type": "range", "min": 16, "max": 99}
        )
        == 0.0
    )
    assert METRICS["check_font_size"](sizes, {"type": "value", "value": 20}) == 1.0
    installed = ["Google Translate", "Momentum", "React Developer Tools"]
    assert METRICS["is_expected_installed_extensions"](installed, {"expected": ["Momentum"]}) == 1.0
    assert (
        METRICS["is_expected_installed_extensions"](installed, {"expected": ["Momentum", "Zoom"]})
        == 0.0
    )
    listing = "ms-python.python\nmattn.lisp\n"
    assert (
        METRICS["is_extension_installed"](listing, {"type": "contain", "expected": "mattn.lisp"})
        == 1.0
    )
    assert (
        METRICS["is_extension_installed"](
            listing, {"type": "not_contain", "expected": "mattn.lisp"}
        )
        == 0.0
    )


def test_check_direct_json_object() -> None:
    metric = METRICS["check_direct_json_object"]
    rules = {"expected": {"start": "NYC", "end": "CMH"}}
    assert metric({"start": "NYC", "end": "CMH", "time": "x"}, rules) == 1.0
    assert metric({"start": "NYC"}, rules) == 0.0
    assert metric("{'start': 'NYC', 'end': 'CMH'}", rules) == 1.0  # a printed dict
    assert metric("not json", rules) == 0.0
    assert metric(None, rules) == 0.0
    inside = {"expect_in_result": True, "expected": {"name": "Smith", "tags": ["b", "z"]}}
    assert metric({"name": "James Smith", "tags": ["a", "b"]}, inside) == 1.0
    assert metric({"name": "James Smith", "tags": ["a"]}, inside) == 0.0


def test_compare_htmls(tmp_path: Path) -> None:
    page = '<!DOCTYPE html><html><body><table class="a  b"><tr><td>1</td></tr></table><!-- c --></body></html>'
    same = '<!DOCTYPE html><html><body><table class="a b"><tr><td>1</td></tr></table><!-- c --></body></html>'
    other = (
        '<!DOCTYPE html><html><body><table class="a b"><tr><td>2</td></tr></table></body></html>'
    )
    paths = []
    for i, text in enumerate((page, same, other)):
        paths.append(tmp_path / f"{i}.html")
        paths[-1].write_text(text)
    assert METRICS["compare_htmls"](str(paths[0]), str(paths[1])) == 1.0
    assert METRICS["compare_htmls"](str(paths[0]), str(paths[2])) == 0.0


async def test_rule_relative_time_fills_in_today_without_changing_the_task(tmp_path: Path) -> None:
    spec = {
        "type": "rule_relativeTime",
        "rules": {
            "relativeTime": {"from": "tomorrow"},
            "expected": {"start": "NYC", "time": "{Year}"},
        },
    }
    ctx = EvalContext(None, tmp_path)
    rules = await get_state(ctx, spec)
    assert rules["expected"]["time"].isdigit() and rules["expected"]["start"] == "NYC"
    assert spec["rules"]["expected"]["time"] == "{Year}"  # the task itself is untouched
    assert await get_state(ctx, {"type": "time_diff_range", "diff_range_in_minutes": "60"}) == "60"


def test_live_web_urls() -> None:
    task = load_task(TASKS / "7a5a7856-f1b6-42a4-ade9-1ca81ca0f263.json")
    urls = [
        "https://blog.eleuther.ai/rotary-embeddings/",
        "https://jalammar.github.io/illustrated-transformer/",
    ]
    assert live_web_urls(task) == urls
    served = HostMap.parse("blog.eleuther.ai=127.0.0.1:1 *:443=127.0.0.1:2")
    assert live_web_urls(task, served) == [] and not needs_live_web(task, served)
    raw = {
        "id": "t",
        "instruction": "i",
        "config": [
            {"type": "launch", "parameters": {"command": ["google-chrome", "https://a.org/x"]}},
            {"type": "execute", "parameters": {"command": "wget https://files.org/f.zip"}},
            {
                "type": "chrome_open_tabs",
                "parameters": {
                    "urls_to_open": ["http://localhost:8000/", "file:///home/user/a.html"]
                },
            },
        ],
        "evaluator": {
            "func": ["exact_match", "exact_match"],
            "result": [
                {"type": "page_info", "url": "https://store.steampowered.com/cart/"},
                {"type": "rule", "rules": {}},
            ],
            "expected": [
                {"type": "rule", "rules": {}},
                {"type": "gotoRecreationPage_and_get_html_content"},
            ],
        },
    }
    assert live_web_urls(raw) == [
        "https://a.org/x",
        "https://store.steampowered.com/cart/",
        "https://www.recreation.gov/",
    ]
    no_web = {
        "id": "t",
        "instruction": "i",
        "evaluator": {"func": "exact_match", "result": {"type": "bookmarks"}},
    }
    assert not needs_live_web(no_web)
    store = {
        "id": "t",
        "instruction": "i",
        "evaluator": {"func": "is_expected_installed_extensions"},
    }
    assert live_web_urls(store) == ["https://chromewebstore.google.com/"]


def test_the_chrome_tasks_names_are_all_known() -> None:
    for path in sorted(TASKS.glob("*.json")):
        assert unsupported_parts(load_task(path)) == [], path.name
