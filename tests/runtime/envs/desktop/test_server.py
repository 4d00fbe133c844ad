"""The desktop server's OSWorld API on a real desktop: shapes, files, windows, a11y, auth."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from runtime.envs.desktop.controller import DesktopController
from runtime.envs.desktop.lifecycle import Desktop
from runtime.errors import DesktopError

pytestmark = pytest.mark.desktop

ST = "{https://accessibility.ubuntu.example.org/ns/state}"


async def test_every_request_needs_the_token(desktop: Desktop) -> None:
    async with httpx.AsyncClient(base_url=desktop.base_url) as raw:
        assert (await raw.get("/platform")).status_code == 401
        wrong = {"Authorization": "Bearer " + "x" * len(desktop.token)}
        assert (await raw.get("/screenshot", headers=wrong)).status_code == 401
        executed = await raw.post(
            "/execute", json={"command": "touch /home/user/pwned", "shell": True}
        )
        assert executed.status_code == 401
        ok = {"X-Desktop-Token": desktop.token}
        assert (await raw.get("/platform", headers=ok)).text == "Linux"
    assert not (desktop.home / "pwned").exists()
    async with DesktopController(desktop.base_url, "wrong", retries=0) as bad:
        with pytest.raises(DesktopError, match="token"):
            await bad.screenshot()


async def test_server_listens_on_loopback_only(desktop: Desktop) -> None:
    assert desktop.base_url.startswith("http://127.0.0.1:")


async def test_observation_endpoints(ctl: DesktopController) -> None:
    assert await ctl.platform() == "Linux"
    assert await ctl.screen_size() == (1280, 800)
    assert await ctl.cursor_position() == (640, 400)  # reset parks the pointer mid-screen
    png = await ctl.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1280 and int.from_bytes(png[20:24], "big") == 800
    obs = await ctl.observe()
    assert obs.size == (1280, 800) and obs.a11y_tree is None and obs.screenshot[:4] == b"\x89PNG"


async def test_execute_has_osworlds_shape_and_environment(ctl: DesktopController) -> None:
    listed = await ctl.execute(["echo", "a b"])
    assert listed == {"status": "success", "output": "a b\n", "error": "", "returncode": 0}
    split = await ctl.execute("printf '%s|' one 'two three'")
    assert split["output"] == "one|two three|"
    shell = await ctl.execute("echo $HOME; pwd; exit 3", shell=True)
    assert shell["output"] == "/home/user\n/home/user\n" and shell["returncode"] == 3
    tilde = await ctl.execute(["ls", "-d", "~/Desktop"])
    assert tilde["output"].strip() == "/home/user/Desktop"
    err = await ctl.execute(["sh", "-c", "echo oops >&2; exit 1"])
    assert err["error"] == "oops\n" and err["returncode"] == 1
    missing = await ctl.execute(["no-such-program-here"])
    assert missing["status"] == "error" and "no-such-program-here" in missing["error"]
    slow = await ctl.execute("sleep 30", shell=True, timeout=0.5)
    assert slow["status"] == "error" and "timed out" in slow["error"]


async def test_commands_written_for_osworlds_vm_work_unchanged(ctl: DesktopController) -> None:
    gui = await ctl.execute(["python", "-c", "import pyautogui; print(pyautogui.size())"])
    assert gui["output"].strip() == "Size(width=1280, height=800)", gui
    sudo = await ctl.execute("echo 'password' | sudo -S touch ~/Desktop/by-sudo", shell=True)
    assert sudo["returncode"] == 0, sudo
    assert await ctl.get_file("/home/user/Desktop/by-sudo") == b""
    # As on the VM: the rest of stdin reaches the command, and a wrong password is refused.
    piped = await ctl.execute(
        "printf 'password\\nrest\\n' | sudo -S -E sh -c 'id -u; cat'", shell=True
    )
    assert piped["returncode"] == 0 and piped["output"] == "0\nrest\n", piped
    wrong = await ctl.execute("echo nope | sudo -S touch ~/Desktop/wrong", shell=True)
    assert wrong["returncode"] != 0 and "incorrect password" in wrong["error"], wrong
    assert await ctl.get_file("/home/user/Desktop/wrong") is None
    py = await ctl.run_python("import os; print(os.environ['HOME'])")
    assert py["status"] == "success" and py["output"] == "/home/user\n" and py["return_code"] == 0
    bad_py = await ctl.run_python("raise SystemExit(4)")
    assert bad_py["status"] == "error" and bad_py["return_code"] == 4
    script = await ctl.run_bash_script(
        "cd Documents && pwd && echo err >&2", working_dir="/home/user"
    )
    assert script["status"] == "success" and script["output"] == "/home/user/Documents\n"
    assert script["error"] == "err\n" and script["returncode"] == 0


async def test_sudo_in_a_terminal_asks_for_the_vm_password(
    ctl: DesktopController, wait_window, wait_file
) -> None:
    assert (await ctl.step({"action": "key", "text": "ctrl+alt+t"})).ok
    await wait_window(ctl, "xterm")
    await asyncio.sleep(0.5)
    await ctl.step({"action": "type", "text": "sudo sh -c 'id -u > /home/user/as-root.txt'\n"})
    await asyncio.sleep(1.0)
    assert await ctl.get_file("/home/user/as-root.txt") is None  # waiting at the prompt
    await ctl.step({"action": "type", "text": "wrong\n"})
    await asyncio.sleep(1.0)
    assert await ctl.get_file("/home/user/as-root.txt") is None
    await ctl.step({"action": "type", "text": "password\n"})
    assert await wait_file(ctl, "/home/user/as-root.txt", "0\n")
    # As sudo does, the terminal is trusted for a while: no second prompt.
    await ctl.step({"action": "type", "text": "sudo touch /home/user/again.txt\n"})
    assert await wait_file(ctl, "/home/user/again.txt", "")


async def test_files_round_trip(ctl: DesktopController, desktop: Desktop) -> None:
    payload = bytes(range(256)) * 1000
    await ctl.upload_file("/home/user/Documents/deep/new/data.bin", payload)
    assert (desktop.home / "Documents/deep/new/data.bin").read_bytes() == payload
    assert await ctl.get_file("~/Documents/deep/new/data.bin") == payload
    assert await ctl.get_file("/home/user/nothing-here") is None
    tree = await ctl.list_directory("/home/user/Documents")
    assert tree["type"] == "directory" and tree["name"] == "Documents"
    deep = tree["children"][0]
    assert deep["name"] == "deep" and deep["children"][0]["children"] == [
        {"type": "file", "name": "data.bin"}
    ]
    assert "error" in await ctl.list_directory("/home/user/nothing-here")


async def test_download_from_file_url_and_the_desktops_own_loopback(
    ctl: DesktopController, tmp_path: Path
) -> None:
    # file:// URLs name files as the desktop sees them, read with the desktop's rights.
    await ctl.upload_file("/home/user/in put.csv", b"a,b\n1,2\n")
    await ctl.download_file(Path("/home/user/in put.csv").as_uri(), "~/Downloads/local.csv")
    assert await ctl.get_file("/home/user/Downloads/local.csv") == b"a,b\n1,2\n"
    host_only = tmp_path / "host.csv"
    host_only.write_text("host\n")
    with pytest.raises(DesktopError, match="no such file"):
        await ctl.download_file(host_only.as_uri(), "/home/user/x")
    with pytest.raises(DesktopError, match="ermission denied"):
        await ctl.download_file("file:///etc/shadow", "/home/user/shadow")
    assert await ctl.get_file("/home/user/shadow") is None

    # http(s) on loopback is the desktop's own: a server a program inside runs answers...
    await ctl.upload_file("/home/user/site/f.txt", b"served inside")
    await ctl.launch("python3 -m http.server 8765 --bind 127.0.0.1 --directory /home/user/site",
                     shell=True)  # fmt: skip
    for _ in range(100):
        try:
            await ctl.download_file("http://127.0.0.1:8765/f.txt", "/home/user/Downloads/web.txt")
            break
        except DesktopError:
            await asyncio.sleep(0.1)
    assert await ctl.get_file("/home/user/Downloads/web.txt") == b"served inside"
    with pytest.raises(DesktopError, match="404"):
        await ctl.download_file("http://127.0.0.1:8765/missing", "/home/user/x")

    # ...and a server on the host's loopback does not: the download is the desktop's.
    async def serve(_request: web.Request) -> web.Response:
        return web.Response(text="the host's")

    app = web.Application()
    app.router.add_get("/f.txt", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with pytest.raises(DesktopError, match="refused"):
            await ctl.download_file(f"http://127.0.0.1:{port}/f.txt", "/home/user/host.txt")
    finally:
        await runner.cleanup()
    assert await ctl.get_file("/home/user/host.txt") is None
    with pytest.raises(DesktopError, match="loopback"):
        await ctl.download_file("http://example.com/x.txt", "/home/user/x")
    with pytest.raises(DesktopError, match="no such file"):
        await ctl.download_file("file:///nonexistent/file.txt", "/home/user/x")


async def test_windows_open_activate_and_close(ctl: DesktopController, wait_window) -> None:
    await ctl.upload_file("/home/user/Documents/notes.txt", b"hello notes\n")
    await ctl.open_file("/home/user/Documents/notes.txt", timeout=30)
    assert "notes.txt" in await wait_window(ctl, "notes.txt")
    await ctl.launch("xterm -T second-window", shell=True)
    await wait_window(ctl, "second-window")
    assert await ctl.activate_window("notes.txt")
    await wait_window(ctl, "notes.txt")
    assert await ctl.close_window("second-window")
    for _ in range(50):
        if "second-window" not in (await ctl.execute(["wmctrl", "-l"]))["output"]:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("second-window did not close")
    assert not await ctl.activate_window("no window has this title")
    with pytest.raises(DesktopError, match="404"):
        await ctl.open_file("/home/user/missing.txt")


async def test_ctrl_alt_t_opens_a_terminal(ctl: DesktopController, wait_window) -> None:
    assert (await ctl.step({"action": "key", "text": "ctrl+alt+t"})).ok
    await wait_window(ctl, "xterm")


async def test_xdg_open_picks_the_app_by_extension(ctl: DesktopController, wait_window) -> None:
    await ctl.upload_file("/home/user/Documents/readme.txt", b"text\n")
    await ctl.launch(["xdg-open", "/home/user/Documents/readme.txt"])
    await wait_window(ctl, "readme.txt")


async def test_accessibility_tree_has_osworlds_shape_and_a_known_widget(
    ctl: DesktopController, wait_window
) -> None:
    await ctl.launch(["mousepad"])
    await wait_window(ctl, "Mousepad")
    await ctl.step({"action": "type", "text": "a11y probe"})
    await asyncio.sleep(0.3)
    root = ET.fromstring(await ctl.accessibility_tree())
    assert root.tag == "desktop-frame"
    apps = [a for a in root if a.tag == "application"]
    mousepad = next(a for a in apps if a.get("name", "").lower() == "mousepad")
    menus = {m.get("name") for m in mousepad.iter("menu")}
    assert "File" in menus
    frame = next(mousepad.iter("frame"))
    assert frame.get(f"{ST}showing") == "true"
    assert any(
        "a11y probe" in (t.text or "")
        for t in mousepad.iter()
        if t.tag in ("text", "document-text")
    )
    located = [
        e
        for e in mousepad.iter()
        if e.get("{https://accessibility.ubuntu.example.org/ns/component}screencoord")
    ]
    assert located, "showing widgets carry their screen position"


async def test_accessibility_tree_caps_a_calc_sheet(ctl: DesktopController, wait_window) -> None:
    await ctl.upload_file("/home/user/Documents/sheet.csv", b"alpha,beta\n1,2\n")
    await ctl.open_file("/home/user/Documents/sheet.csv", timeout=60)
    await wait_window(ctl, "sheet")
    tree = ET.fromstring(await ctl.accessibility_tree())
    tables = [t for t in tree.iter("table") if len(t)]
    assert tables, "Calc's sheet is in the tree"
    cells = [c for t in tables for c in t]
    assert 0 < len(cells) <= 1024
    assert all(c.get(f"{ST}showing") == "true" for c in cells)
    assert any((c.text or "").strip() == "alpha" for c in cells)


async def test_compact_tree_keeps_a_sheets_used_block_and_what_is_showing(
    ctl: DesktopController, wait_window
) -> None:
    import io

    import openpyxl

    from runtime.policy.observation import compact_observation

    book = openpyxl.Workbook()
    for row in (["alpha", "beta"], [1, 2]):
        book.active.append(row)
    data = io.BytesIO()
    book.save(data)  # xlsx, not csv: Calc opens it without an import dialog
    await ctl.upload_file("/home/user/Documents/sheet.xlsx", data.getvalue())
    await ctl.open_file("/home/user/Documents/sheet.xlsx", timeout=60)
    await wait_window(ctl, "sheet")
    await asyncio.sleep(1.0)  # the sheet's cells are exposed a moment after the frame
    full = ET.fromstring(await ctl.accessibility_tree())
    xml = await ctl.accessibility_tree(compact=True)
    compact = ET.fromstring(xml)
    cells = [c for t in compact.iter("table") for c in t]
    # The used block A1:B2 and a margin of empty cells around it, not the visible grid.
    assert {"alpha", "beta", "1", "2"} <= {(c.text or "").strip() for c in cells}
    assert len(cells) < len([c for t in full.iter("table") for c in t]) / 4
    assert len(list(compact.iter())) < len(list(full.iter()))
    text = compact_observation(xml, (1280, 800), None)
    assert "sheet" in text.splitlines()[0]
    assert "A1 alpha, B1 beta; A2 1, B2 2" in text
    assert "Selected cell: A1 'alpha'" in text


async def test_screenshot_shows_the_mouse_pointer(ctl: DesktopController) -> None:
    import io

    from PIL import Image

    def patch(png: bytes) -> bytes:
        # The pointer's hotspot is its top-left area: look just below-right of it.
        return Image.open(io.BytesIO(png)).convert("RGB").crop((128, 80, 148, 100)).tobytes()

    await ctl.step({"action": "mouse_move", "coordinate": [100, 100]})
    with_pointer = patch(await ctl.screenshot())
    await ctl.step({"action": "mouse_move", "coordinate": [900, 900]})
    without_pointer = patch(await ctl.screenshot())
    assert with_pointer != without_pointer
    assert len(set(without_pointer)) <= 3  # the bare background there is flat


async def test_terminals_log_their_sessions_and_gnome_terminal_exists(
    ctl: DesktopController, wait_file
) -> None:
    from runtime.envs.desktop.wrappers import TERMINAL_LOG_DIR

    await ctl.launch(["xterm", "-e", "sh", "-c", "echo hello-from-log; sleep 30"])
    await ctl.launch(["gnome-terminal", "--", "sh", "-c", "echo via-gnome > ~/gt.txt"])
    await ctl.launch(
        [
            "gnome-terminal",
            "--working-directory=/home/user/Documents",
            "-e",
            "sh -c 'pwd > ~/pwd.txt'",
        ]
    )
    assert await wait_file(ctl, "/home/user/gt.txt", "via-gnome\n", timeout=30)
    assert await wait_file(ctl, "/home/user/pwd.txt", "/home/user/Documents\n", timeout=30)
    for _ in range(100):
        found = await ctl.execute(f"cat {TERMINAL_LOG_DIR}/*.log", shell=True)
        if "hello-from-log" in found["output"]:
            break
        await asyncio.sleep(0.1)
    assert "hello-from-log" in found["output"]
