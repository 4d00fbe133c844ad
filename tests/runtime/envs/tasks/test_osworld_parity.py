"""A fresh desktop is in the state OSWorld's VM image is in, so OSWorld's tasks run unchanged.

The task below is written as OSWorld writes a Calc task: download the workbook, `open` it,
and in `postconfig` activate its window and press ctrl+s through pyautogui with no Return
after it. It carries no LibreOffice profile of its own: the image's (first run done, no
Tip of the Day, no what's-new bar, no keep-format question) must already be there.
"""

from __future__ import annotations

import json
from pathlib import Path

import openpyxl
import pytest

from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.runner import run_on_desktop

pytestmark = pytest.mark.desktop

PRICES = [("Item", "Price"), ("pen", 10), ("pad", 20), ("ink", 30), ("cup", 40), ("bag", 50)]


def _workbook(path: Path, rows: list[tuple]) -> None:
    wb = openpyxl.Workbook()
    for row in rows:
        wb.active.append(row)
    wb.save(path)


def _osworld_task(folder: Path) -> Path:
    """An OSWorld-format Calc task in `folder`: sum the prices into B7 and save."""
    _workbook(folder / "prices.xlsx", PRICES)
    _workbook(folder / "prices_gold.xlsx", [*PRICES, (None, 150)])
    task = {
        "id": "osworld-style-calc-sum",
        "snapshot": "libreoffice_calc",
        "instruction": "Put the sum of the prices in B7 and save the file.",
        "source": "tests",
        "config": [
            {
                "type": "download",
                "parameters": {
                    "files": [{"url": "file://prices.xlsx", "path": "/home/user/prices.xlsx"}]
                },
            },
            {"type": "open", "parameters": {"path": "/home/user/prices.xlsx"}},
        ],
        "related_apps": ["libreoffice_calc"],
        "evaluator": {
            "postconfig": [
                {
                    "type": "activate_window",
                    "parameters": {"window_name": "prices.xlsx - LibreOffice Calc", "strict": True},
                },
                {"type": "sleep", "parameters": {"seconds": 0.5}},
                {
                    "type": "execute",
                    "parameters": {
                        "command": [
                            "python",
                            "-c",
                            "import pyautogui; import time; pyautogui.hotkey('ctrl', 's'); "
                            "time.sleep(0.5);",
                        ]
                    },
                },
                {"type": "sleep", "parameters": {"seconds": 2}},
            ],
            "func": "compare_table",
            "result": {"type": "vm_file", "path": "/home/user/prices.xlsx", "dest": "prices.xlsx"},
            "expected": {"type": "cloud_file", "path": "prices_gold.xlsx", "dest": "gold.xlsx"},
            "options": {
                "rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]
            },
        },
    }
    (folder / "task.json").write_text(json.dumps(task, indent=1))
    return folder / "task.json"


def _keys(*keys: str) -> list[dict]:
    actions = []
    for key in keys:
        actions += [{"action": "key", "text": key}, {"action": "wait", "duration": 0.6}]
    return actions


async def test_an_osworld_calc_task_scores_with_its_correct_actions(task_desktop, tmp_path):
    task = load_task(_osworld_task(tmp_path))
    assert "registrymodifications" not in json.dumps(task.to_dict())
    # What an agent does after looking at the screen: go to B7, type the formula, save.
    actions = [
        {"action": "wait", "duration": 3.0},
        *_keys("ctrl+Home", *["Down"] * 6, "Right"),
        {"action": "type", "text": "=SUM(B2:B6)\n"},
        {"action": "wait", "duration": 0.6},
        *_keys("ctrl+s"),
        {"action": "wait", "duration": 1.5},
    ]
    await task_desktop.reset()
    result = await run_on_desktop(task_desktop, task, actions)
    assert result["step_errors"] == [], result
    assert result["score"] == 1.0, result
    # Only the document's window is up: no Tip of the Day, no keep-format question.
    async with task_desktop.controller() as ctl:
        windows = (await ctl.execute(["wmctrl", "-l"]))["output"].strip().splitlines()
    assert len(windows) == 1 and "prices.xlsx - LibreOffice Calc" in windows[0], windows


async def test_an_untouched_osworld_calc_task_scores_zero(task_desktop, tmp_path):
    task = load_task(_osworld_task(tmp_path))
    await task_desktop.reset()
    result = await run_on_desktop(task_desktop, task, [{"action": "wait", "duration": 3.0}])
    assert result["score"] == 0.0, result
