"""What the desktop shows, with OSWorld's getter names: an app window's size and the
wallpaper. OSWorld's VM server answers these itself (`/window_size`, `/wallpaper`); here a
small program run inside the desktop reads the X window list or GNOME's setting.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path

__all__ = ["GETTERS"]

# Runs in the desktop's python3 (python-xlib, as on OSWorld's VM): the size of the first
# managed window whose WM_CLASS (instance or class) is the given name, case-insensitively.
_WINDOW_SIZE = r"""
import json, sys
from Xlib import X, display
d = display.Display()
name = sys.argv[1].lower()
clients = d.screen().root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
for wid in (clients.value if clients else []):
    window = d.create_resource_object("window", wid)
    try:
        wm_class = window.get_wm_class()
        if wm_class and name in [c.lower() for c in wm_class]:
            geometry = window.get_geometry()
            print(json.dumps({"width": geometry.width, "height": geometry.height}))
            break
    except Exception:  # a window closing while we look
        continue
"""


async def get_vm_window_size(ctx: EvalContext, config: dict[str, Any]) -> dict[str, int] | None:
    """{"width", "height"} of the app window of class `app_class_name`; None if none is up."""
    reply = await ctx.controller.execute(
        ["python3", "-c", _WINDOW_SIZE, str(config["app_class_name"])], timeout=30
    )
    output = (reply.get("output") or "").strip()
    return json.loads(output) if reply.get("returncode") == 0 and output else None


async def get_vm_wallpaper(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """The desktop's wallpaper image (GNOME's `org.gnome.desktop.background picture-uri`,
    which is what setting a wallpaper writes on OSWorld's VM); None if unset or missing."""
    reply = await ctx.controller.execute(
        ["gsettings", "get", "org.gnome.desktop.background", "picture-uri"], timeout=30
    )
    uri = (reply.get("output") or "").strip().strip("'\"")
    if reply.get("returncode") != 0 or not uri:
        return None
    path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
    data = await ctx.controller.get_file(path)
    if data is None:
        return None
    local = dest_path(ctx, config.get("dest"), path)
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


GETTERS: dict[str, Getter] = {
    "vm_window_size": get_vm_window_size,
    "vm_wallpaper": get_vm_wallpaper,
}
