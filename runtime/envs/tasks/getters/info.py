"""Getters of the desktop's state with OSWorld's names: an app window's size, the
wallpaper, the shortcuts on the Desktop, and values read out of a file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path
from runtime.envs.tasks.setup import DESKTOP_HOME
from runtime.errors import TaskError

__all__ = [
    "GETTERS",
    "last_row",
    "get_content_from_vm_file",
    "get_shortcuts_on_desktop",
    "get_vm_wallpaper",
    "get_vm_window_size",
]

# Run by the desktop's python (python-xlib): the client size of the first managed window
# whose WM_CLASS instance or class is the name, as OSWorld's /window_size reports it.
_WINDOW_SIZE = """
import json
from Xlib import X, display
wanted = {name!r}.lower()
d = display.Display()
root = d.screen().root
listed = root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
size = None
for wid in (listed.value if listed else []):
    try:
        window = d.create_resource_object("window", wid)
        names = [n.lower() for n in (window.get_wm_class() or ())]
        if wanted in names:
            geometry = window.get_geometry()
            size = {{"width": geometry.width, "height": geometry.height}}
            break
    except Exception:
        continue
print(json.dumps(size))
"""


async def get_vm_window_size(ctx: EvalContext, config: dict[str, Any]) -> dict[str, int] | None:
    """{"width", "height"} of the window of class `app_class_name`; None when none is open."""
    code = _WINDOW_SIZE.format(name=str(config["app_class_name"]))
    run = await ctx.controller.run_python(code)
    output = (run.get("output") or "").strip()
    if not output:
        raise TaskError(f"vm_window_size: the desktop could not list windows: {run.get('error')}")
    return json.loads(output.splitlines()[-1])


async def get_vm_wallpaper(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """The wallpaper image (GNOME's `picture-uri` setting) copied to `dest`; None if unset."""
    run = await ctx.controller.execute(
        ["gsettings", "get", "org.gnome.desktop.background", "picture-uri"]
    )
    uri = (run.get("output") or "").strip().strip("'\"")
    # GNOME stores the URI percent-encoded (a space is %20).
    path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
    if run.get("returncode") != 0 or not path.startswith("/"):
        return None
    data = await ctx.controller.get_file(path)
    if data is None:
        return None
    local = dest_path(ctx, config.get("dest"), path)
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


async def get_shortcuts_on_desktop(ctx: EvalContext, config: dict[str, Any]) -> dict[str, str]:
    """The text of every `.desktop` launcher on ~/Desktop, by file name."""
    folder = f"{DESKTOP_HOME}/Desktop"
    tree = await ctx.controller.list_directory(folder)
    shortcuts: dict[str, str] = {}
    for child in tree.get("children", []):
        name = child.get("name", "")
        if child.get("type") == "file" and name.endswith(".desktop"):
            data = await ctx.controller.get_file(f"{folder}/{name}")
            if data is not None:
                shortcuts[name] = data.decode("utf-8", errors="replace")
    return shortcuts


def last_row(path: str | Path) -> list[str]:
    """The last data row of a workbook's first sheet, each cell as text (an empty cell is
    "nan"), as OSWorld's pandas reading gives it; the first row is the header."""
    import openpyxl

    workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        rows = [r for r in workbook.worksheets[0].iter_rows(values_only=True) if any(r)]
    finally:
        workbook.close()
    if len(rows) < 2:
        raise ValueError(f"{Path(path).name} has no data row under its header")
    width = len(rows[0])
    cells = list(rows[-1][:width]) + [None] * (width - len(rows[-1]))
    return ["nan" if c is None else str(c) for c in cells]


async def get_content_from_vm_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """A value read out of a desktop file: `file_type` xlsx with `file_content` last_row."""
    kind, content = config["file_type"], config["file_content"]
    if (kind, content) != ("xlsx", "last_row"):
        raise TaskError(f"content_from_vm_file: {kind}/{content} is not supported (xlsx/last_row)")
    path = config["path"]
    data = await ctx.controller.get_file(path)
    if data is None:
        return None
    local = dest_path(ctx, None, path)
    await asyncio.to_thread(local.write_bytes, data)
    return await asyncio.to_thread(last_row, local)


GETTERS: dict[str, Getter] = {
    "vm_window_size": get_vm_window_size,
    "vm_wallpaper": get_vm_wallpaper,
    "shortcuts_on_desktop": get_shortcuts_on_desktop,
    "content_from_vm_file": get_content_from_vm_file,
}
