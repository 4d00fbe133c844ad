"""Real OSWorld tasks of the general vocabulary, unchanged, on one real desktop.

Each task file is OSWorld's own (tests/data/osworld/<domain>/<id>.json, Apache-2.0), played
unchanged: its input files are made here and seeded into the file cache under its download
URLs (tests/osworld.py, as `scalecua tasks files add` does). Every task scores 0.0 untouched and 1.0 once solved by real actions (clicks,
keys and typing an agent could send), from one setup:

- thunderbird 2ad9387a: create two local folders in Thunderbird's UI; its postconfig keeps
  `ls -R` output as a file (`stdout`) that `cache_file` reads and `check_list` checks. The
  profile tarball the task downloads is built here in OSWorld's layout (an Outlook IMAP
  account and Local Folders), started offline, with DNS off and proxies on a dead
  loopback port, so Thunderbird never reaches the network.
- thunderbird 6766f2b8: a signature typed into Account Settings, read back from prefs.js
  (`check_thunderbird_prefs`).
- multi_apps 7f35355e: the median of a price column of a workbook open in Calc, written to
  result.txt by a command typed into a terminal (`compare_result_files`).
- os 23393935: copy every .jpg of a folder tree with a command typed into a terminal
  (`list_directory` + `check_moved_jpgs`).

Plus the desktop getters (window size, wallpaper, Desktop launchers) and
check_accessibility_tree on the desktop's own accessibility tree, on the same desktop.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import openpyxl
import pytest
from PIL import Image

from runtime.blobstore import LocalBlobStore
from runtime.envs.tasks.collect import collect, score_collected
from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.getters import GETTERS, EvalContext
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from tests.osworld import fetched_files, osworld_json, seeded_task

pytestmark = pytest.mark.desktop


def _seeded(domain: str, task_id: str, files: dict[str, bytes], folder: Path) -> Task:
    """OSWorld's task, unchanged, with the files it fetches seeded by URL."""
    return seeded_task(f"{domain}/{task_id}", files)


def _urls(domain: str, task_id: str) -> list[str]:
    return [url for url, _ in fetched_files(osworld_json(f"{domain}/{task_id}"))]


async def _solve(desktop, task: Task, steps: list[Any]) -> tuple[float, float, Any]:
    """Setup once; score untouched; play the steps (action lists, or awaitables of a
    controller as an agent looking at the screen would wait); score again."""
    await desktop.reset()
    async with desktop.controller() as ctl:
        await run_setup(ctl, task)
        untouched = await evaluate(ctl, task, [])
        played: list[dict[str, Any]] = []
        for step in steps:
            if callable(step):
                assert await step(ctl), f"the screen never showed {step.__qualname__}"
                continue
            done, errors = await play(ctl, step)
            assert errors == [], errors
            played += done
        solved = await evaluate(ctl, task, played)
    return untouched.score, solved.score, (played, solved)


def _window(*titles: str, timeout: float = 60.0):
    """A step that waits until the focused window's title holds one of `titles`."""

    async def wait(ctl) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            focus = await ctl.execute(["xdotool", "getwindowfocus", "getwindowname"])
            if any(t in focus.get("output", "") for t in titles):
                return True
            await asyncio.sleep(0.1)
        return False

    wait.__qualname__ = f"a window titled {' or '.join(titles)}"
    return wait


TERMINAL = ("Terminal", "xterm")  # the title of the terminal ctrl+alt+t opens


def _click(x: int, y: int, button: str = "left_click") -> dict[str, Any]:
    """A click at pixel (x, y) of the 1280x800 screen, on the action grid."""
    return {"action": button, "coordinate": [round(x * 1000 / 1280), round(y * 1000 / 800)]}


def _wait(seconds: float) -> dict[str, Any]:
    return {"action": "wait", "duration": seconds}


# -- Thunderbird ------------------------------------------------------------------------

PROFILE = "t5q2a5hp.default-release"  # the profile folder OSWorld's tasks name
ACCOUNT = "anonym-x2024@outlook.com"

THUNDERBIRD_PREFS: dict[str, Any] = {
    # OSWorld's profile: an Outlook IMAP account with an identity, and Local Folders.
    "mail.accountmanager.accounts": "account1,account2",
    "mail.accountmanager.defaultaccount": "account1",
    "mail.accountmanager.localfoldersserver": "server2",
    "mail.account.account1.identities": "id1",
    "mail.account.account1.server": "server1",
    "mail.account.account2.server": "server2",
    "mail.identity.id1.fullName": "Anonym Tester",
    "mail.identity.id1.useremail": ACCOUNT,
    "mail.identity.id1.smtpServer": "smtp1",
    "mail.identity.id1.valid": True,
    "mail.server.server1.type": "imap",
    "mail.server.server1.hostname": "outlook.office365.com",
    "mail.server.server1.name": ACCOUNT,
    "mail.server.server1.userName": ACCOUNT,
    "mail.server.server1.port": 993,
    "mail.server.server1.socketType": 3,
    "mail.server.server1.directory-rel": "[ProfD]ImapMail/outlook.office365.com",
    "mail.server.server1.check_new_mail": False,
    "mail.server.server1.login_at_startup": False,
    "mail.server.server2.type": "none",
    "mail.server.server2.hostname": "Local Folders",
    "mail.server.server2.name": "Local Folders",
    "mail.server.server2.userName": "nobody",
    "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
    "mail.smtpservers": "smtp1",
    "mail.smtp.defaultserver": "smtp1",
    "mail.smtpserver.smtp1.hostname": "smtp.office365.com",
    "mail.smtpserver.smtp1.port": 587,
    "mail.smtpserver.smtp1.username": ACCOUNT,
    # Past the first run, and nothing reaches the network: start offline, no DNS, every
    # protocol through a proxy on the discard port of loopback, no updates or telemetry.
    "offline.startup_state": 3,
    "network.dns.disabled": True,
    "network.proxy.type": 1,
    "network.proxy.http": "127.0.0.1",
    "network.proxy.http_port": 9,
    "network.proxy.ssl": "127.0.0.1",
    "network.proxy.ssl_port": 9,
    "network.proxy.socks": "127.0.0.1",
    "network.proxy.socks_port": 9,
    "network.proxy.socks_remote_dns": True,
    "network.proxy.no_proxies_on": "",
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "mailnews.start_page.enabled": False,
    "mail.shell.checkDefaultClient": False,
    "mail.provider.enabled": False,
    "mail.rights.version": 1,
    "app.update.enabled": False,
    "app.update.auto": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.enabled": False,
    "extensions.update.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "app.normandy.enabled": False,
}


def thunderbird_profile() -> bytes:
    """A thunderbird-profile.tar.gz in OSWorld's layout (~/.thunderbird with profiles.ini).

    compatibility.ini says the profile was last run from /usr/lib/thunderbird (as on
    OSWorld's VM), so this install adopts it instead of making a new default profile.
    """
    prefs = "".join(
        f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in THUNDERBIRD_PREFS.items()
    )
    files = {
        ".thunderbird/profiles.ini": (
            f"[Profile0]\nName=default-release\nIsRelative=1\nPath={PROFILE}\nDefault=1\n\n"
            "[General]\nStartWithLastProfile=1\nVersion=2\n"
        ),
        f".thunderbird/{PROFILE}/prefs.js": "// Mozilla User Preferences\n\n" + prefs,
        f".thunderbird/{PROFILE}/compatibility.ini": (
            "[Compatibility]\nLastVersion=115.6.0_20231215000000/20231215000000\n"
            "LastOSABI=Linux_x86_64-gcc3\nLastPlatformDir=/usr/lib/thunderbird\n"
            "LastAppDir=/usr/lib/thunderbird\n"
        ),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for folder in (".thunderbird", f".thunderbird/{PROFILE}"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, int(time.time())
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _new_local_folder(name: str) -> list[Any]:
    """Right-click Local Folders, New Folder…, type the name, Create Folder."""
    return [
        [_click(143, 141, "right_click"), _wait(0.8), _click(201, 243)],
        _window("New Folder", timeout=20),
        [{"action": "type", "text": name}, {"action": "key", "text": "Return"}, _wait(1.0)],
        _window("Mozilla Thunderbird", timeout=20),
    ]


async def test_thunderbird_local_folders_task(task_desktop, tmp_path):
    domain, task_id = "thunderbird", "2ad9387a-65d8-4e33-ad5b-7580065a27ca"
    (profile_url,) = _urls(domain, task_id)
    task = _seeded(domain, task_id, {profile_url: thunderbird_profile()}, tmp_path)
    steps = [
        _window("Mozilla Thunderbird"),  # the main window, with our profile's account
        [_wait(1.5)],
        *_new_local_folder("COMPANY"),
        *_new_local_folder("UNIVERSITY"),
    ]
    untouched, solved, (played, evaluation) = await _solve(task_desktop, task, steps)
    assert untouched == 0.0
    assert solved == 1.0, evaluation
    # The rollout path (collect on the desktop, score from the manifest) finds the
    # postconfig's stdout file as well.
    store = LocalBlobStore(tmp_path / "blobs")
    async with task_desktop.controller() as ctl:
        home = await ctl.execute(["ls", "-R", f"/home/user/.thunderbird/{PROFILE}/Mail"])
        assert "UNIVERSITY.msf" in home["output"], home
        manifest = await collect(ctl, task, played, store)
    assert (await score_collected(manifest, store)).score == 1.0


async def test_thunderbird_signature_task(task_desktop, tmp_path):
    domain, task_id = "thunderbird", "6766f2b8-8a72-417f-a9e5-56fcaa735837"
    (profile_url,) = _urls(domain, task_id)
    task = _seeded(domain, task_id, {profile_url: thunderbird_profile()}, tmp_path)
    steps = [
        _window("Mozilla Thunderbird"),
        [_wait(1.5), _click(1175, 75)],  # Account Settings
        _window("Account Settings", timeout=20),
        # The signature box, the signature, and closing the tab (which saves the settings).
        [_wait(1.0), _click(746, 600), {"action": "type", "text": "Anonym\nXYZ Lab"}],
        [{"action": "key", "text": "ctrl+w"}, _wait(1.5)],
    ]
    untouched, solved, (_, evaluation) = await _solve(task_desktop, task, steps)
    assert untouched == 0.0
    assert solved == 1.0, evaluation


# -- multi_apps -------------------------------------------------------------------------

PRICES = [("2024-01-01", 40), ("2024-01-02", None), ("2024-01-03", 44), ("2024-01-04", 39),
          ("2024-01-05", None), ("2024-01-06", 50)]  # fmt: skip
# Empty prices filled with the mean (43.25): 39 40 43.25 43.25 44 50 -> median 43.25.
MEDIAN = "43.25"

MEDIAN_COMMAND = (
    'python3 -c "import openpyxl, statistics as s; '
    "ws = openpyxl.load_workbook('Desktop/stock.xlsx').active; "
    "v = [r[1] for r in ws.iter_rows(min_row=2, values_only=True)]; "
    "m = s.mean([x for x in v if x is not None]); "
    'print(s.median([m if x is None else x for x in v]))" > ~/Desktop/result.txt\n'
)


def _stock_workbook() -> bytes:
    book = openpyxl.Workbook()
    book.active.append(("Date", "Price"))
    for row in PRICES:
        book.active.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


async def test_multi_apps_median_price_task(task_desktop, tmp_path):
    domain, task_id = "multi_apps", "7f35355e-02a6-45b5-b140-f0be698bcf85"
    stock_url, gold_url = _urls(domain, task_id)
    files = {stock_url: _stock_workbook(), gold_url: f"{MEDIAN}\n".encode()}
    task = _seeded(domain, task_id, files, tmp_path)
    steps = [
        _window("stock.xlsx"),
        [{"action": "key", "text": "ctrl+alt+t"}],
        _window(*TERMINAL),
        [{"action": "type", "text": MEDIAN_COMMAND}, _wait(2.0)],
    ]
    untouched, solved, (_, evaluation) = await _solve(task_desktop, task, steps)
    assert untouched == 0.0
    assert solved == 1.0, evaluation


# -- os ---------------------------------------------------------------------------------


def _image(fmt: str, colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(out, fmt)
    return out.getvalue()


async def test_os_copy_jpgs_task(task_desktop, tmp_path):
    domain, task_id = "os", "23393935-50c7-4a86-aeea-2b78fd089c5c"
    urls = _urls(domain, task_id)
    colours = ["red", "green", "blue", "white", "black"]
    task = osworld_json(f"{domain}/{task_id}")
    paths = [f["path"] for s in task["config"] if s["type"] == "download"
             for f in s["parameters"]["files"]]  # fmt: skip
    files = {
        url: _image("PNG" if path.endswith(".png") else "JPEG", colour)
        for url, path, colour in zip(urls, paths, colours, strict=True)
    }
    seeded = _seeded(domain, task_id, files, tmp_path)
    command = "find ~/Desktop/photos -name '*.jpg' -exec cp {} ~/Desktop/cpjpg/ \\;\n"
    steps = [
        [{"action": "key", "text": "ctrl+alt+t"}],
        _window(*TERMINAL),
        [{"action": "type", "text": command}, _wait(1.0)],
    ]
    untouched, solved, (_, evaluation) = await _solve(task_desktop, seeded, steps)
    assert untouched == 0.0
    assert solved == 1.0, evaluation


# -- desktop state getters --------------------------------------------------------------


async def test_desktop_state_getters(task_desktop, tmp_path):
    launcher = "[Desktop Entry]\nType=Link\nName=Play Puzzle Game 2048\nURL=https://x.test/\n"
    wallpaper = _image("PNG", "purple")
    await task_desktop.reset()
    async with task_desktop.controller() as ctl:
        ctx = EvalContext(ctl, tmp_path)
        assert await GETTERS["vm_window_size"](ctx, {"app_class_name": "xterm"}) is None
        await ctl.launch(["xterm", "-geometry", "80x24+10+10", "-title", "sizer"])
        assert await ctl.wait_for_window("sizer", 20)
        size = await GETTERS["vm_window_size"](ctx, {"app_class_name": "XTerm"})
        assert size is not None and 300 < size["width"] < 1280 and 200 < size["height"] < 800

        await ctl.upload_file("/home/user/Pictures/wall.png", wallpaper)
        uri = "'file:///home/user/Pictures/wall.png'"
        set_wallpaper = f"gsettings set org.gnome.desktop.background picture-uri {uri}"
        assert (await ctl.execute(set_wallpaper, shell=True))["returncode"] == 0
        fetched = await GETTERS["vm_wallpaper"](ctx, {"dest": "wallpaper.png"})
        assert (tmp_path / "wallpaper.png").read_bytes() == wallpaper  # noqa: ASYNC240
        assert fetched == str(tmp_path / "wallpaper.png")

        await ctl.upload_file("/home/user/Desktop/2048.desktop", launcher.encode())
        await ctl.upload_file("/home/user/Desktop/notes.txt", b"not a launcher")
        shortcuts = await GETTERS["shortcuts_on_desktop"](ctx, {})
        assert shortcuts == {"2048.desktop": launcher}

        # check_accessibility_tree's CSS selectors (namespaced states and attributes) on
        # the desktop's own tree, as OSWorld's tasks write them.
        await ctl.upload_file("/home/user/notes.txt", b"hello a11y\n")
        await ctl.open_file("/home/user/notes.txt")
        tree = await GETTERS["accessibility_tree"](ctx, {"type": "accessibility_tree"})
    editor = 'application[name=mousepad] text[st|focused="true"][attr|toolkit=gtk]'
    assert METRICS["check_accessibility_tree"](tree, [{"selectors": [editor]}]) == 1.0
    found = [{"selectors": [editor], "text": "hello a11y\n"}]
    assert METRICS["check_accessibility_tree"](tree, found) == 1.0
    assert (
        METRICS["check_accessibility_tree"](tree, [{"selectors": ["application[name=gimp]"]}])
        == 0.0
    )
