"""Real OSWorld Calc tasks, unchanged, score 0.0 untouched and 1.0 solved on a real desktop.

One task per `compare_table` rule family beyond sheet data: pivot_table (1954cced), chart
(12382c62), sheet_print (0bf05a7d), sheet_fuzzy (multi_apps deec51c9), style (8b1ce5f2),
freeze (4188d3a4), zoom (1334ca3e) and data_validation (ecb0df7a). The task files are
OSWorld's (tests/data/osworld/), played unchanged: the files behind their Google Drive URLs
are seeded into the file cache first (tests/osworld.py, as `scalecua tasks files add` does),
built by this module: inputs with openpyxl, expected files with a headless LibreOffice Calc on the host
(calc_uno.py), so they are written by Calc as OSWorld's were. The printed-sheet CSVs that
sheet_print compares come from the task's own postconfig (`libreoffice --convert-to csv`
run in the desktop while Calc is open), and for the expected side from the same export.

Solutions: sheet_print and sheet_fuzzy are solved by real keystrokes; the others by
editing the open document through the running Calc's UNO interface (what its menus and
dialogs do: insert a pivot table, a chart, a validity list, a background colour, freeze
panes, set the zoom), after which the task's postconfig saves it with ctrl+s as on the VM.
Each task opens Calc once: the untouched and solved scores come from one setup.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from tests.osworld import osworld_json, seeded_task

pytestmark = pytest.mark.desktop

UNO_SCRIPT = Path(__file__).with_name("calc_uno.py")
RED = 0xFF0000


def _has_uno() -> bool:
    try:
        return (
            subprocess.run(["/usr/bin/python3", "-c", "import uno"], capture_output=True).returncode
            == 0
        )
    except OSError:
        return False


@dataclass
class Case:
    """A task, the files its URLs map to, how to make them, and how to solve it."""

    task: str  # <domain>/<id>
    files: list[str]  # local file names, one per URL of the task in order of appearance
    sheets: dict[str, list[tuple]]  # input workbooks: name -> rows of Sheet1
    golds: list[dict[str, Any]] = field(default_factory=list)  # calc_uno.py host jobs
    opened: str = ""  # the path the task opens on the desktop
    uno_ops: list[list[Any]] = field(default_factory=list)  # live solution through UNO
    actions: list[dict[str, Any]] = field(default_factory=list)  # live solution by keys
    zoom: int | None = None  # the input's zoom, set with openpyxl


def _keys(*keys: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in keys:
        out += [{"action": "key", "text": key}, {"action": "wait", "duration": 0.5}]
    return out


def _typed_rows(rows: list[tuple[str, ...]]) -> list[dict[str, Any]]:
    """Type rows from A2 on: values separated by Tab, each row ended by Enter."""
    out = _keys("ctrl+Home", "Down")
    for row in rows:
        out += [
            {"action": "type", "text": "\t".join(row) + "\n"},
            {"action": "wait", "duration": 0.4},
        ]
    return out


INVOICES = [("Invoice No.", "Customer", "Amount"), (1001, "Ann", 20), (1002, "Bob", 35),
            (1001, "Ann", 15), (1003, "Cy", 40), (1002, "Bob", 5), (1001, "Ann", 10)]  # fmt: skip
WEEKLY = [("Week", "Sales", "COGS"), ("Week 1", 120, 70), ("Week 2", 150, 80),
          ("Week 3", 90, 60), ("Week 4", 170, 95)]  # fmt: skip
IDS = [("Old ID", "New 7 Digit ID"), (123, None), (45678, None), (9, None), (3141, None)]
PAPERS = [("Title", "Model", "Organization"), (None, None, None)]
PAPER_ROWS = [("Qwen technical notes", "Qwen", "Alibaba"), ("Mistral seven billion", "Mistral", "Mistral AI"),
              ("Zephyr direct distillation", "Zephyr", "Hugging Face"), ("Llemma math models", "Llemma", "EleutherAI")]  # fmt: skip
CALENDAR = [("Day", "Date")] + [(d, f"2024-01-{i + 1:02d}") for i, d in
            enumerate(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Mon", "Tue"])]  # fmt: skip
WEEKEND_CELLS = [f"{c}{r}" for r in (7, 8) for c in "AB"]
TABLE = [("Name", "Dept", "Score")] + [
    (f"Person {i}", "Ops" if i % 2 else "Dev", 50 + i) for i in range(1, 9)
]
ORDERS = [("Order ID", "Item", "Qty", "Pass/Fail/Held")] + [
    (5000 + i, f"Item {i}", i % 4 + 1, None) for i in range(1, 29)
]

CASES = [
    Case(
        "libreoffice_calc/1954cced-e748-45c4-9c26-9855b97fbc5e",
        ["Invoices.xlsx", "Invoices_gold.xlsx"],
        {"Invoices.xlsx": INVOICES},
        golds=[
            {
                "file": "Invoices.xlsx",
                "save_as": "Invoices_gold.xlsx",
                "ops": [
                    ["insert_sheet", "Sheet2", 1],
                    ["pivot", "Sheet1", "A1:C7", "Sheet2", "A1", [0], [[0, "COUNT"]]],
                ],
            }
        ],  # fmt: skip
        opened="/home/user/Invoices.xlsx",
        uno_ops=[
            ["insert_sheet", "Sheet2", 1],
            ["pivot", "Sheet1", "A1:C7", "Sheet2", "A1", [0], [[0, "COUNT"]]],
        ],
    ),
    Case(
        "libreoffice_calc/12382c62-0cd1-4bf2-bdc8-1d20bf9b2371",
        ["WeeklySales.xlsx", "WeeklySales_gold.xlsx"],
        {"WeeklySales.xlsx": WEEKLY},
        golds=[
            {
                "file": "WeeklySales.xlsx",
                "save_as": "WeeklySales_gold.xlsx",
                "ops": [
                    ["insert_sheet", "Sheet2", 1],
                    ["chart", "Sheet2", "Sheet1", "A1:C5", "Sales & COGS", "bar"],
                ],
            }
        ],  # fmt: skip
        opened="/home/user/WeeklySales.xlsx",
        uno_ops=[
            ["insert_sheet", "Sheet2", 1],
            ["chart", "Sheet2", "Sheet1", "A1:C5", "Sales & COGS", "bar"],
        ],
    ),
    Case(
        "libreoffice_calc/0bf05a7d-b28b-44d2-955a-50b41e24012a",
        ["ids.xlsx", "ids_gold.xlsx", "ids_gold-Sheet1.csv"],
        {"ids.xlsx": IDS},
        golds=[
            {
                "file": "ids.xlsx",
                "save_as": "ids_gold.xlsx",
                "csv": "ids_gold.csv",
                "ops": [
                    ["formula", "Sheet1", f"B{r}", f'=TEXT(A{r};"0000000")'] for r in range(2, 6)
                ],
            }
        ],  # fmt: skip
        opened="/home/user/Customers_New_7digit_Id.xlsx",
        actions=_keys("ctrl+Home", "Down", "Right")
        + [{"action": "type", "text": f'=TEXT(A{r};"0000000")\n'} for r in range(2, 6)]
        + [{"action": "wait", "duration": 0.5}],
    ),
    Case(
        "multi_apps/deec51c9-3b1e-4b9e-993c-4776f20e8bb2",
        ["papers.xlsx", "papers_gold.xlsx"],
        {"papers.xlsx": PAPERS},
        golds=[
            {
                "file": "papers.xlsx",
                "save_as": "papers_gold.xlsx",
                "ops": [
                    ["text", "Sheet1", f"{col}{r + 2}", (v.upper() if col == "A" else v)]
                    for r, row in enumerate(PAPER_ROWS)
                    for col, v in zip("ABC", row, strict=True)
                ],
            }
        ],  # fmt: skip
        opened="/home/user/Desktop/New Large Language Models.xlsx",
        actions=_typed_rows(PAPER_ROWS),
    ),
    Case(
        "libreoffice_calc/8b1ce5f2-59d2-4dcc-b0b0-666a714b9a14",
        ["calendar.xlsx", "calendar_gold.xlsx"],
        {"calendar.xlsx": CALENDAR},
        golds=[
            {
                "file": "calendar.xlsx",
                "save_as": "calendar_gold.xlsx",
                "ops": [["back_color", "Sheet1", WEEKEND_CELLS, RED]],
            }
        ],  # fmt: skip
        opened="/home/user/Calendar_Highlight_Weekend_Days.xlsx",
        uno_ops=[["back_color", "Sheet1", WEEKEND_CELLS, RED]],
    ),
    Case(
        "libreoffice_calc/4188d3a4-077d-46b7-9c86-23e1a036f6c1",
        ["table.xlsx", "table_gold.xlsx"],
        {"table.xlsx": TABLE},
        golds=[{"file": "table.xlsx", "save_as": "table_gold.xlsx", "ops": [["freeze", 2, 1]]}],
        opened="/home/user/Freeze_row_column.xlsx",
        uno_ops=[["freeze", 2, 1]],
    ),
    Case(
        "libreoffice_calc/1334ca3e-f9e3-4db8-9ca7-b4c653be7d17",
        ["big.xlsx", "big_gold.xlsx"],
        {"big.xlsx": TABLE, "big_gold.xlsx": TABLE},
        opened="/home/user/Zoom_Out_Oversized_Cells.xlsx",
        uno_ops=[["zoom", 100]],
        zoom=300,
    ),
    Case(
        "libreoffice_calc/ecb0df7a-4e8d-4a03-b162-053391d3afaf",
        ["orders.xlsx", "orders_gold.xlsx"],
        {"orders.xlsx": ORDERS, "orders_gold.xlsx": ORDERS},
        opened="/home/user/Order_Id_Mark_Pass_Fail.xlsx",
        uno_ops=[["validation_list", "Sheet1", "D2:D29", ["Pass", "Fail", "Held"]]],
    ),
]


def _urls(node: Any) -> list[str]:
    """Every http(s) URL in a task, in document order."""
    if isinstance(node, dict):
        return [u for v in node.values() for u in _urls(v)]
    if isinstance(node, list):
        return [u for v in node for u in _urls(v)]
    return [node] if isinstance(node, str) and node.startswith("https://") else []


def _workbook(path: Path, rows: list[tuple], zoom: int | None) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for row in rows:
        ws.append(row)
    if zoom is not None:
        ws.sheet_view.zoomScale = zoom
    wb.save(path)


@pytest.fixture(scope="module")
def case_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's task folder: inputs by openpyxl, expected files by a headless Calc."""
    if not _has_uno():
        pytest.skip("these tests drive Calc through UNO: install Debian's python3-uno")
    root = tmp_path_factory.mktemp("osworld-calc")
    folders, jobs = {}, []
    for case in CASES:
        folder = root / case.task.split("/")[1][:8]
        folder.mkdir()
        for name, rows in case.sheets.items():
            _workbook(folder / name, rows, case.zoom)
        for job in case.golds:
            job = {
                k: (str(folder / v) if k in ("file", "save_as", "csv") else v)
                for k, v in job.items()
            }
            jobs.append(job)
        folders[case.task] = folder
    spec = root / "golds.json"
    spec.write_text(json.dumps({"jobs": jobs}))
    subprocess.run(
        ["/usr/bin/python3", str(UNO_SCRIPT), "host", str(spec)], check=True, timeout=120
    )
    return folders


async def _wait_loaded(ctl: Any, path: str) -> None:
    """Wait until Calc has loaded the document (its lock file exists), then a little more."""
    folder, name = path.rsplit("/", 1)
    lock = f"{folder}/.~lock.{name}#"
    script = f'for i in $(seq 100); do [ -e "{lock}" ] && exit 0; sleep 0.1; done; exit 1'
    assert (await ctl.execute(script, shell=True))["returncode"] == 0, f"{path} never loaded"
    await play(ctl, [{"action": "wait", "duration": 1.0}])


async def _solve_with_uno(ctl: Any, case: Case) -> None:
    """Edit the open document through the running Calc, as its menus would."""
    await ctl.upload_file("/home/user/.cache/calc_uno.py", UNO_SCRIPT.read_bytes())
    spec = json.dumps({"file": case.opened, "ops": case.uno_ops}).encode()
    await ctl.upload_file("/home/user/.cache/calc_uno_ops.json", spec)
    accept = await ctl.execute(["soffice", "--accept=pipe,name=scalecua;urp;"])
    assert accept["returncode"] == 0, accept
    run = await ctl.execute(
        [
            "/usr/bin/python3",
            "/home/user/.cache/calc_uno.py",
            "live",
            "/home/user/.cache/calc_uno_ops.json",
        ]
    )
    assert run["returncode"] == 0, run


@pytest.mark.parametrize("case", CASES, ids=[c.task.split("/")[1][:8] for c in CASES])
async def test_osworld_calc_task_scores_zero_untouched_and_one_solved(
    case: Case, case_folders: dict[str, Path], task_desktop: Any
) -> None:
    raw = osworld_json(case.task)
    urls = _urls([raw["config"], raw["evaluator"]])  # not `source`, a web page
    assert len(urls) == len(case.files), urls
    folder = case_folders[case.task]
    files = {url: folder / name for url, name in zip(urls, case.files, strict=True)}
    task = seeded_task(case.task, files)  # unchanged: its URLs are served from the cache
    await task_desktop.reset()
    async with task_desktop.controller(timeout=60.0) as ctl:
        await run_setup(ctl, task)
        await _wait_loaded(ctl, case.opened)
        untouched = await evaluate(ctl, task, [])
        if case.uno_ops:
            await _solve_with_uno(ctl, case)
            played: list[dict[str, Any]] = []
        else:
            played, errors = await play(ctl, case.actions)
            assert errors == [], errors
        solved = await evaluate(ctl, task, played)
    # 0.0 because a rule does not hold, not because the metric failed to read a file
    assert untouched.score == 0.0 and all(f.error is None for f in untouched.funcs), untouched
    assert solved.score == 1.0, solved
