"""LibreOffice Calc families: a small table is open with the answer cell selected.

The sheet has an Item column and two number columns; the instruction names the column,
its range and the answer cell (already selected, so no navigation is needed). The reference
types a formula and saves: two turns. The workbook is written in setup by the desktop's
`python3` with openpyxl (scalecua desktops have it), with the answer cell as active cell.
"""

from __future__ import annotations

import random

from runtime.envs.tasks.families.base import (
    HOME,
    NOUNS,
    WORDS,
    Family,
    Instance,
    cell_equals,
    evaluator,
    open_spreadsheet,
)

__all__ = ["CALC_FAMILIES", "column_max", "column_sum"]

_HEADERS = tuple("Price Quantity Score Points Sales Hours Weight Cost Visits Votes".split())
_MAKE_SHEET = """import openpyxl
wb = openpyxl.Workbook()
ws = wb.active
for row in {rows!r}:
    ws.append(row)
ws.sheet_view.selection[0].activeCell = {cell!r}
ws.sheet_view.selection[0].sqref = {cell!r}
wb.save({path!r})
"""
# What the instruction says and the formula that answers it, per statistic.
_STATS = {"sum": ("the sum", "SUM", sum), "max": ("the largest value", "MAX", max)}


def _column_stat(rng: random.Random, stat: str) -> Instance:
    """Write a column's statistic into the selected cell below it, and save."""
    phrase, formula, compute = _STATS[stat]
    name = f"{rng.choice(NOUNS)}{rng.randint(1, 99)}.xlsx"
    path = f"{HOME}/{name}"
    headers = rng.sample(_HEADERS, 2)
    n = rng.randint(3, 7)
    items = [w.capitalize() for w in rng.sample(WORDS, n)]
    numbers = [[rng.randint(1, 99) for _ in range(n)] for _ in headers]
    rows = [["Item", *headers]] + [[items[i], numbers[0][i], numbers[1][i]] for i in range(n)]
    which = rng.randrange(2)
    col, last = "BC"[which], n + 1
    cell = f"{col}{last + 1}"
    span = f"{col}2:{col}{last}"
    setup = _MAKE_SHEET.format(rows=rows, cell=cell, path=path)
    return Instance(
        instruction=(
            f"In the open spreadsheet {name}, write {phrase} of the {headers[which]} column "
            f"({span}) into cell {cell}, which is selected, and save the file."
        ),
        config=[
            {"type": "execute", "parameters": {"command": ["python3", "-c", setup]}},
            *open_spreadsheet(path),
        ],
        evaluator=evaluator([cell_equals(path, cell, compute(numbers[which]))], settle=1.5),
        solution=[
            {"action": "type", "text": f"={formula}({span})\n"},
            {"action": "key", "text": "ctrl+s"},
        ],
        params={"file": name, "column": headers[which], "range": span, "cell": cell},
    )


def column_sum(rng: random.Random) -> Instance:
    """Write the sum of a column into the selected cell below it, and save."""
    return _column_stat(rng, "sum")


def column_max(rng: random.Random) -> Instance:
    """Write the largest value of a column into the selected cell below it, and save."""
    return _column_stat(rng, "max")


_VARIES = "file name, headers, items, numbers, which column"
CALC_FAMILIES = (
    Family("calc_column_sum", "libreoffice_calc", _VARIES, column_sum),
    Family("calc_column_max", "libreoffice_calc", _VARIES, column_max, heldout=True),
)
