"""GIMP's getter with OSWorld's name: one of its config files from the desktop."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path
from runtime.envs.tasks.setup import DESKTOP_HOME
from runtime.errors import TaskError

__all__ = ["GETTERS", "GIMP_CONFIG_DIR", "get_gimp_config_file"]

GIMP_CONFIG_DIR = f"{DESKTOP_HOME}/.config/GIMP/2.10"  # GIMP 2.10, as on OSWorld's VM


async def get_gimp_config_file(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """A file of GIMP's config folder (`file_name`: gimprc, sessionrc, ...); None if absent.

    GIMP writes these when it quits, so tasks quit it (ctrl+q) in their postconfig first.
    """
    name = str(config["file_name"])
    if not name or "/" in name or name in (".", ".."):
        raise TaskError(f"gimp_config_file: {name!r} is not a file name")
    data = await ctx.controller.get_file(f"{GIMP_CONFIG_DIR}/{name}")
    if not data:  # OSWorld treats an empty file as a missing one
        return None
    local = dest_path(ctx, config.get("dest"), name)
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


GETTERS: dict[str, Getter] = {"gimp_config_file": get_gimp_config_file}
