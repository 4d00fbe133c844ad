"""OSWorld's apps on a real desktop, started as its tasks start them.

`open` puts each file type in its app and waits for the window; VLC answers on its HTTP
interface as OSWorld's getters ask it; GIMP opens an image without first-run questions;
Thunderbird opens a profile unpacked as the tasks unpack theirs, without its account
wizard. Apps are slow to start, so each test proves several things on one desktop.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import wave

import cv2
import docx
import httpx
import numpy as np
import openpyxl
import pptx
import pytest
from PIL import Image, ImageCms

from runtime.envs.desktop.controller import DesktopController

pytestmark = pytest.mark.desktop

DESKTOP = "/home/user/Desktop"


def _office_files() -> dict[str, bytes]:
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[0]).shapes.title.text = "Hello slides"
    letter = docx.Document()
    letter.add_paragraph("Hello words")
    book = openpyxl.Workbook()
    book.active.append(["item", 1])
    out = {}
    for name, doc in (("talk.pptx", deck), ("letter.docx", letter), ("sheet.xlsx", book)):
        buf = io.BytesIO()
        doc.save(buf)
        out[name] = buf.getvalue()
    return out


def _image(fmt: str, icc: bool = False) -> bytes:
    buf = io.BytesIO()
    extra = {}
    if icc:  # an embedded colour profile: GIMP would ask whether to convert it
        extra["icc_profile"] = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.new("RGB", (64, 48), (200, 40, 40)).save(buf, fmt, **extra)
    return buf.getvalue()


def _video(tmp_path) -> bytes:
    path = str(tmp_path / "clip.mp4")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 10, (160, 120))
    for i in range(50):  # 5 s
        frame = np.zeros((120, 160, 3), np.uint8)
        frame[:, : 3 * i] = (0, 128, 255)
        writer.write(frame)
    writer.release()
    return (tmp_path / "clip.mp4").read_bytes()


def _sound() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * 8000 * 30)
    return buf.getvalue()


async def _windows(ctl: DesktopController) -> list[tuple[str, str]]:
    """(WM_CLASS, title) of every window (a WM_CLASS may hold spaces: the host name ends it)."""
    out = (await ctl.execute(["wmctrl", "-lx"]))["output"]
    host = (await ctl.execute(["hostname"]))["output"].strip()
    rows = [line.split(None, 2)[2].partition(f" {host} ") for line in out.splitlines()]
    return [(wm_class.strip(), title) for wm_class, _, title in rows]


async def test_open_puts_each_file_type_in_its_app(
    desktop, ctl: DesktopController, tmp_path
) -> None:
    files = {
        **_office_files(),
        "paper.pdf": _image("PDF"),
        "picture.png": _image("PNG"),
        "clip.mp4": _video(tmp_path),
        "notes.txt": b"some notes\n",
        "page.html": b"<html><head><title>Hello page</title></head><body>hi</body></html>",
    }
    for name, data in files.items():
        await ctl.upload_file(f"{DESKTOP}/{name}", data)
    await ctl.execute(["mkdir", "-p", "/home/user/Documents/Fundings/ecs"])
    expected = {  # path -> WM_CLASS of the window that must show it, as on OSWorld's VM
        f"{DESKTOP}/talk.pptx": "libreoffice.libreoffice-impress",
        f"{DESKTOP}/letter.docx": "libreoffice.libreoffice-writer",
        f"{DESKTOP}/sheet.xlsx": "libreoffice.libreoffice-calc",
        f"{DESKTOP}/clip.mp4": "vlc.vlc",
        f"{DESKTOP}/paper.pdf": "evince.Evince",
        f"{DESKTOP}/picture.png": "eog.Eog",
        "/home/user/Documents/Fundings/ecs": "org.gnome.Nautilus.org.gnome.Nautilus",
        f"{DESKTOP}/notes.txt": "mousepad.Mousepad",
        f"{DESKTOP}/page.html": ".Chromium-browser",  # the browser wrapper's chromium
    }
    for path, wm_class in expected.items():
        await ctl.open_file(path, timeout=60)  # raises unless the window showed up
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        # open_file takes a new window of the app's class after a moment even while its title
        # is still a placeholder (Nautilus' "Loading…" on a loaded machine): allow it to settle.
        for _ in range(50):
            windows = await _windows(ctl)
            shown = [c for c, title in windows if stem in title or "Hello page" in title]
            if any(c.endswith(wm_class) for c in shown):
                break
            await asyncio.sleep(0.2)
        assert any(c.endswith(wm_class) for c in shown), (path, "\n".join(map(str, windows)))
    # Chromium answers to google-chrome with its profile where OSWorld's tasks read Chrome's.
    assert (desktop.home / ".config/google-chrome/Default").is_dir()
    await desktop.reset()


async def test_vlc_answers_on_its_http_interface_as_osworlds_getters_ask(
    desktop, ctl: DesktopController, tmp_path
) -> None:
    await ctl.upload_file(f"{DESKTOP}/clip.mp4", _video(tmp_path))
    await ctl.upload_file(f"{DESKTOP}/tone.mp3", _sound())  # WAV inside: VLC plays by content
    # As OSWorld's vlc tasks launch it; no privacy question, no audio-output error.
    await ctl.launch(["vlc", "--start-time=1", f"{DESKTOP}/tone.mp3"])
    host, port = await ctl.port_address(8080)  # VLC's port, inside the desktop's network
    status = f"http://{host}:{port}/requests/status.xml"
    async with httpx.AsyncClient(timeout=5) as http:
        for _ in range(100):
            try:
                reply = await http.get(status, auth=("", "password"))
                if "<state>playing</state>" in reply.text:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
        assert reply.status_code == 200 and "<state>playing</state>" in reply.text, reply.text
        assert "tone.mp3" in reply.text
        assert (await http.get(status, auth=("", "wrong"))).status_code == 401
    titles = [title for c, title in await _windows(ctl) if c == "vlc.vlc"]
    assert titles == ["tone.mp3 - VLC media player"], titles
    # `pkill vlc`, as OSWorld's postconfigs do, finds it.
    assert (await ctl.execute(["pkill", "vlc"]))["returncode"] == 0
    # As on Ubuntu, VLC is not the default video player until someone makes it so.
    default = await ctl.execute(["xdg-mime", "query", "default", "video/mp4"])
    assert default["output"].strip() == "org.gnome.Totem.desktop", default
    await desktop.reset()


async def test_gimp_opens_an_image_without_first_run_questions(desktop, ctl, wait_window) -> None:
    await ctl.upload_file(f"{DESKTOP}/berry.png", _image("PNG", icc=True))
    await ctl.launch(["gimp", f"{DESKTOP}/berry.png"])
    await wait_window(ctl, "[berry]", 90)
    await asyncio.sleep(1.0)
    gimp = [title for c, title in await _windows(ctl) if c == "gimp.Gimp"]
    assert len(gimp) == 1, gimp  # no "Convert to RGB Working Space?", no tips
    await desktop.reset()


def _thunderbird_profile() -> bytes:
    """A profile archive shaped as OSWorld's thunderbird tasks ship theirs."""
    profile = "t5q2a5hp.default-release"
    prefs = {
        "mail.accountmanager.accounts": "account1,account2",
        "mail.accountmanager.defaultaccount": "account1",
        "mail.accountmanager.localfoldersserver": "server2",
        "mail.account.account1.server": "server1",
        "mail.account.account1.identities": "id1",
        "mail.account.account2.server": "server2",
        "mail.identity.id1.fullName": "Anonym Tester",
        "mail.identity.id1.useremail": "anonym-x2024@example.com",
        "mail.identity.id1.valid": True,
        "mail.server.server1.type": "pop3",
        "mail.server.server1.hostname": "pop.example.com",
        "mail.server.server1.name": "anonym-x2024@example.com",
        "mail.server.server1.userName": "anonym-x2024",
        "mail.server.server1.login_at_startup": False,
        "mail.server.server1.check_new_mail": False,
        "mail.server.server1.directory-rel": "[ProfD]Mail/pop.example.com",
        "mail.server.server2.type": "none",
        "mail.server.server2.hostname": "Local Folders",
        "mail.server.server2.name": "Local Folders",
        "mail.server.server2.userName": "nobody",
        "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
    }
    js = "".join(f"user_pref({_js(k)}, {_js(v)});\n" for k, v in prefs.items())
    install = f"Default={profile}\nLocked=1\n"
    files = {
        ".thunderbird/profiles.ini": f"[Profile0]\nName=default-release\nIsRelative=1\n"
        f"Path={profile}\nDefault=1\n\n[General]\nStartWithLastProfile=1\nVersion=2\n\n"
        f"[InstallFDC34C9F024745EB]\n{install}",
        ".thunderbird/installs.ini": f"[FDC34C9F024745EB]\n{install}",
        f".thunderbird/{profile}/prefs.js": js,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for folder in (".thunderbird", f".thunderbird/{profile}"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text.encode()), 0o600
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def _js(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else f'"{value}"'


async def test_thunderbird_opens_a_profile_unpacked_as_tasks_do_without_its_wizard(
    desktop, ctl: DesktopController
) -> None:
    # OSWorld's thunderbird tasks: download the archive, unpack it over ~, start thunderbird.
    await ctl.upload_file("/home/user/thunderbird-profile.tar.gz", _thunderbird_profile())
    unpack = await ctl.execute(
        "tar -xzv --recursive-unlink -f /home/user/thunderbird-profile.tar.gz -C /home/user/",
        shell=True,
    )
    assert unpack["returncode"] == 0, unpack
    await ctl.launch(["/usr/bin/thunderbird"])
    for _ in range(150):
        if await ctl.activate_window("Mail.thunderbird", by_class=True):  # as the tasks do
            break
        await asyncio.sleep(0.2)
    for _ in range(100):  # the account from the profile shows in the folder pane
        tree = await ctl.accessibility_tree()
        if "anonym-x2024@example.com" in tree:
            break
        await asyncio.sleep(0.3)
    assert "anonym-x2024@example.com" in tree
    assert "Add your email address" not in tree  # the account wizard's heading
    assert "Know your rights" not in tree
    # It used that profile: no other was made beside it.
    listing = await ctl.execute(["ls", "/home/user/.thunderbird"])
    profiles = [n for n in listing["output"].split() if "." in n and not n.endswith(".ini")]
    assert profiles == ["t5q2a5hp.default-release"], listing
    await desktop.reset()
