"""Chrome as OSWorld's VM runs it, on real desktops: `google-chrome --remote-debugging-port=1337`
behind `socat tcp-listen:9222,fork tcp:localhost:1337`, in each desktop's own network,
reached by the host only through the desktop server.

Two desktops run the same commands on the same fixed ports side by side; the browser
reaches the loopback sites of tests/web_sites.py under their mapped names, the desktop's
own loopback, and nothing else (not the host's loopback).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from runtime.addresses import is_loopback
from runtime.envs.desktop.browser_net import HostMap
from runtime.envs.desktop.cdp import Browser, ChromeError
from runtime.envs.desktop.lifecycle import Desktop
from tests.web_sites import LoopbackSites

pytestmark = pytest.mark.desktop

CHROME = ["google-chrome", "--remote-debugging-port=1337"]
SOCAT = ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]
PAGE = "<html><head><title>Served here</title></head><body>ok</body></html>"


@pytest.fixture(scope="module")
async def sites() -> AsyncIterator[LoopbackSites]:
    """One page under a public-looking name, on loopback."""
    async with LoopbackSites({("www.example.com", "/"): PAGE}) as served:
        yield served


@pytest.fixture(scope="module")
async def pair(sites: LoopbackSites, desktop_root: Path) -> AsyncIterator[tuple[Desktop, Desktop]]:
    """Two desktops, each with OSWorld's browser set-up running."""
    with sites.desktop_env(["www.example.com"]):
        a = await Desktop.start(root=desktop_root)
        b = await Desktop.start(root=desktop_root)
    try:
        for desktop in (a, b):
            async with desktop.controller() as ctl:
                await ctl.launch(CHROME)
                await ctl.launch(SOCAT)
        yield a, b
    finally:
        await a.stop()
        await b.stop()


async def test_each_desktop_has_its_own_browser_on_the_same_ports(
    pair: tuple[Desktop, Desktop],
) -> None:
    a, b = pair
    async with a.controller() as ctl_a, b.controller() as ctl_b:
        async with (
            await Browser.connect(ctl_a, timeout=30) as browser_a,
            await Browser.connect(ctl_b, timeout=30) as browser_b,
        ):
            page = await browser_a.new_page("https://www.example.com/")
            assert await page.evaluate("document.title") == "Served here"
            assert "https://www.example.com/" in [p["url"] for p in await browser_a.pages()]
            assert "https://www.example.com/" not in [p["url"] for p in await browser_b.pages()]
        # Each browser's id, as its debugging port announces it through the relay.
        ids = set()
        for desktop in (a, b):
            async with httpx.AsyncClient(
                base_url=desktop.base_url, headers={"Authorization": f"Bearer {desktop.token}"}
            ) as http:
                version = (await http.get("/scalecua/chrome/9222/json/version")).json()
            ids.add(version["webSocketDebuggerUrl"].rsplit("/", 1)[1])
        assert len(ids) == 2
        # The ports are the desktop's own: a program of the desktop reaches them (as on the
        # VM); the host only through the relay above, and another desktop not at all.
        fetch = (
            'python3 -c "import urllib.request as u; '
            "print(u.urlopen('http://127.0.0.1:9222/json/version', timeout=2).read().decode())\""
        )
        inside = await ctl_a.execute(fetch, shell=True)
        assert any(i in inside["output"] for i in ids), inside
        with pytest.raises(httpx.HTTPError):
            async with httpx.AsyncClient(timeout=2) as raw:
                await raw.get("http://127.0.0.1:9222/json/version")
        # The profile is the VM's folder, seeded past its first run, Google searching.
        prefs = json.loads(
            await ctl_a.get_file("/home/user/.config/google-chrome/Default/Preferences")
        )
        engine = prefs["default_search_provider_data"]["template_url_data"]["short_name"]
        assert engine == "Google"
        assert await ctl_a.get_file("/home/user/.config/google-chrome/First Run") is not None


async def test_the_browser_reaches_served_names_and_its_own_loopback_only(
    pair: tuple[Desktop, Desktop], sites: LoopbackSites
) -> None:
    a, _ = pair
    async with a.controller() as ctl, await Browser.connect(ctl, timeout=30) as browser:
        await ctl.upload_file("/home/user/site/index.html", b"<title>served inside</title>")
        await ctl.launch(
            "python3 -m http.server 8765 --bind 127.0.0.1 --directory /home/user/site", shell=True
        )
        for _ in range(50):
            inside = await browser.new_page("http://127.0.0.1:8765/", timeout=15)
            if await inside.evaluate("document.title") == "served inside":
                break
            await asyncio.sleep(0.2)
        assert await inside.evaluate("document.title") == "served inside"
        # The host's loopback is not the browser's: its site there is never asked.
        await browser.new_page(f"http://127.0.0.1:{sites.http_port}/local", timeout=15)
        away = await browser.new_page("https://unmapped.example.net/", timeout=15)
        assert (
            await away.evaluate("location.href") != "https://unmapped.example.net/"
        )  # an error page
    assert ("127.0.0.1", "/local") not in sites.requests
    assert not any(host == "unmapped.example.net" for host, _ in sites.requests)


async def test_a_restarted_socat_listens_again_at_once(pair: tuple[Desktop, Desktop]) -> None:
    # Connections through port 9222 leave it in TIME_WAIT; a reset desktop's next task
    # starts socat on it again (without reuseaddr: "Address already in use").
    _, b = pair
    async with b.controller() as ctl:
        for _ in range(3):
            async with await Browser.connect(ctl, timeout=30) as browser:
                await browser.pages()
        await ctl.execute(["pkill", "-x", "socat"])
        await ctl.launch(SOCAT)
        async with await Browser.connect(ctl, timeout=10) as browser:
            assert await browser.pages()


async def test_pkill_chrome_stops_the_browser_after_it_saved_its_profile(
    pair: tuple[Desktop, Desktop],
) -> None:
    a, _ = pair
    async with a.controller() as ctl:
        async with await Browser.connect(ctl, timeout=30) as browser:  # it is running
            assert await browser.pages()
        stopped = await ctl.execute(["pkill", "chrome"])
        assert stopped["returncode"] == 0
        assert (await ctl.execute(["pgrep", "chrome"]))["returncode"] == 1
        prefs = json.loads(
            await ctl.get_file("/home/user/.config/google-chrome/Default/Preferences")
        )
        assert prefs["profile"]["exit_type"] != "Crashed"  # it exited cleanly, having saved
        with pytest.raises(ChromeError, match="does not answer"):
            await Browser.connect(ctl)
        await ctl.launch(CHROME)
        async with await Browser.connect(ctl, timeout=30) as browser:  # the same socat
            assert await browser.pages()


def test_host_map_entries() -> None:
    hosts = HostMap.parse("www.a.com:443=127.0.0.1:8443, *:80=127.0.0.1:8080 b.org=[::1]:9")
    assert hosts.lookup("WWW.A.com", 443) == ("127.0.0.1", 8443)
    assert hosts.lookup("www.a.com", 80) == ("127.0.0.1", 8080)  # the wildcard
    assert hosts.lookup("b.org", 1234) == ("::1", 9)
    assert hosts.lookup("c.org", 443) is None
    for bad in ("www.a.com", "a=b", "a:x=127.0.0.1:1", "=127.0.0.1:1"):
        with pytest.raises(ValueError, match="bad host map entry"):
            HostMap.parse(bad)
    assert [is_loopback(h) for h in ("localhost", "127.0.0.2", "::1", "a.localhost")] == [True] * 4
    assert [is_loopback(h) for h in ("example.com", "10.0.0.1", "localhost.example.com")] == [
        False
    ] * 3
