"""Play an action list on a desktop and score it: setup, actions, evaluation.

    result = await run_task(task, actions)                 # starts and stops its own desktop
    result = await run_on_desktop(desktop, task, actions)  # on a desktop you hold (a pool's)

The result is a JSON-ready dict with at least `score` and `steps`, plus the evaluation's
per-func details and any step that the desktop refused.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.setup import run_setup
from runtime.errors import TaskError

__all__ = ["check_actions", "check_solution", "play", "run_on_desktop", "run_task"]


def check_actions(actions: Any) -> list[dict[str, Any]]:
    """Return actions if it is a JSON list of action objects, else raise TaskError."""
    if not isinstance(actions, list) or not all(
        isinstance(a, dict) and isinstance(a.get("action"), str) for a in actions
    ):
        raise TaskError('actions must be a JSON list of objects like {"action": "key", ...}')
    return actions


async def play(
    controller: Any, actions: list[dict[str, Any]], screenshots: Path | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Play actions until the list ends or one is terminal; return (played, step errors)."""
    played: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for i, action in enumerate(actions):
        result = await controller.step(action)
        played.append(action)
        if not result.ok:
            errors.append({"step": i, "action": action.get("action"), "error": result.error})
        if screenshots is not None:
            name = f"{i + 1:03d}_{action.get('action')}.png"
            await _save(screenshots / name, await controller.screenshot())
        if result.terminal:
            break
    return played, errors


async def run_on_desktop(
    desktop: Any,
    task: Task,
    actions: list[dict[str, Any]] | None = None,
    screenshots: Path | None = None,
) -> dict[str, Any]:
    """Run task's setup on a (fresh) desktop, play actions, evaluate; return the result dict."""
    actions = check_actions(list(actions or []))
    if screenshots is not None:
        await asyncio.to_thread(screenshots.mkdir, parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    async with desktop.controller() as controller:
        t0 = time.monotonic()
        await run_setup(controller, task)
        timings["setup"] = time.monotonic() - t0
        if screenshots is not None:
            await _save(screenshots / "000_setup.png", await controller.screenshot())
        t1 = time.monotonic()
        played, errors = await play(controller, actions, screenshots)
        timings["actions"] = time.monotonic() - t1
        t2 = time.monotonic()
        evaluation = await evaluate(controller, task, played)
        timings["evaluate"] = time.monotonic() - t2
    return {
        "task_id": task.id,
        "score": evaluation.score,
        "steps": len(played),
        "reason": evaluation.reason,
        "funcs": [f.__dict__ for f in evaluation.funcs],
        "step_errors": errors,
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }


async def run_task(
    task: Task, actions: list[dict[str, Any]] | None = None, screenshots: Path | None = None
) -> dict[str, Any]:
    """Start a desktop, run the task on it with actions, stop it, and return the result."""
    from runtime.envs.desktop.pool import desktop_provider

    async with desktop_provider().started() as desktop:
        return await run_on_desktop(desktop, task, actions, screenshots)


async def check_solution(
    desktop: Any, task: Task, solution: list[dict[str, Any]]
) -> dict[str, Any]:
    """Score a task's untouched state, then play solution on it and score again.

    A sound task scores 0.0 before anything is done and 1.0 after its solution; both
    come from one setup, since the evaluation only reads the desktop.
    """
    solution = check_actions(solution)
    async with desktop.controller() as controller:
        await run_setup(controller, task)
        untouched = await evaluate(controller, task, [])
        played, errors = await play(controller, solution)
        solved = await evaluate(controller, task, played)
    return {
        "task_id": task.id,
        "untouched": untouched.score,
        "solved": solved.score,
        "steps": len(played),
        "funcs": [f.__dict__ for f in solved.funcs],
        "step_errors": errors,
    }


async def _save(path: Path, png: bytes) -> None:
    await asyncio.to_thread(path.write_bytes, png)
