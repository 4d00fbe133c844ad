"""VLC's getters with OSWorld's names: its saved settings, what it is playing (through its
HTTP interface, as OSWorld's VM has it enabled) and the desktop's default video player.

The status is read from inside the desktop (a small program run there), so the host never
connects to a port a task's desktop chose: VLC's HTTP interface answers on the desktop's
loopback at the port its command line (`--http-port`) or its vlcrc (`http-port=`) names,
8080 by default, with the password likewise (`password` on OSWorld's VM).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path
from runtime.envs.tasks.setup import DESKTOP_HOME

__all__ = [
    "GETTERS",
    "VIDEO_TYPES",
    "VLCRC",
    "get_default_video_player",
    "get_vlc_config",
    "get_vlc_playing_info",
]

VLCRC = f"{DESKTOP_HOME}/.config/vlc/vlcrc"

# Runs in the desktop's python3: find VLC's HTTP port and password, print status.xml.
_STATUS = r"""
import base64, os, sys, urllib.request
settings = {"http-port": "8080", "http-password": "password"}
try:
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and key in settings:
                settings[key] = value
except OSError:
    pass
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() not in ("vlc", "cvlc"):
                continue
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        continue
    for i, arg in enumerate(args):
        for key in settings:
            if arg.startswith(f"--{key}="):
                settings[key] = arg.split("=", 1)[1]
            elif arg == f"--{key}" and i + 1 < len(args):
                settings[key] = args[i + 1]
auth = base64.b64encode(f":{settings['http-password']}".encode()).decode()
url = f"http://127.0.0.1:{int(settings['http-port'])}/requests/status.xml"
request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        sys.stdout.write(response.read().decode("utf-8", errors="replace"))
except Exception as exc:
    sys.exit(f"VLC's HTTP interface at {url} did not answer: {exc}")
"""

# Video MIME subtypes whose default app decides the desktop's default video player.
VIDEO_TYPES = (
    "3gp 3gpp 3gpp2 avi divx dv fli flv mp2t mp4 mp4v-es mpeg mpeg-system msvideo ogg "
    "quicktime vnd.divx vnd.mpegurl vnd.rn-realvideo webm x-anim x-avi x-flc x-fli x-flv "
    "x-m4v x-matroska x-mpeg x-mpeg-system x-mpeg2 x-ms-asf x-ms-asf-plugin x-ms-asx x-ms-wm "
    "x-ms-wmv x-ms-wmx x-ms-wvx x-msvideo x-nsv x-ogm x-ogm+ogg x-theora x-theora+ogg"
).split()


async def _save(ctx: EvalContext, data: bytes, dest: str | None, name: str) -> FetchedFile:
    local = dest_path(ctx, dest, name)
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


async def get_vlc_config(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """VLC's saved settings file (vlcrc); None if VLC never saved one."""
    data = await ctx.controller.get_file(VLCRC)
    return None if data is None else await _save(ctx, data, config.get("dest"), "vlcrc")


async def get_vlc_playing_info(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """VLC's status.xml from its HTTP interface; None when VLC is not answering."""
    reply = await ctx.controller.execute(["python3", "-c", _STATUS, VLCRC], timeout=30)
    if reply.get("returncode") != 0 or not reply.get("output"):
        return None
    return await _save(ctx, reply["output"].encode(), config.get("dest"), "status.xml")


async def get_default_video_player(ctx: EvalContext, config: dict[str, Any]) -> str:
    """The desktop file most video types open with (`xdg-mime query default`), as that
    command prints it (`vlc.desktop` and its newline); `unknown` when none is set."""
    script = 'for t in "$@"; do printf "%s\\t" "$t"; xdg-mime query default "video/$t"; echo; done'
    reply = await ctx.controller.execute(["sh", "-c", script, "sh", *VIDEO_TYPES], timeout=60)
    apps: Counter[str] = Counter()
    for line in (reply.get("output") or "").splitlines():
        app = line.partition("\t")[2].strip()
        if app:
            apps[app] += 1
    return apps.most_common(1)[0][0] + "\n" if apps else "unknown"


GETTERS: dict[str, Getter] = {
    "vlc_config": get_vlc_config,
    "vlc_playing_info": get_vlc_playing_info,
    "default_video_player": get_default_video_player,
}
