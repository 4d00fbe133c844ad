"""OSWorld task 7688b85f (os), unchanged: its setup makes `done/` with a second `sudo` that
relies on the first one's password in the same shell, as the VM's sudo remembers it."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.runner import run_on_desktop

pytestmark = pytest.mark.desktop

TASK = Path(__file__).parents[3] / "data/osworld/os/7688b85f-87a4-4e4a-b2f8-f3d6c3f29b82.json"


async def test_moving_todo_into_done_scores_one(task_desktop) -> None:
    # What an agent does: open a terminal (ctrl+alt+t, as on the VM) and move the file.
    actions = [
        {"action": "key", "text": "ctrl+alt+t"},
        {"action": "wait", "duration": 2.0},
        {"action": "type", "text": "mv ~/Desktop/todo.txt ~/Desktop/done/\n"},
        {"action": "wait", "duration": 1.0},
    ]
    await task_desktop.reset()
    result = await run_on_desktop(task_desktop, load_task(TASK), actions)
    assert result["step_errors"] == [] and result["score"] == 1.0, result


async def test_untouched_scores_zero(task_desktop) -> None:
    await task_desktop.reset()
    result = await run_on_desktop(task_desktop, load_task(TASK), [])
    assert result["score"] == 0.0, result
    async with task_desktop.controller() as ctl:  # the setup itself worked: both exist
        listing = await ctl.execute("ls -d ~/Desktop/todo.txt ~/Desktop/done", shell=True)
    assert listing["returncode"] == 0, listing
