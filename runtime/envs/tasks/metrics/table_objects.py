"""What a sheet holds besides its values, as comparable plain data for `compare_table`.

Each loader takes the sheet (an openpyxl worksheet read with formulas, as OSWorld reads
it, and/or the package's XML parts) and returns dicts or lists that two files can be
compared by: charts and pivot tables keyed by their data source, cell styles (with
conditional formats applied where their condition holds), row and column dimensions,
the autofilter and sort state, and data validations. Property names are OSWorld's.
"""

from __future__ import annotations

from typing import Any

from openpyxl.cell.cell import Cell
from openpyxl.utils import get_column_letter
from openpyxl.utils.cell import coordinate_to_tuple, range_boundaries
from openpyxl.worksheet.worksheet import Worksheet

from runtime.envs.tasks.metrics.sheet_formula import FormulaError, evaluate_formula
from runtime.envs.tasks.metrics.xlsx_parts import XlsxParts
from runtime.errors import TaskError

__all__ = [
    "CELL_STYLES",
    "cell_style",
    "chart_info",
    "dimension_info",
    "filter_info",
    "pivot_info",
    "sheet_styles",
]

CELL_STYLES = (
    "number_format", "font_name", "font_family", "font_color", "font_bold", "font_italic",
    "font_underline", "font_size", "fill_type", "bgcolor", "fgcolor", "hyperlink",
)  # fmt: skip
_CHART_PROPS = {"title", "legend", "anchor", "width", "height", "type", "direction",
                "xtitle", "ytitle", "ztitle"}  # fmt: skip
_PIVOT_PROPS = {"name", "show_total", "show_empty_row", "show_empty_col", "show_headers",
                "location", "filter", "selection", "ordered", "col_fields", "row_fields",
                "data_fields", "data_fields_name"}  # fmt: skip


def cell_style(prop: str, cell: Cell, dxf: Any = None) -> Any:
    """One style property of a cell, or of a conditional format's style `dxf` shown on it.

    As in OSWorld, font properties and the number format are None for an empty cell, and
    the number format is None unless the cell holds a number.
    """
    if prop not in CELL_STYLES:
        raise TaskError(f"unsupported cell style property {prop!r}")
    source = dxf if dxf is not None else cell
    empty = cell.value is None
    if prop == "number_format":
        if empty or cell.data_type != "n":
            return None
        if dxf is None:
            return cell.number_format
        return None if dxf.numFmt is None else dxf.numFmt.formatCode
    if prop.startswith("font_"):
        font = source.font
        if empty or font is None:
            return None
        if prop == "font_color":
            return None if font.color is None else font.color.rgb
        return getattr(font, {"font_name": "name", "font_family": "family",
                              "font_bold": "bold", "font_italic": "italic",
                              "font_underline": "underline", "font_size": "size"}[prop])  # fmt: skip
    if prop == "hyperlink":
        return None if empty else (cell.hyperlink.target or "" if cell.hyperlink else "")
    fill = source.fill
    if fill is None:
        return None
    if prop == "fill_type":
        return fill.tagname
    color = getattr(fill, "bgColor" if prop == "bgcolor" else "fgColor", None)
    return None if color is None else color.rgb


def sheet_styles(ws: Worksheet, parts: XlsxParts | None, props: list[str]) -> dict[str, list[Any]]:
    """{coordinate: [prop values]} for every cell from A1 to the sheet's last cell, with
    conditional formats' styles on the cells where their condition holds."""
    styles = {
        cell.coordinate: [cell_style(p, cell) for p in props]
        for column in ws.iter_cols()
        for cell in column
    }
    for cf in ws.conditional_formatting:
        cells = [(r, c) for rng in cf.sqref.ranges for r, c in _cells_of(rng.coord)]
        if not cells:
            continue
        for rule in cf.rules:
            if rule.dxf is None or rule.type in ("colorScale", "dataBar", "iconSet"):
                continue  # no cell style to apply
            if parts is None:
                raise ValueError("conditional formats need the workbook's stored values")
            for row, col in _active_cells(rule, cells, ws.title, parts):
                cell = ws.cell(row=row, column=col)
                styles[cell.coordinate] = [cell_style(p, cell, rule.dxf) for p in props]
    return styles


def _cells_of(coord: str) -> list[tuple[int, int]]:
    min_col, min_row, max_col, max_row = range_boundaries(coord)
    return [(r, c) for r in range(min_row, max_row + 1) for c in range(min_col, max_col + 1)]


def _active_cells(
    rule: Any, cells: list[tuple[int, int]], sheet: str, parts: XlsxParts
) -> list[tuple[int, int]]:
    """The cells of a conditional format where `rule`'s condition holds."""

    def read(row: int, col: int) -> Any:
        return parts.cell(sheet, f"{get_column_letter(col)}{row}")

    top, left = cells[0]
    if rule.type in ("expression", "cellIs"):
        active = []
        for row, col in cells:
            offset = (row - top, col - left)
            try:
                if rule.type == "expression":
                    holds = _truthy(evaluate_formula(rule.formula[0], read, offset))
                else:
                    refs = [evaluate_formula(f, read, offset) for f in rule.formula]
                    holds = _cell_is(rule.operator, read(row, col), refs)
            except FormulaError:
                holds = False  # a formula that evaluates to an error does not apply
            if holds:
                active.append((row, col))
        return active
    if rule.type == "top10":
        numbers = sorted(
            {v for v in (read(r, c) for r, c in cells) if isinstance(v, float)},
            reverse=not rule.bottom,
        )
        rank = int(rule.rank or 10)
        if rule.percent:
            rank = max(1, len(numbers) * rank // 100)
        chosen = set(numbers[:rank])
        return [(r, c) for r, c in cells if read(r, c) in chosen]
    if rule.type in ("duplicateValues", "uniqueValues"):
        values = [read(r, c) for r, c in cells]
        counts = {v: values.count(v) for v in values if v is not None}
        dup = rule.type == "duplicateValues"
        return [
            (r, c)
            for (r, c), v in zip(cells, values, strict=True)
            if v is not None and (counts[v] > 1) == dup
        ]
    raise ValueError(f"conditional format type {rule.type!r} is not supported")


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return isinstance(value, int | float) and value != 0


def _cell_is(operator: str | None, value: Any, refs: list[Any]) -> bool:
    if not isinstance(value, float) or not all(isinstance(r, int | float) for r in refs):
        if operator in ("equal", "notEqual") and refs:
            return (value == refs[0]) == (operator == "equal")
        return False
    low = refs[0]
    if operator in ("between", "notBetween"):
        inside = min(refs[:2]) <= value <= max(refs[:2])
        return inside == (operator == "between")
    checks = {
        "equal": value == low,
        "notEqual": value != low,
        "greaterThan": value > low,
        "lessThan": value < low,
        "greaterThanOrEqual": value >= low,
        "lessThanOrEqual": value <= low,
    }
    if operator not in checks:
        raise ValueError(f"conditional format operator {operator!r} is not supported")
    return checks[operator]


def chart_info(parts: XlsxParts, sheet: str, props: list[str]) -> dict[str, dict[str, Any]]:
    """{series formulas: {prop: value}} for the charts on a sheet (OSWorld's chart key)."""
    unknown = set(props) - _CHART_PROPS
    if unknown:
        raise TaskError(f"unsupported chart properties {sorted(unknown)}")
    out: dict[str, dict[str, Any]] = {}
    for chart in parts.charts(sheet):
        info: dict[str, Any] = {}
        for prop in props:
            if prop in ("width", "height"):
                # openpyxl never reads a chart's size back, so OSWorld compares its
                # defaults: the property always agrees; it does here too
                info[prop] = None
            else:
                info[prop] = getattr(chart, prop)
        out[chart.series] = info
    return out


def pivot_info(parts: XlsxParts, sheet: str, props: list[str]) -> dict[str, dict[str, Any]]:
    """{source: {prop: value}} for a sheet's pivot tables, as OSWorld's `pivot_table` sees them.

    Fields with no chosen item at either end of the source are cut off the source range
    (and field indices shift to match), so a source range with extra empty columns
    compares equal to the tight one.
    """
    unknown = set(props) - _PIVOT_PROPS
    if unknown:
        raise TaskError(f"unsupported pivot table properties {sorted(unknown)}")
    out: dict[str, dict[str, Any]] = {}
    for pvt in parts.pivot_tables(sheet):
        chosen = [f.items for f in pvt.fields]
        left = next((i for i, items in enumerate(chosen) if items), len(chosen))
        right = next((i for i, items in enumerate(reversed(chosen)) if items), len(chosen))
        selection = chosen[left : len(chosen) - right] if left < len(chosen) else []
        if pvt.source_ref is None:
            raise ValueError("a pivot table whose source is not a cell range is not supported")
        first, _, last = pvt.source_ref.partition(":")
        r0, c0 = coordinate_to_tuple(first)
        r1, c1 = coordinate_to_tuple(last or first)
        source = f"{pvt.source_type};{(r0, c0 + left)}:{(r1, c1 - right)};{pvt.source_sheet}"
        info: dict[str, Any] = {}
        if "name" in props:
            info["name"] = pvt.name
        for prop, value in (("show_total", pvt.visual_totals), ("show_empty_row", pvt.show_empty_row),
                            ("show_empty_col", pvt.show_empty_col), ("show_headers", pvt.show_headers),
                            ("location", pvt.location)):  # fmt: skip
            if prop in props:
                info[prop] = value
        if "filter" in props or "selection" in props:
            info["selection"] = selection if "ordered" in props else [set(s) for s in selection]
        if "filter" in props:
            info["filter_fields"] = set(pvt.page_fields)
        if "col_fields" in props:
            info["col_fields"] = [_shift(x, left) for x in pvt.col_fields]
        if "row_fields" in props:
            info["row_fields"] = [_shift(x, left) for x in pvt.row_fields]
        if "data_fields" in props:
            named = "data_fields_name" in props
            info["data_fields"] = [
                f"{fld - left};{name if named and name is not None else ''};{subtotal};{shown}"
                for fld, name, subtotal, shown in pvt.data_fields
            ]
        out[source] = info
    return out


def _shift(index: int, left: int) -> int:
    """A field index in the trimmed source; -2 (the data fields' "Values" column) stays -2
    (OSWorld shifts it too, which only matters when the sources differ anyway)."""
    return index if index < 0 else index - left


def dimension_info(ws: Worksheet, obj: str, props: list[str]) -> dict[Any, dict[str, Any]]:
    """{row number or column letter: {prop: value}} for the rows or columns the file sizes."""
    dims = ws.row_dimensions if obj == "row" else ws.column_dimensions
    out = {}
    for key, dim in dims.items():
        try:
            out[key] = {prop: getattr(dim, prop) for prop in props}
        except AttributeError as exc:
            raise TaskError(f"unsupported {obj} property: {exc}") from exc
    return out


def filter_info(ws: Worksheet) -> dict[str, Any]:
    """A sheet's autofilter: its range, each filtered column's criteria, and its sort state."""
    auto = ws.auto_filter
    columns = []
    for col in auto.filterColumn:
        info: dict[str, Any] = {"col_id": col.colId, "hidden_button": col.hiddenButton,
                                "show_button": col.showButton}  # fmt: skip
        if col.filters is not None:
            info["filters_blank"] = col.filters.blank
            info["filters"] = set(col.filters.filter)
        if col.customFilters is not None:
            info["custom_filters_op"] = col.customFilters._and
            info["custom_filters"] = {(f.operator, f.val) for f in col.customFilters.customFilter}
        columns.append(info)
    out: dict[str, Any] = {
        "ref": auto.ref,
        "filter_column": sorted(columns, key=lambda d: d["col_id"]),
    }
    state = auto.sortState
    if state is not None:
        out["sort_state"] = {
            "sort": state.columnSort,
            "case": state.caseSensitive,
            "method": state.sortMethod,
            "ref": state.ref,
            "condition": [
                {
                    "descending": c.descending,
                    "key": c.sortBy,
                    "ref": c.ref,
                    "custom_list": c.customList,
                    "dxf_id": c.dxfId,
                    "icon": c.iconSet,
                    "iconid": c.iconId,
                }  # fmt: skip
                for c in state.sortCondition
            ],
        }
    return out
