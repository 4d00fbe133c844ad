"""A sheet read as a table the way pandas' `read_excel` reads it, for `sheet_data`.

OSWorld compares sheets by loading both with pandas and calling `DataFrame.equals` after
`round(precision)`. What that means, reproduced here without pandas:

- cells: an empty cell is "", an error cell is NaN, a whole float is an int; trailing
  empty cells of each row and trailing empty rows are dropped, rows padded to one width
  (an empty row inside the table stays);
- the first row is the header: its empty cells are named "Unnamed: <i>", repeated names
  get ".1", ".2" suffixes;
- each column gets one type: the strings pandas reads as missing ("", "NA", "N/A",
  "#N/A", "null", "nan", ...) become NaN; a column whose values are all numbers or numeric
  strings becomes numeric (so the text "007" equals the number 7), int unless a float or
  NaN is in it; all-bool columns (or "TRUE"/"false" text) become bool, all-date columns
  datetime, anything else stays a column of objects;
- rounding applies to float columns; two tables are equal when their headers and row
  counts match and every column has the same type and equal values (NaN equals NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["Frame", "frame_from_rows", "frames_equal", "ErrorCell", "NAN", "NA_STRINGS"]

# pandas' default strings read as missing values (pandas 2.x, `STR_NA_VALUES`).
NA_STRINGS = frozenset(
    {
        "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
        "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
    }
)  # fmt: skip
_TRUE = {"True", "TRUE", "true"}
_FALSE = {"False", "FALSE", "false"}
NAN = float("nan")


class ErrorCell:
    """Marks a cell holding a spreadsheet error such as #DIV/0! (read as NaN)."""


@dataclass
class Frame:
    """A table: column labels, one type per column ("int", "float", "bool", "datetime",
    "object") and the values of each column."""

    labels: list[Any]
    kinds: list[str]
    columns: list[list[Any]]

    @property
    def rows(self) -> int:
        """The number of data rows (the header not counted)."""
        return len(self.columns[0]) if self.columns else 0


def frame_from_rows(cells: list[list[Any]]) -> Frame:
    """Build a Frame from a sheet's cells, row by row from A1 (None for an empty cell)."""
    rows = [[_cell(v) for v in row] for row in cells]
    for row in rows:
        while row and isinstance(row[-1], str) and row[-1] == "":
            row.pop()
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        return Frame([], [], [])
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    header, body = rows[0], rows[1:]
    labels = _dedupe([f"Unnamed: {i}" if v == "" else v for i, v in enumerate(header)])
    kinds, columns = [], []
    for j in range(width):
        kind, values = _column([row[j] for row in body])
        kinds.append(kind)
        columns.append(values)
    return Frame(labels, kinds, columns)


def frames_equal(a: Frame, b: Frame, precision: int | None = 4, ignore_case: bool = False) -> bool:
    """Whether two frames are equal after rounding float columns to `precision` digits.

    `ignore_case` (not an OSWorld option) also lower-cases text labels and text values.
    """
    if len(a.labels) != len(b.labels) or a.rows != b.rows:
        return False
    fold = _fold if ignore_case else (lambda v: v)
    if not all(_same(fold(x), fold(y)) for x, y in zip(a.labels, b.labels, strict=True)):
        return False
    for kind_a, kind_b, col_a, col_b in zip(a.kinds, b.kinds, a.columns, b.columns, strict=True):
        if kind_a != kind_b:
            return False
        if kind_a == "float" and precision is not None:
            col_a = [_round(v, precision) for v in col_a]
            col_b = [_round(v, precision) for v in col_b]
        if not all(_same(fold(x), fold(y)) for x, y in zip(col_a, col_b, strict=True)):
            return False
    return True


def _cell(value: Any) -> Any:
    """A cell as pandas' openpyxl reader converts it."""
    if value is None:
        return ""
    if isinstance(value, ErrorCell):
        return NAN
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _dedupe(names: list[Any]) -> list[Any]:
    """Rename repeated labels "x", "x" to "x", "x.1" as pandas does."""
    counts: dict[Any, int] = {}
    out = []
    for name in names:
        count = counts.get(name, 0)
        while count > 0:
            counts[name] = count + 1
            name = f"{name}.{count}"
            count = counts.get(name, 0)
        out.append(name)
        counts[name] = count + 1
    return out


def _is_na(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _column(values: list[Any]) -> tuple[str, list[Any]]:
    """A column's type and values after pandas' missing-value and type inference."""
    values = [NAN if isinstance(v, str) and v in NA_STRINGS else v for v in values]
    if not values:
        return "object", []
    numeric = _as_numbers(values)
    if numeric is not None:
        return numeric
    if values and all(isinstance(v, bool) or v in _TRUE or v in _FALSE for v in values):
        return "bool", [v if isinstance(v, bool) else v in _TRUE for v in values]
    present = [v for v in values if not _is_na(v)]
    if present and all(isinstance(v, datetime) for v in present):
        return "datetime", [None if _is_na(v) else v for v in values]
    return "object", values


def _as_numbers(values: list[Any]) -> tuple[str, list[Any]] | None:
    """The column as numbers if every value is a number or a numeric string, else None."""
    out: list[Any] = []
    saw_float = saw_na = saw_int = saw_bool = False
    for v in values:
        if _is_na(v):
            out.append(NAN)
            saw_na = True
        elif isinstance(v, bool):
            out.append(v)
            saw_bool = True
        elif isinstance(v, int):
            out.append(v)
            saw_int = True
        elif isinstance(v, float):
            out.append(v)
            saw_float = True
        elif isinstance(v, str):
            number = _parse_number(v)
            if number is None:
                return None
            out.append(number)
            saw_float = saw_float or isinstance(number, float)
            saw_int = saw_int or isinstance(number, int)
        else:
            return None  # dates, times and other objects are not numbers
    if saw_bool and not (saw_int or saw_float or saw_na):
        return "bool", out
    if saw_float or saw_na:
        return "float", [NAN if _is_na(v) else float(v) for v in out]
    return "int", [int(v) for v in out]


def _parse_number(text: str) -> int | float | None:
    """A numeric string as pandas parses it: "007" is 7, "1e3" is 1000.0, "1,234" no number."""
    text = text.strip()
    if not text or "_" in text:
        return None
    try:
        if not any(c in text for c in ".eEnN"):  # no point, exponent, inf or nan: an integer
            return int(text)
        return float(text)
    except ValueError:
        return None


def _round(value: float, digits: int) -> float:
    """Round as numpy does (scale, round half to even, unscale)."""
    if math.isnan(value) or math.isinf(value):
        return value
    scale = 10.0 ** abs(digits)
    scaled = value * scale if digits >= 0 else value / scale
    if not math.isfinite(scaled) or abs(scaled) >= 2.0**52:  # already integral at this scale
        return value
    return round(scaled) / scale if digits >= 0 else round(scaled) * scale


def _same(x: Any, y: Any) -> bool:
    if _is_na(x) and _is_na(y):
        return True
    try:
        return bool(x == y)
    except (TypeError, ValueError):
        return False


def _fold(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value
