"""KAlgebra's state as ScienceBoard's checks of it need it, read from Debian's stock app.

ScienceBoard's patched KAlgebra answers its checks over HTTP (`/vars`, `/func/2d`); the
stock app has no such server, so `kalgebra_state` reads what the app shows, through its
accessibility tree (the desktop's `kalgebra` wrapper turns that on, log included):

- the variables: the Variables panel's (name, value) rows. The panel shows only a complex
  value's real part (`conjugate(1+i)` shows `1`), so the value of each variable a check
  names is asked of KAlgebra itself: its name typed in the calculator's console, and the
  result read back from the log (`1+-i`, as ScienceBoard expects it);
- the 2D plots: the Functions panel's (name, expression) rows, as shown (`ln(x)^2`,
  `q->6*sin(3*q)`, `x^2/16+y^2/9=1`), and the plot resolution checked in the 2D Graph menu;
- whether a plot passes through a point: KAlgebra's own engine, `calgebra`, run in the
  desktop, evaluates each plot at the points (with the user's variables it uses defined as
  the console gave them). `metrics/kalgebra.py` applies the patched app's tolerance.

The parsers and the program built for calgebra are pure functions; the getter is the I/O.
"""

from __future__ import annotations

import asyncio
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, Getter
from runtime.errors import TaskError

__all__ = [
    "BUILTIN_VARIABLES",
    "GETTERS",
    "RESOLUTIONS",
    "TABS",
    "WINDOW_CLASS",
    "Plot",
    "PointProgram",
    "calgebra_results",
    "console_result",
    "get_kalgebra_state",
    "node_center",
    "plots_in",
    "point_program",
    "resolution_in",
    "tab_in",
    "switch_tab",
    "variables_in",
    "wait_for_kalgebra",
]

WINDOW_CLASS = "kalgebra"  # `wmctrl -lx`: kalgebra.kalgebra
# ScienceBoard's tab indexes (its `tab` step) -> the tab's name, and the key that selects it.
TABS = {0: ("Calculator", "alt+c"), 1: ("2D Graph", "alt+2"), 2: ("3D Graph", "alt+3"),
        3: ("Dictionary", "alt+i")}  # fmt: skip
# The 2D Graph menu's resolutions, as the patched app reports them (`res`: 3328 is Very Fine).
RESOLUTIONS = {"Poor": 416, "Normal": 832, "Fine": 1664, "Very Fine": 3328}
# What a fresh session's Variables panel already lists.
BUILTIN_VARIABLES = frozenset({"true", "false", "pi", "e", "euler", "i", "ans"})
_NS = "{https://accessibility.ubuntu.example.org/ns/"
_CHECKED = f"{_NS}state}}checked"
_SHOWING = f"{_NS}state}}showing"
_EDITABLE = f"{_NS}state}}editable"
_COORD = f"{_NS}component}}screencoord"
_SIZE = f"{_NS}component}}size"
_NAME = re.compile(r"[A-Za-z_]\w*")
_LAMBDA = re.compile(r"^\s*(\w+)\s*->")


@dataclass(frozen=True)
class Plot:
    """One row of the Functions panel: the plot's expression as shown, and whether it is on."""

    expression: str
    shown: bool


@dataclass(frozen=True)
class PointProgram:
    """Lines for calgebra evaluating one plot at points, and what each call must give."""

    lines: list[str]  # definitions first, then one call per point
    calls: int  # the last `calls` lines are the point calls
    targets: list[float]  # per point: the value a call gives on the curve


def _frame(root: ET.Element, name: str) -> ET.Element | None:
    return next((f for f in root.iter("frame") if f.get("name") == name), None)


def _pairs(table: ET.Element | None) -> list[tuple[ET.Element, ET.Element]]:
    cells = [] if table is None else list(table.iter("table-cell"))
    return list(zip(cells[::2], cells[1::2], strict=False))


def variables_in(tree: str) -> dict[str, str]:
    """The Variables panel's rows, name -> value as shown (a complex one: its real part)."""
    root = ET.fromstring(tree)
    frame = _frame(root, "Variables")
    table = None if frame is None else next(frame.iter("tree"), None)
    if table is None:  # the 2D Graph tab's own copy of the panel
        functions = _frame(root, "Functions")
        table = None if functions is None else next(functions.iter("table"), None)
    return {str(n.get("name")): str(v.get("name")) for n, v in _pairs(table)}


def plots_in(tree: str) -> list[Plot]:
    """The Functions panel's 2D plots, in order."""
    frame = _frame(ET.fromstring(tree), "Functions")
    table = None if frame is None else next(frame.iter("tree"), None)
    return [Plot(str(e.get("name")), n.get(_CHECKED) == "true") for n, e in _pairs(table)]


def resolution_in(tree: str) -> int | None:
    """The 2D plots' resolution checked in the 2D Graph menu (RESOLUTIONS), if one is."""
    for item in ET.fromstring(tree).iter("menu-item"):
        if item.get("name") in RESOLUTIONS and item.get(_CHECKED) == "true":
            return RESOLUTIONS[str(item.get("name"))]
    return None


def tab_in(tree: str) -> str | None:
    """The main window's selected tab (its tab list is named after it)."""
    for tabs in ET.fromstring(tree).iter("page-tab-list"):
        if {t.get("name") for t in tabs.iter("page-tab")} >= {"Calculator", "2D Graph"}:
            return tabs.get("name")
    return None


def console_result(tree: str, query: str) -> str | None:
    """The result the calculator's log shows for its last entry, if that entry is `query`.

    Each entry of the log is a paragraph: a link with the input (blanks dropped), `= `,
    then a link with the result."""
    doc = next(ET.fromstring(tree).iter("document-web"), None)
    entries = [] if doc is None else list(doc.iter("paragraph"))
    if not entries:
        return None
    links = [n for n in entries[-1] if n.tag == "link"]
    if len(links) < 2 or str(links[0].get("name")).replace(" ", "") != query.replace(" ", ""):
        return None
    return links[-1].get("name")


def node_center(node: ET.Element) -> tuple[int, int] | None:
    """The screen point at the middle of an accessible node, if it is on screen."""
    coord, size = node.get(_COORD), node.get(_SIZE)
    if node.get(_SHOWING) != "true" or not coord or not size:
        return None
    (x, y), (w, h) = (tuple(map(int, s.strip("()").split(","))) for s in (coord, size))
    return (x + w // 2, y + h // 2) if w > 0 and h > 0 else None


def point_program(expression: str, points: list[list[float]], defs: list[str]) -> PointProgram:
    """The calgebra lines that evaluate a 2D plot at each point, as the patched app tests it.

    `expression` is the plot as KAlgebra resolved it (a lambda such as `q->2*q` where the
    panel shows `r(2)`). A point (x, y) is on `y = f(x)` when f(x) is y (a polar `q->...`
    is read the same way), on `x = f(y)` (a lambda of y, or an expression in y alone) when
    f(y) is x, and on an implicit curve `L=R` when L-R is 0 at (x, y)."""
    match = _LAMBDA.match(expression)
    if "=" in expression and not match:
        left, right = expression.split("=", 1)
        f = f"(x, y)->({left})-({right})"
        calls = [f"f({_num(p[0])}, {_num(p[1])})" for p in points]
        targets = [0.0] * len(points)
    else:
        names = set(_NAME.findall(expression))
        var = match.group(1) if match else ("y" if "y" in names and "x" not in names else "x")
        f = expression if match else f"{var}->{expression}"
        axis = 1 if var == "y" else 0
        calls = [f"f({_num(p[axis])})" for p in points]
        targets = [float(p[1 - axis]) for p in points]
    return PointProgram([*defs, f"f := {f}", *calls], len(calls), targets)


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def calgebra_results(stderr: str) -> list[str]:
    """calgebra's results, one per input line: it writes each on stderr, an error as
    `Error:` followed by ` - reason` lines, and `Exit.` at the end of its input."""
    results: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(" - ") or not line.strip() or line.strip() == "Exit.":
            continue
        results.append(line.strip())
    return results


# -- driving the app (I/O) -----------------------------------------------------------------


async def _key(controller: Any, *keys: str) -> None:
    await controller.execute(["xdotool", "key", "--clearmodifiers", *keys])


async def wait_for_kalgebra(controller: Any, timeout: float = 60.0) -> None:  # noqa: ASYNC109
    """Wait until KAlgebra's window is up and its tabs are in its accessibility tree, then
    give it the keyboard (TaskError if it never shows)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        shown = await controller.execute(
            ["xdotool", "search", "--onlyvisible", "--class", WINDOW_CLASS]
        )
        if shown.get("returncode") == 0 and tab_in(await controller.accessibility_tree()):
            await controller.activate_window(WINDOW_CLASS, by_class=True)
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise TaskError(f"KAlgebra's window did not show within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def switch_tab(controller: Any, index: int) -> str:
    """Select one of KAlgebra's tabs by ScienceBoard's index, as its keyboard shortcut does;
    return the accessibility tree once it shows (TaskError if it does not)."""
    if index not in TABS:
        raise TaskError(f"KAlgebra has no tab {index!r} (0-3)")
    name, key = TABS[index]
    await wait_for_kalgebra(controller)
    await _key(controller, key)
    for _ in range(20):
        tree = await controller.accessibility_tree()
        if tab_in(tree) == name:
            return tree
        await asyncio.sleep(0.25)
    raise TaskError(f"KAlgebra's tab {name!r} did not open")


async def _ask_console(controller: Any, names: list[str]) -> dict[str, str]:
    """Each variable's value as KAlgebra's console prints it (its name typed, then Return)."""
    values: dict[str, str] = {}
    if not names:
        return values
    await switch_tab(controller, 0)
    for name in names:
        await _key(controller, "ctrl+a", "BackSpace")
        await controller.execute(["xdotool", "type", "--delay", "10", name])
        await _key(controller, "Return")
        for _ in range(20):
            await asyncio.sleep(0.25)
            value = console_result(await controller.accessibility_tree(), name)
            if value is not None:
                values[name] = value
                break
    return values


async def _calgebra(controller: Any, lines: list[str]) -> list[str]:
    """Run lines through calgebra in the desktop; its result for each line."""
    script = "\n".join(lines) + "\n"
    run = await controller.execute(
        ["bash", "-c", 'printf "%s" "$1" | calgebra 2>&1 >/dev/null', "calgebra", script],
        timeout=60,
    )
    results = calgebra_results(str(run.get("output") or ""))
    if len(results) != len(lines):
        raise TaskError(f"calgebra gave {len(results)} results for {len(lines)} lines")
    return results


async def get_kalgebra_state(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    """KAlgebra's state for a check: {"variables": panel, "values": {name: console value},
    "plots": [{"expression", "shown", "values", "targets"}], "resolution": int | None}.

    `vars` names the variables whose values to ask; `points` (a list of points) asks every
    2D plot's value at each (`values`, the targets they must be near in `targets`)."""
    controller = ctx.controller
    await wait_for_kalgebra(controller)
    tree = await controller.accessibility_tree()
    variables, plots = variables_in(tree), plots_in(tree)
    points = config.get("points")
    points = points if isinstance(points, list) else []
    used = {n for p in plots if points for n in _NAME.findall(p.expression)}
    user = [n for n in variables if n not in BUILTIN_VARIABLES and n in used]
    wanted = [str(n) for n in config.get("vars") or [] if str(n) in variables]
    values = await _ask_console(controller, list(dict.fromkeys([*wanted, *user])))
    defs = [f"{n} := {values[n]}" for n in user if n in values]
    resolved = (
        await _calgebra(controller, [*defs, *(p.expression for p in plots)])
        if points and plots
        else []
    )
    state_plots = []
    for k, plot in enumerate(plots):
        entry: dict[str, Any] = {"expression": plot.expression, "shown": plot.shown}
        if points:
            lam = resolved[len(defs) + k]
            expression = (
                lam if _LAMBDA.match(lam) and "=" not in plot.expression else plot.expression
            )
            program = point_program(expression, points, defs)
            entry["values"] = (await _calgebra(controller, program.lines))[-program.calls :]
            entry["targets"] = program.targets
        state_plots.append(entry)
    return {
        "variables": variables,
        "values": {n: values[n] for n in wanted if n in values},
        "plots": state_plots,
        "resolution": resolution_in(tree),
    }


GETTERS: dict[str, Getter] = {"kalgebra_state": get_kalgebra_state}
