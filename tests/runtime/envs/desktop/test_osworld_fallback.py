"""Acting on a server without our /scalecua/action route (an OSWorld VM): pyautogui via /execute."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from runtime.envs.desktop.controller import DesktopController
from runtime.envs.desktop.lifecycle import Desktop
from runtime.envs.desktop.pyautogui_actions import action_command, pyautogui_key

pytestmark = pytest.mark.desktop


def test_generated_commands_embed_values_safely() -> None:
    hostile = "'); import os; os.system('touch /tmp/x') #"
    argv = action_command({"action": "type", "text": hostile})
    assert argv[:2] == ["python", "-c"] and argv[3] == hostile and hostile not in argv[2]
    key = action_command({"action": "key", "combos": [[0xFFE3, ord("s")]], "text": "ctrl+s"})
    assert key[:2] == ["python", "-c"] and "pyautogui.hotkey(*['ctrl', 's'])" in key[2]
    assert pyautogui_key(0xFF0D) == "enter" and pyautogui_key(ord("A")) == "a"


@pytest.fixture
async def fallback(desktop: Desktop, ctl: DesktopController) -> AsyncIterator[DesktopController]:
    """A controller that acts through /execute, as it must on an OSWorld VM."""
    async with DesktopController(desktop.base_url, desktop.token, native_actions=False) as c:
        yield c


async def test_pointer_actions_through_pyautogui(fallback: DesktopController, xev) -> None:
    clicked = await fallback.step({"action": "double_click", "coordinate": [250, 750]})
    assert clicked.ok, clicked.error
    assert clicked.output == [250, 750]
    scrolled = await fallback.step(
        {"action": "scroll", "coordinate": [500, 500], "scroll_direction": "up", "scroll_amount": 2}
    )
    assert scrolled.ok, scrolled.error
    presses = await xev.events(("ButtonPress",))
    assert [(e.button, e.root) for e in presses] == [
        (1, (320, 600)),
        (1, (320, 600)),
        (4, (640, 400)),
        (4, (640, 400)),
    ]


async def test_keys_and_unicode_text_through_execute(
    fallback: DesktopController, ctl: DesktopController, wait_window, wait_file
) -> None:
    await ctl.launch(["xterm", "-T", "catbox", "-e", "sh", "-c", "cat > /home/user/vm.txt"])
    await wait_window(ctl, "catbox")
    text = "naïve café — 日本 $(id)"
    assert (await fallback.step({"action": "type", "text": text})).ok
    assert (await fallback.step({"action": "key", "text": "Return"})).ok
    assert (await fallback.step({"action": "key", "text": "ctrl+d"})).ok
    assert await wait_file(ctl, "/home/user/vm.txt", text)
    assert (await ctl.get_file("/home/user/vm.txt")).decode() == text + "\n"


async def test_controller_detects_a_server_without_our_route(desktop: Desktop, xev) -> None:
    # A proxy that forwards OSWorld's routes to the real server and hides /scalecua/*.
    async def forward(request: web.Request) -> web.Response:
        if request.path.startswith("/scalecua/"):
            return web.Response(status=404)
        async with httpx.AsyncClient(base_url=desktop.base_url) as upstream:
            r = await upstream.request(
                request.method,
                request.path,
                content=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            )
        return web.Response(body=r.content, status=r.status_code, content_type=None, headers={
            "Content-Type": r.headers.get("content-type", "application/octet-stream")
        })  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with DesktopController(url, desktop.token) as vm:
            result = await vm.step({"action": "right_click", "coordinate": [500, 500]})
            assert result.ok, result.error
            assert vm._native is False
            # An OSWorld VM's ports are reached at its own address.
            assert await vm.port_address(8080) == ("127.0.0.1", 8080)
    finally:
        await runner.cleanup()
    presses = await xev.events(("ButtonPress",))
    assert [(e.button, e.root) for e in presses] == [(3, (640, 400))]
