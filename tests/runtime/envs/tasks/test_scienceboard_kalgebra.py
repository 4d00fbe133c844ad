"""Real ScienceBoard KAlgebra tasks, JSON unchanged (tests/data/scienceboard), on one real
desktop with Debian's KAlgebra. Each scores 0.0 untouched, 0.0 wrongly solved and 1.0
after the keys and clicks an agent would give KAlgebra:

- A-01 (`var`): `p := conjugate(1+i)` typed in the console; the value is asked of KAlgebra
  (`1+-i`; the Variables panel shows only `1`);
- A-02 (`eqn`): y = ln(x)^2 added in the 2D Graph tab's Functions panel (its Add page),
  the points checked with calgebra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.envs.desktop.actions import pixels_to_grid
from runtime.envs.desktop.apps import APPS, missing_app
from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.getters.kalgebra import node_center, wait_for_kalgebra
from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from runtime.envs.tasks.setup.kalgebra import functions_node

pytestmark = pytest.mark.desktop

KALGEBRA = Path(__file__).resolve().parents[3] / "data" / "scienceboard" / "VM" / "KAlgebra"


@pytest.fixture(autouse=True)
def _kalgebra_here() -> None:
    assert missing_app(APPS["kalgebra"]) is None, missing_app(APPS["kalgebra"])


def _typed(line: str) -> list[dict[str, Any]]:
    return [
        {"action": "key", "text": "ctrl+a"},
        {"action": "type", "text": line},
        {"action": "key", "text": "Return"},
        {"action": "wait", "duration": 0.5},
    ]


async def test_a01_the_variable_is_read_as_kalgebra_prints_it(task_desktop):
    task = load_task(KALGEBRA / "A-01.json")
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await run_setup(controller, task)
        await wait_for_kalgebra(controller)
        untouched = await evaluate(controller, task, [])
        played, errors = await play(controller, _typed("p := 1+i"))
        wrong = await evaluate(controller, task, played)
        played, errors2 = await play(controller, _typed("p := conjugate(1+i)"))
        solved = await evaluate(controller, task, played)
    assert errors == errors2 == []
    assert (untouched.score, wrong.score, solved.score) == (0.0, 0.0, 1.0), (wrong, solved)


async def _on_grid(controller: Any, tree: str, tag: str, name: str | None = None) -> list[int]:
    """Where an agent reading the tree clicks a node of the Functions panel (on the grid)."""
    center = node_center(functions_node(tree, tag, name))  # type: ignore[arg-type]
    assert center is not None, (tag, name)
    return list(pixels_to_grid(center, await controller.screen_size()))


async def _plot(controller: Any, expression: str) -> list[dict[str, Any]]:
    """An agent's clicks and keys adding a 2D plot in the Functions panel's Add page."""
    add = await _on_grid(controller, await controller.accessibility_tree(), "page-tab", "Add")
    opened = [{"action": "left_click", "coordinate": add}, {"action": "wait", "duration": 1}]
    played, _ = await play(controller, opened)
    tree = await controller.accessibility_tree()
    line = await _on_grid(controller, tree, "text")
    ok = await _on_grid(controller, tree, "push-button", "OK")
    actions = [
        {"action": "left_click", "coordinate": line},
        {"action": "type", "text": expression},
        {"action": "wait", "duration": 0.5},
        {"action": "left_click", "coordinate": ok},
        {"action": "wait", "duration": 0.5},
    ]
    more, errors = await play(controller, actions)
    assert errors == []
    return played + more


async def test_a02_a_plot_added_in_the_2d_tab_is_checked_at_the_points(task_desktop):
    task = load_task(KALGEBRA / "A-02.json")
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await run_setup(controller, task)
        untouched = await evaluate(controller, task, [])
        played = await _plot(controller, "ln(x)")
        wrong = await evaluate(controller, task, played)
        played += await _plot(controller, "ln(x)^2")
        solved = await evaluate(controller, task, played)
    assert (untouched.score, wrong.score, solved.score) == (0.0, 0.0, 1.0), (wrong, solved)
