"""ScienceBoard's own setup steps (scienceboard.py maps its `initialize` onto these):
`touch` writes a text file, `opt` sets the depth of accessibility trees. KAlgebra's steps
are in kalgebra.py; those of the other patched apps (`sb_grassgis_map`, `sb_chimerax_open`,
...) are not here: coverage names them, and the apps they need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.envs.tasks.setup.step import Step
from runtime.errors import TaskError

__all__ = ["STEPS"]


async def _touch(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    path, text = params["path"], params["text"]
    if not isinstance(path, str) or not isinstance(text, str):
        raise TaskError("sb_touch needs a `path` and a `text`")
    await controller.upload_file(path, text.encode("utf-8"))


async def _opt(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    await controller.set_a11y_depth(int(params.get("depth", 50)))


STEPS: dict[str, Step] = {"sb_touch": _touch, "sb_opt": _opt}
