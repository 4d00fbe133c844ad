"""ScienceBoard's KAlgebra setup steps, done through the stock app's own GUI (its patched
build takes them over HTTP): `sb_kalgebra_tab` {index} selects a tab with its keyboard
shortcut, `sb_kalgebra_func_2d` {expr} adds a 2D plot as a user does (2D Graph tab, the
Functions panel's Add page, the expression typed, OK), and `sb_kalgebra_func_3d` {expr}
plots a surface (3D Graph tab, the expression typed into its input line, Return). The tab
and the 2D plot are checked in the accessibility tree (TaskError if they did not take);
the surface cannot be (the 3D view is not exposed)."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from runtime.envs.tasks.getters.kalgebra import node_center, plots_in, switch_tab
from runtime.envs.tasks.setup.step import Step
from runtime.errors import TaskError

__all__ = ["STEPS", "functions_node"]

_SHOWING = "{https://accessibility.ubuntu.example.org/ns/state}showing"
_EDITABLE = "{https://accessibility.ubuntu.example.org/ns/state}editable"


async def _tab(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    index = params["index"]
    if not isinstance(index, int):
        raise TaskError("sb_kalgebra_tab needs an integer `index`")
    await switch_tab(controller, index)


def functions_node(tree: str, tag: str, name: str | None = None) -> ET.Element | None:
    """The first node of the Functions panel with this role (and name) that is on screen."""
    frame = next(
        (f for f in ET.fromstring(tree).iter("frame") if f.get("name") == "Functions"), None
    )
    for node in [] if frame is None else frame.iter(tag):
        if (name is None or node.get("name") == name) and node_center(node):
            if tag != "text" or node.get(_EDITABLE) == "true":
                return node
    return None


async def _click(controller: Any, tree: str, tag: str, name: str | None = None) -> None:
    node = functions_node(tree, tag, name)
    if node is None:
        raise TaskError(f"KAlgebra's Functions panel shows no {tag} {name or ''}".rstrip())
    x, y = node_center(node) or (0, 0)
    await controller.execute(["xdotool", "mousemove", str(x), str(y), "click", "1"])
    await asyncio.sleep(0.6)  # the page the click opens is in the tree only then


async def _func_2d(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    expr = params["expr"]
    if not isinstance(expr, str) or not expr:
        raise TaskError("sb_kalgebra_func_2d needs an `expr`")
    tree = await switch_tab(controller, 1)
    before = len(plots_in(tree))
    await _click(controller, tree, "page-tab", "Add")
    await _click(controller, await controller.accessibility_tree(), "text")
    await controller.execute(["xdotool", "key", "ctrl+a", "BackSpace"])
    await controller.execute(["xdotool", "type", "--delay", "10", expr])
    await asyncio.sleep(0.3)
    await _click(controller, await controller.accessibility_tree(), "push-button", "OK")
    for _ in range(20):
        tree = await controller.accessibility_tree()
        if len(plots_in(tree)) > before:
            return
        await asyncio.sleep(0.25)
    raise TaskError(f"KAlgebra did not add the 2D plot {expr!r}")


async def _func_3d(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    expr = params["expr"]
    if not isinstance(expr, str) or not expr:
        raise TaskError("sb_kalgebra_func_3d needs an `expr`")
    await switch_tab(controller, 2)  # its input line has the keyboard
    await controller.execute(["xdotool", "key", "ctrl+a", "BackSpace"])
    await controller.execute(["xdotool", "type", "--delay", "10", expr])
    await controller.execute(["xdotool", "key", "Return"])
    await asyncio.sleep(0.5)


STEPS: dict[str, Step] = {
    "sb_kalgebra_tab": _tab,
    "sb_kalgebra_func_2d": _func_2d,
    "sb_kalgebra_func_3d": _func_3d,
}
