"""Spreadsheet metric: OSWorld's `compare_table` and every rule its tasks use.

`compare_table(result, expected, rules=[...])` scores 1.0 when the result workbook (.xlsx;
a .csv is read as one sheet of values) passes every rule in order, else 0.0. A rule
names its sheets with `sheet_idx0`/`sheet_idx1` (or `sheet_idx`): an int (a result sheet
by position), "RI<n>"/"RN<name>" (the result's sheet by position or name) or
"EI<n>"/"EN<name>" (the expected file's). The rules, with OSWorld's semantics:

| rule | passes when | options |
|---|---|---|
| `sheet_name` | both books have the same sheet names in order | |
| `sheet_data` | the sheets are equal as pandas reads them (sheet_frame.py) | `precision` (4) |
| `sheet_print` | the sheets' printed text is equal: the CSV LibreOffice exported beside each book as `<book>-<sheet>.csv` (the task's postconfig runs that export) | `ignore_case` |
| `sheet_fuzzy` | every cell of each range matches by `exact_match`, `includes`, `included_by` or `fuzzy_match` (`threshold`, 85) | per range: `ignore_case`, `ignore_chars`, `trim_leadings`, `trim_trailings`, `normalization` |
| `check_cell` | a cell's stored `value` and styles meet `{"method", "ref"}` rules | `coordinate`, `props` |
| `style` | every cell has the same `props` styles, conditional formats applied | `props` |
| `chart` | the same charts, keyed by their series' data, with equal `chart_props` | `chart_props` |
| `pivot_table` | the same pivot tables, keyed by their source, with equal `pivot_props` | `pivot_props` |
| `sparkline` | the same sparklines | |
| `freeze` | the same frozen pane | |
| `zoom` | the sheet's zoom (100 when unset) meets `method`/`ref` | `method`, `ref` |
| `data_validation` | every validation matches one of `dv_props`, and there are at least as many | `dv_props` |
| `row_props` / `col_props` | rows (columns) have equal `props` (`hidden`, `height`, `width`, ...) | `props` |
| `filter` | the same autofilter and sort state | |

A result that is missing or not a workbook scores 0.0. Without `rules`, the whole books
must match (`sheet_name` and `sheet_data` on every sheet). Rule `sheet_data` also takes
`ignore_case`, which OSWorld does not have.
"""

from __future__ import annotations

import builtins
import csv
import io
import operator
import os
import zipfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.cell_range import MultiCellRange
from openpyxl.worksheet.worksheet import Worksheet
from rapidfuzz import fuzz

from runtime.envs.tasks.metrics.general import match_value_to_rule
from runtime.envs.tasks.metrics.sheet_frame import ErrorCell, Frame, frame_from_rows, frames_equal
from runtime.envs.tasks.metrics.table_objects import (
    cell_style,
    chart_info,
    dimension_info,
    filter_info,
    pivot_info,
    sheet_styles,
)
from runtime.envs.tasks.metrics.xlsx_parts import XlsxParts
from runtime.errors import TaskError

__all__ = ["Book", "compare_table", "match_sheet_rule", "match_sheet_value"]


class Book:
    """One spreadsheet file, read lazily in the forms the rules need."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.is_csv = self.path.suffix.lower() == ".csv"
        if self.is_csv:
            text = self.path.read_text(encoding="utf-8-sig", errors="replace")
            self._csv_rows = [list(r) for r in csv.reader(io.StringIO(text))]
            self.names = ["Sheet1"]
            return
        try:
            self.styled = openpyxl.load_workbook(self.path)  # formulas kept, as OSWorld reads it
        except (zipfile.BadZipFile, KeyError, OSError, ValueError, TypeError) as exc:
            raise ValueError(f"{self.path.name} is not a readable workbook: {exc}") from exc
        self.names = list(self.styled.sheetnames)

    @cached_property
    def parts(self) -> XlsxParts:
        """The package's XML parts."""
        return XlsxParts(self.path)

    @cached_property
    def _values(self) -> Any:
        return openpyxl.load_workbook(self.path, data_only=True)

    def close(self) -> None:
        """Release the open package, if any."""
        if "parts" in self.__dict__:
            self.parts.close()

    def has(self, sheet: str) -> bool:
        """Whether the book has a sheet of that name."""
        return sheet in self.names

    def worksheet(self, sheet: str) -> Worksheet | None:
        """The openpyxl worksheet (formulas kept), or None for a CSV or a missing sheet."""
        if self.is_csv or not self.has(sheet):
            return None
        ws = self.styled[sheet]
        return ws if isinstance(ws, Worksheet) else None

    def frame(self, sheet: str) -> Frame:
        """The sheet as pandas' read_excel would read it."""
        if self.is_csv:
            return frame_from_rows(
                [[v if v != "" else None for v in row] for row in self._csv_rows]
            )
        ws = self._values[sheet]
        if not isinstance(ws, Worksheet):
            return frame_from_rows([])
        rows = ws.iter_rows(min_row=1, min_col=1, max_row=ws.max_row, max_col=ws.max_column)
        return frame_from_rows(
            [[ErrorCell() if c.data_type == "e" else c.value for c in row] for row in rows]
        )

    def value(self, sheet: str, coordinate: str) -> Any:
        """A cell's stored value as OSWorld reads it (numbers as floats); None if absent."""
        if self.is_csv:
            row, col = openpyxl.utils.cell.coordinate_to_tuple(coordinate)
            rows = self._csv_rows
            text = rows[row - 1][col - 1] if row <= len(rows) and col <= len(rows[row - 1]) else ""
            if text == "":
                return None
            try:
                return float(text)
            except ValueError:
                return text
        return self.parts.cell(sheet, coordinate)

    def printed(self, sheet: str) -> list[str]:
        """The sheet's printed lines: the CSV exported beside the book, stripped, trailing
        empty lines dropped; ValueError when there is no such export."""
        path = Path(f"{os.path.splitext(self.path)[0]}-{sheet}.csv")
        if not path.is_file():
            raise ValueError(
                f"no printed copy {path.name} beside {self.path.name} (the task's postconfig "
                "exports it with LibreOffice's --convert-to csv)"
            )
        lines = [
            line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        ]
        while lines and not lines[-1]:
            lines.pop()
        return lines


def compare_table(result: Any, expected: Any = None, **options: Any) -> float:
    """1.0 when the result spreadsheet passes every rule in `options["rules"]`."""
    result = result[0] if isinstance(result, list) and result else result
    expected = expected[0] if isinstance(expected, list) and expected else expected
    if not isinstance(result, str | Path) or not Path(result).is_file():
        return 0.0
    try:
        rbook = Book(result)
    except ValueError:
        return 0.0
    ebook = Book(expected) if expected is not None else None  # a broken gold file raises
    try:
        rules = options.get("rules")
        if rules is None:  # no rules: the whole workbook must match the expected one
            if ebook is None:
                raise TaskError("compare_table without rules needs an expected file")
            rules = [{"type": "sheet_name"}] + [
                {"type": "sheet_data", "sheet_idx0": f"RI{i}", "sheet_idx1": f"EI{i}"}
                for i in range(len(ebook.names))
            ]
        return float(all(match_sheet_rule(rule, rbook, ebook) for rule in rules))
    finally:
        rbook.close()
        if ebook is not None:
            ebook.close()


def match_sheet_rule(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    """Whether one compare_table rule holds for the result (and expected) book."""
    kind = rule.get("type")
    check = _RULES.get(kind)  # type: ignore[arg-type]
    if check is None:
        raise TaskError(f"unsupported compare_table rule type {kind!r}")
    return check(rule, rbook, ebook)


def _pick(idx: Any, rbook: Book, ebook: Book | None) -> tuple[Book | None, str]:
    """Resolve OSWorld's sheet index (0, "RI0", "RNname", "EI1", "ENname") to a book and a name."""
    if isinstance(idx, int) and not isinstance(idx, bool):
        return rbook, rbook.names[idx] if -len(rbook.names) <= idx < len(rbook.names) else ""
    if not isinstance(idx, str) or idx[:2] not in ("RI", "RN", "EI", "EN"):
        raise TaskError(f"bad sheet index {idx!r}: want an int, RI<n>, RN<name>, EI<n> or EN<name>")
    book = rbook if idx[0] == "R" else ebook
    if book is None:
        return None, ""
    if idx[1] == "N":
        return book, idx[2:]
    try:
        return book, book.names[int(idx[2:])]
    except (ValueError, IndexError):
        return book, ""


def _pair(
    rule: dict[str, Any], rbook: Book, ebook: Book | None
) -> tuple[tuple[Book, str], tuple[Book, str]] | None:
    """The two (book, sheet) a comparing rule names, or None when either is missing."""
    a = _pick(rule["sheet_idx0"], rbook, ebook)
    b = _pick(rule["sheet_idx1"], rbook, ebook)
    if a[0] is None or b[0] is None or not a[0].has(a[1]) or not b[0].has(b[1]):
        return None
    return (a[0], a[1]), (b[0], b[1])


def _sheet_name(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    return ebook is not None and rbook.names == ebook.names


def _sheet_data(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    if pair is None:
        return False
    (a, sa), (b, sb) = pair
    precision = rule.get("precision", 4)
    return frames_equal(a.frame(sa), b.frame(sb), precision, bool(rule.get("ignore_case")))


def _sheet_print(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    a = _pick(rule["sheet_idx0"], rbook, ebook)
    b = _pick(rule["sheet_idx1"], rbook, ebook)
    if a[0] is None or b[0] is None:
        return False
    lines_a, lines_b = a[0].printed(a[1]), b[0].printed(b[1])
    if rule.get("ignore_case"):
        lines_a = [line.lower() for line in lines_a]
        lines_b = [line.lower() for line in lines_b]
    return lines_a == lines_b


def _sheet_fuzzy(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    if pair is None:
        return False
    (a, sa), (b, sb) = pair
    for part in rule["rules"]:
        ranges = part["range"]
        for rng in MultiCellRange(ranges if isinstance(ranges, str) else " ".join(ranges)).ranges:
            for row, col in rng.cells:
                coordinate = f"{get_column_letter(col)}{row}"
                if not _fuzzy_cell(
                    part, str(a.value(sa, coordinate)), str(b.value(sb, coordinate))
                ):
                    return False
    return True


def _fuzzy_cell(part: dict[str, Any], x: str, y: str) -> bool:
    """Compare two printed cell values after the range's normalisations, in OSWorld's order."""
    for old, new in part.get("normalization", []):
        x, y = x.replace(old, new), y.replace(old, new)
    if "trim_leadings" in part:
        x, y = x.lstrip(part["trim_leadings"]), y.lstrip(part["trim_leadings"])
    if "trim_trailings" in part:
        x, y = x.rstrip(part["trim_trailings"]), y.rstrip(part["trim_trailings"])
    if "ignore_chars" in part:
        drop = set(part["ignore_chars"])
        x, y = "".join(c for c in x if c not in drop), "".join(c for c in y if c not in drop)
    if part.get("ignore_case"):
        x, y = x.lower(), y.lower()
    kind = part["type"]
    if kind == "exact_match":
        return x == y
    if kind == "includes":
        return y in x
    if kind == "included_by":
        return x in y
    if kind == "fuzzy_match":
        return fuzz.ratio(x, y) >= float(part.get("threshold", 85.0))
    raise TaskError(f"unsupported sheet_fuzzy match type {kind!r}")


def _check_cell(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    book, name = _pick(rule["sheet_idx"], rbook, ebook)
    if book is None or not book.has(name):
        return False
    ws = book.worksheet(name)
    for prop, prop_rule in rule["props"].items():
        if prop == "value":
            value = book.value(name, rule["coordinate"])
        elif ws is None:
            return False  # a CSV has no styles
        else:
            value = cell_style(prop, ws[rule["coordinate"]])
        if not match_sheet_value(value, prop_rule):
            return False
    return True


def _worksheets(
    rule: dict[str, Any], rbook: Book, ebook: Book | None
) -> tuple[Worksheet, Worksheet] | None:
    pair = _pair(rule, rbook, ebook)
    if pair is None:
        return None
    (a, sa), (b, sb) = pair
    wa, wb = a.worksheet(sa), b.worksheet(sb)
    return None if wa is None or wb is None else (wa, wb)


def _style(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    sheets = _worksheets(rule, rbook, ebook)
    if pair is None or sheets is None:
        return False
    props = list(rule.get("props", []))
    (a, _), (b, _) = pair
    return sheet_styles(sheets[0], a.parts, props) == sheet_styles(sheets[1], b.parts, props)


def _chart(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    if pair is None or pair[0][0].is_csv or pair[1][0].is_csv:
        return False
    props = list(rule.get("chart_props", []))
    (a, sa), (b, sb) = pair
    return chart_info(a.parts, sa, props) == chart_info(b.parts, sb, props)


def _pivot_table(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    if pair is None or pair[0][0].is_csv or pair[1][0].is_csv:
        return False
    props = list(rule.get("pivot_props", []))
    (a, sa), (b, sb) = pair
    return pivot_info(a.parts, sa, props) == pivot_info(b.parts, sb, props)


def _sparkline(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    pair = _pair(rule, rbook, ebook)
    if pair is None or pair[0][0].is_csv or pair[1][0].is_csv:
        return False
    (a, sa), (b, sb) = pair
    return a.parts.sparklines(sa) == b.parts.sparklines(sb)


def _freeze(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    sheets = _worksheets(rule, rbook, ebook)
    return sheets is not None and sheets[0].freeze_panes == sheets[1].freeze_panes


def _zoom(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    book, name = _pick(rule["sheet_idx"], rbook, ebook)
    ws = None if book is None else book.worksheet(name)
    if ws is None:
        return False
    return match_sheet_value(ws.sheet_view.zoomScale or 100.0, rule)


def _data_validation(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    book, name = _pick(rule["sheet_idx"], rbook, ebook)
    ws = None if book is None else book.worksheet(name)
    if ws is None:
        return False
    wanted = rule["dv_props"]
    found = ws.data_validations.dataValidation
    if len(found) < len(wanted):
        return False
    for validation in found:
        if not any(
            all(match_sheet_value(_dv_attr(validation, attr), r) for attr, r in props.items())
            for props in wanted
        ):
            return False
    return True


def _dv_attr(validation: Any, attr: str) -> Any:
    if attr not in _DV_ATTRS:
        raise TaskError(f"unsupported data validation attribute {attr!r}")
    return getattr(validation, attr)


_DV_ATTRS = {"ranges", "sqref", "type", "formula1", "formula2", "operator", "allowBlank",
             "showDropDown", "showInputMessage", "showErrorMessage", "error", "errorTitle",
             "errorStyle", "prompt", "promptTitle", "imeMode"}  # fmt: skip


def _dims(obj: str) -> Callable[[dict[str, Any], Book, Book | None], bool]:
    def check(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
        sheets = _worksheets(rule, rbook, ebook)
        if sheets is None:
            return False
        props = list(rule.get("props", []))
        return dimension_info(sheets[0], obj, props) == dimension_info(sheets[1], obj, props)

    return check


def _filter(rule: dict[str, Any], rbook: Book, ebook: Book | None) -> bool:
    sheets = _worksheets(rule, rbook, ebook)
    return sheets is not None and filter_info(sheets[0]) == filter_info(sheets[1])


_RULES: dict[str, Callable[[dict[str, Any], Book, Book | None], bool]] = {
    "sheet_name": _sheet_name,
    "sheet_data": _sheet_data,
    "sheet_print": _sheet_print,
    "sheet_fuzzy": _sheet_fuzzy,
    "check_cell": _check_cell,
    "style": _style,
    "chart": _chart,
    "pivot_table": _pivot_table,
    "sparkline": _sparkline,
    "freeze": _freeze,
    "zoom": _zoom,
    "data_validation": _data_validation,
    "row_props": _dims("row"),
    "col_props": _dims("column"),
    "filter": _filter,
}


def match_sheet_value(value: Any, rule: dict[str, Any]) -> bool:
    """OSWorld's `{"method", "ref"}` rule, with the spreadsheet methods besides the general ones:
    `spreadsheet_range` (ref [inner, outer]: the ranges cover inner and lie within outer),
    `range.XY` (ref [a, b]: a <X b <Y with X, Y each t (<) or e (<=)), `str_list_eq` and
    `str_set_eq` (a comma-separated string, quotes stripped, as a list or set)."""
    method = str(rule.get("method", ""))
    ref = rule.get("ref")
    if method == "spreadsheet_range":
        if not isinstance(value, MultiCellRange):
            value = MultiCellRange(str(value))
        inner, outer = MultiCellRange(ref[0]), MultiCellRange(ref[1])
        return all(r in value for r in inner.ranges) and all(r in outer for r in value.ranges)
    if method.startswith("range.") and len(method) == 8:
        low, high = (getattr(operator, "l" + m) for m in method[6:8])
        try:
            return bool(low(ref[0], value) and high(value, ref[1]))
        except TypeError:
            return False
    if method in ("str_list_eq", "str_set_eq"):
        if not isinstance(value, str):
            return False
        kind = getattr(builtins, method[4:-3])
        return kind(value.strip("\"'").split(",")) == kind(ref)
    return match_value_to_rule(value, rule)
