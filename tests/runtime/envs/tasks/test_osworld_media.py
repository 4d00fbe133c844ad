"""Real OSWorld GIMP and VLC tasks, unchanged, on one real desktop: each scores 0.0 untouched
and 1.0 after the keys an agent would press in the real app, with input files the test
makes and seeds under the task's download URLs. Then the media getters that no task
here reaches, against the same desktop.

The task files under tests/data/osworld/ are OSWorld's own (Apache-2.0), byte for byte and
played unchanged: the files they download are seeded into the file cache by their URLs
first (tests/osworld.py, as `scalecua tasks files add` does).
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw

from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.getters import EvalContext, get_state
from runtime.envs.tasks.getters.vlc import VIDEO_TYPES
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from tests.osworld import seeded_task

pytestmark = pytest.mark.desktop

GIMP_MIRROR = "gimp/72f83cdc-bf76-4531-9a1b-eb893a13f8aa"
GIMP_HIDE_DOCKS = "gimp/d52d6308-ec58-42b7-a2c9-de80e4837b2b"
VLC_PLAY = "vlc/59f21cfb-0120-4326-b255-a5b827b38967"
VLC_FULLSCREEN = "vlc/8d9fd4e2-6fdb-46b0-b9b9-02f06495c62f"


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _berry() -> bytes:
    """A small picture that is plainly not its own mirror image."""
    image = Image.new("RGB", (120, 80), (240, 240, 240))
    draw = ImageDraw.Draw(image)
    draw.rectangle((5, 5, 40, 70), fill=(200, 20, 60))
    draw.ellipse((70, 30, 100, 60), fill=(20, 120, 200))
    return _png(image)


def _clip(path: Path, seconds: int = 120) -> bytes:
    """A silent 160x120 MPEG-4 video with a moving bar, long enough to be still playing."""
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 5, (160, 120))
    for i in range(5 * seconds):
        frame = np.zeros((120, 160, 3), np.uint8)
        frame[:, (4 * i) % 152 : (4 * i) % 152 + 8] = (0, 200, 255)
        writer.write(frame)
    writer.release()
    return path.read_bytes()


def _keys(*keys: str, pause: float = 0.6) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in keys:
        out += [{"action": "key", "text": key}, {"action": "wait", "duration": pause}]
    return out


async def _click_on(ctl: Any, title: str) -> dict[str, Any]:
    """A left click in the middle of the visible window named `title` (a regex), as an agent
    clicks on an app it sees; the task's own setup click may have left it unfocused."""
    found = await ctl.execute(
        ["xdotool", "search", "--onlyvisible", "--name", title, "getwindowgeometry", "--shell"]
    )
    geometry = dict(line.split("=", 1) for line in found["output"].split() if "=" in line)
    width, height = await ctl.screen_size()
    x = int(geometry["X"]) + int(geometry["WIDTH"]) // 2
    y = int(geometry["Y"]) + int(geometry["HEIGHT"]) // 2
    return {"action": "left_click", "coordinate": [x * 1000 // width, y * 1000 // height]}


async def _scores(
    desktop: Any, task: Task, title: str, *turns: list[dict[str, Any]], vlc: bool = False
) -> list[Any]:
    """Set the task up on a reset desktop and wait for the app's window (`title`, a regex);
    then for each list of actions, click on that window (VLC) and play them, and evaluate.
    Returns the evaluations (`.score`, `.funcs`)."""
    await desktop.reset()
    out = []
    async with desktop.controller() as ctl:
        await run_setup(ctl, task)
        # Polled, not `--sync`: xdotool's search dies with BadWindow when a window it walks
        # closes meanwhile (GIMP's splash does while the image window opens).
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            shown = await ctl.execute(["xdotool", "search", "--onlyvisible", "--name", title])
            if shown["returncode"] == 0 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.5)
        assert shown["returncode"] == 0, f"no {title!r} window: {shown}"
        played: list[dict[str, Any]] = []
        for actions in turns:
            focus = [await _click_on(ctl, title)] if vlc and actions else []
            turn, errors = await play(ctl, [{"action": "wait", "duration": 1.0}, *focus, *actions])
            assert errors == [], errors
            played += turn
            out.append(await evaluate(ctl, task, played))
    return out


async def test_gimp_mirror_task_72f83cdc(task_desktop, tmp_path):
    """Mirror the picture: Image > Transform > Flip Horizontally by its menu keys; the task's
    postconfig exports the image through GIMP's Export dialog and compares it to the input."""
    task = seeded_task(GIMP_MIRROR, {"berry.png": _berry()})
    # its postconfig exports, so a second export would meet GIMP's "replace?" question:
    # one setup for the untouched state, another for the solved one
    [untouched] = await _scores(task_desktop, task, "– GIMP$", [])
    assert untouched.score == 0.0, untouched
    [solved] = await _scores(task_desktop, task, "– GIMP$", _keys("alt+i", "t", "h"))
    assert solved.score == 1.0, solved


async def test_gimp_hide_docks_task_d52d6308(task_desktop, tmp_path):
    """Hide the docks (Tab); the postconfig quits GIMP, which writes `(hide-docks yes)` to its
    sessionrc, read by the `gimp_config_file` getter."""
    task = seeded_task(GIMP_HIDE_DOCKS, {})
    window = "^GNU Image Manipulation Program$"
    [untouched] = await _scores(task_desktop, task, window, [])  # GIMP quits: two setups
    assert untouched.score == 0.0, untouched
    [solved] = await _scores(task_desktop, task, window, _keys("Tab"))
    assert solved.score == 1.0, solved


async def test_vlc_play_task_59f21cfb(task_desktop, tmp_path):
    """Play the video: ctrl+o, type its path, Return; scored through VLC's HTTP interface."""
    name = "Rick Astley - Never Gonna Give You Up (Official Music Video).mp4"
    task = seeded_task(VLC_PLAY, {name: _clip(tmp_path / "clip.mp4")})
    actions = [
        *_keys("ctrl+o", pause=2.0),
        {"action": "type", "text": f"/home/user/Desktop/{name}\n"},
        {"action": "wait", "duration": 3.0},
    ]
    untouched, solved = await _scores(
        task_desktop, task, "VLC media player$", [], actions, vlc=True
    )
    assert untouched.score == 0.0, untouched
    assert solved.score == 1.0, solved


async def test_vlc_fullscreen_task_8d9fd4e2(task_desktop, tmp_path):
    """Fill the screen with the playing video (f); scored by VLC's window size (the
    `vm_window_size` getter) against the screen's."""
    task = seeded_task(VLC_FULLSCREEN, {"Gen 2.mp4": _clip(tmp_path / "clip.mp4")})
    window = "^Gen 2.mp4 - VLC media player$"
    untouched, solved = await _scores(task_desktop, task, window, [], _keys("f"), vlc=True)
    assert untouched.score == 0.0, untouched
    assert solved.score == 1.0, solved


async def test_default_video_player_wallpaper_and_vlc_config_getters(task_desktop, tmp_path):
    """The getters no task above reaches, on the same desktop's real tools (xdg-mime,
    GNOME's settings through dconf, VLC's config path)."""
    await task_desktop.reset()
    async with task_desktop.controller() as ctl:
        ctx = EvalContext(ctl, tmp_path)
        # what `xdg-mime default APP TYPE` writes, for every type the getter asks about: the
        # first three to GIMP, the rest to VLC, so the answer is the majority, not the first
        types = [f"video/{t}" for t in VIDEO_TYPES]
        defaults = [f"{t}={'gimp' if i < 3 else 'vlc'}.desktop" for i, t in enumerate(types)]
        mimeapps = "\n".join(["[Default Applications]", *defaults, ""])
        await ctl.upload_file("/home/user/.config/mimeapps.list", mimeapps.encode())
        assert await get_state(ctx, {"type": "default_video_player"}) == "vlc.desktop\n"

        picture = _berry()
        await ctl.upload_file("/home/user/Pictures/my wallpaper.png", picture)
        uri = "file:///home/user/Pictures/my%20wallpaper.png"
        setting = ["gsettings", "set", "org.gnome.desktop.background", "picture-uri", uri]
        assert (await ctl.execute(setting))["returncode"] == 0
        wallpaper = await get_state(ctx, {"type": "vm_wallpaper", "dest": "wallpaper.png"})
        assert await asyncio.to_thread(Path(wallpaper).read_bytes) == picture

        seeded = await get_state(ctx, {"type": "vlc_config", "dest": "vlcrc"})  # as on the VM
        assert "extraintf=http" in await asyncio.to_thread(Path(seeded).read_text)
        await ctl.execute(["mkdir", "-p", "/home/user/.config/vlc"])
        await ctl.upload_file("/home/user/.config/vlc/vlcrc", b"[qt]\nqt-bgcone=0\n")
        vlcrc = await get_state(ctx, {"type": "vlc_config", "dest": "vlcrc"})
        assert METRICS["check_qt_bgcone"](vlcrc, {"expected_qt_bgcone": 0}) == 1.0
