"""Read what openpyxl's cell API does not give from an .xlsx package's XML parts.

An .xlsx file is a zip of XML parts linked by relationship files: the workbook names its
sheets, a sheet links its drawings (which link charts) and its pivot tables (which link
their pivot caches). `XlsxParts` follows those links and returns plain values:

- `cell(sheet, "B3")`: a cell's stored value as OSWorld reads it (numbers as floats,
  shared and formula strings as text, booleans as bool; None for an absent cell);
- `charts(sheet)`: each chart anchored on the sheet (type, bar direction, titles, legend,
  anchor, and the formula of every series' values and categories);
- `pivot_tables(sheet)`: each pivot table's definition and its cache's source range;
- `sparklines(sheet)`: the sparkline groups' cells and data ranges.

Every reader raises ValueError on a part that is missing or not XML, so a broken file
scores 0.0 with a reason instead of crashing the evaluation.
"""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["Chart", "PivotField", "PivotTable", "XlsxParts"]

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_CHART = "http://schemas.openxmlformats.org/drawingml/2006/chart"
_DRAW = "http://schemas.openxmlformats.org/drawingml/2006/main"
_XDR = "http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing"
_X14 = "http://schemas.microsoft.com/office/spreadsheetml/2009/9/main"
_XM = "http://schemas.microsoft.com/office/excel/2006/main"

# The chart-group elements a plot area can hold, as openpyxl names a chart's type.
_CHART_TYPES = {
    "areaChart", "area3DChart", "barChart", "bar3DChart", "bubbleChart", "doughnutChart",
    "lineChart", "line3DChart", "ofPieChart", "pieChart", "pie3DChart", "radarChart",
    "scatterChart", "stockChart", "surfaceChart", "surface3DChart",
}  # fmt: skip
_COORD = re.compile(r"^\$?([A-Za-z]{1,3})\$?(\d+)$")
# The largest part read into memory: a workbook's parts are small; a bomb is not.
_MAX_PART_BYTES = 256 * 1024 * 1024


def _q(ns: str, tag: str) -> str:
    return f"{{{ns}}}{tag}"


def _bool(text: str | None, default: bool | None) -> bool | None:
    """An XML schema boolean attribute ("1", "true", "0", "false"), else the default."""
    if text is None:
        return default
    return text.strip().lower() in ("1", "true")


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


@dataclass
class Chart:
    """One chart on a sheet, with the properties OSWorld's `chart` rule can compare."""

    series: str  # "values,categories" formula per series (ordered), joined by ";"
    type: str  # the first chart group's tag, e.g. "barChart", "lineChart"
    direction: str | None  # "bar" or "col" for bar charts
    title: str | None
    xtitle: str | None
    ytitle: str | None
    ztitle: str | None
    legend: str | None  # the legend's position ("r", "b", ...) or None without a legend
    anchor: list[Any] | None  # [editAs, from col, from row, to col, to row] (0-based)


@dataclass
class PivotField:
    """A pivot field's items as (hidden, cache index) pairs, for those that name one."""

    items: list[tuple[bool | None, int]]


@dataclass
class PivotTable:
    """A pivot table definition with its cache's source."""

    name: str | None
    location: tuple[Any, ...]  # ref, firstHeaderRow, firstDataRow, firstDataCol, pages
    visual_totals: bool
    show_empty_row: bool
    show_empty_col: bool
    show_headers: bool
    source_type: str | None
    source_ref: str | None
    source_sheet: str | None
    fields: list[PivotField] = field(default_factory=list)
    page_fields: list[int] = field(default_factory=list)
    col_fields: list[int] = field(default_factory=list)
    row_fields: list[int] = field(default_factory=list)
    # (field index, name, subtotal, showDataAs) per data field
    data_fields: list[tuple[int, str | None, str, str]] = field(default_factory=list)


class XlsxParts:
    """An .xlsx package opened for reading its XML parts (use as a context manager)."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ValueError(f"{Path(path).name} is not an .xlsx package: {exc}") from exc
        self._xml_cache: dict[str, ET.Element] = {}
        self._cells: dict[str, dict[str, ET.Element]] = {}

    def __enter__(self) -> XlsxParts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the package."""
        self._zip.close()

    # -- parts and relationships ---------------------------------------------------

    def xml(self, part: str) -> ET.Element:
        """The parsed root element of a part; ValueError if it is absent or not XML."""
        if part not in self._xml_cache:
            try:
                info = self._zip.getinfo(part)
            except KeyError as exc:
                raise ValueError(f"the package has no part {part}") from exc
            if info.file_size > _MAX_PART_BYTES:
                raise ValueError(f"part {part} is too large ({info.file_size} bytes)")
            try:
                self._xml_cache[part] = ET.fromstring(self._zip.read(info))
            except (ET.ParseError, zipfile.BadZipFile, OSError) as exc:
                raise ValueError(f"part {part} is not readable XML: {exc}") from exc
        return self._xml_cache[part]

    def related(self, part: str, kind: str) -> dict[str, str]:
        """The parts `part` links with relationships of `kind` (the type's last segment), by id."""
        folder, name = posixpath.split(part)
        rels_part = posixpath.join(folder, "_rels", name + ".rels")
        if rels_part not in self._zip.namelist():
            return {}
        out: dict[str, str] = {}
        for rel in self.xml(rels_part).iter(_q(_PKG, "Relationship")):
            if (
                rel.get("Type", "").rsplit("/", 1)[-1] != kind
                or rel.get("TargetMode") == "External"
            ):
                continue
            target = rel.get("Target", "")
            resolved = (
                target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
            )
            out[rel.get("Id", "")] = posixpath.normpath(resolved)
        return out

    @cached_property
    def _workbook_part(self) -> str:
        parts = self.related("", "officeDocument")
        return next(iter(parts.values()), "xl/workbook.xml")

    @cached_property
    def sheet_parts(self) -> dict[str, str]:
        """Worksheet part by sheet name, in the workbook's order."""
        book = self.xml(self._workbook_part)
        targets = self.related(self._workbook_part, "worksheet")
        out: dict[str, str] = {}
        for sheet in book.iter(_q(_MAIN, "sheet")):
            target = targets.get(sheet.get(_q(_REL, "id"), ""))
            if target is not None:
                out[sheet.get("name", "")] = target
        return out

    def _sheet(self, name: str) -> str:
        try:
            return self.sheet_parts[name]
        except KeyError:
            raise ValueError(f"the workbook has no worksheet named {name!r}") from None

    @cached_property
    def shared_strings(self) -> list[str]:
        """The shared string table (rich text runs joined; phonetic runs left out)."""
        parts = list(self.related(self._workbook_part, "sharedStrings").values())
        if not parts:
            return []
        out = []
        for item in self.xml(parts[0]).iter(_q(_MAIN, "si")):
            # plain text is a <t> child; rich text is <r> runs holding one <t> each
            texts = [item.findtext(_q(_MAIN, "t")) or ""]
            texts += [run.findtext(_q(_MAIN, "t")) or "" for run in item.findall(_q(_MAIN, "r"))]
            out.append("".join(texts))
        return out

    # -- cells -----------------------------------------------------------------------

    def cell(self, sheet: str, coordinate: str) -> Any:
        """A cell's stored value: float, str or bool; None when absent, empty or an error."""
        cells = self._cells.get(sheet)
        if cells is None:
            root = self.xml(self._sheet(sheet))
            cells = {c.get("r", "").upper(): c for c in root.iter(_q(_MAIN, "c"))}
            self._cells[sheet] = cells
        match = _COORD.match(coordinate.strip())
        if match is None:
            raise ValueError(f"bad cell coordinate {coordinate!r}")
        element = cells.get(f"{match[1].upper()}{match[2]}")
        if element is None:
            return None
        kind = element.get("t", "n")
        v = element.find(_q(_MAIN, "v"))
        text = None if v is None else v.text
        if kind == "inlineStr":
            return "".join(t.text or "" for t in element.iter(_q(_MAIN, "t")))
        if text is None:
            return None
        if kind == "n":
            try:
                return float(text)
            except ValueError:
                return None
        if kind == "s":
            try:
                return self.shared_strings[int(text)]
            except (ValueError, IndexError):
                return None
        if kind == "str":
            return text
        if kind == "b":
            return text.strip() in ("1", "true")
        return None  # "e" (an error) and "d" (ISO dates, which Calc and Excel do not write)

    # -- sparklines ------------------------------------------------------------------

    def sparklines(self, sheet: str) -> dict[str, str]:
        """Sparklines of a sheet: {cell range they are drawn in: data range formula}."""
        out: dict[str, str] = {}
        for line in self.xml(self._sheet(sheet)).iter(_q(_X14, "sparkline")):
            sqref = line.findtext(_q(_XM, "sqref"))
            formula = line.findtext(_q(_XM, "f"))
            if sqref is not None:
                out[sqref] = formula or ""
        return out

    # -- charts ------------------------------------------------------------------------

    def charts(self, sheet: str) -> list[Chart]:
        """The charts anchored in a sheet's drawings, in the drawings' order."""
        part = self._sheet(sheet)
        out: list[Chart] = []
        for drawing in self.related(part, "drawing").values():
            chart_parts = self.related(drawing, "chart")
            root = self.xml(drawing)
            anchors = [
                a
                for kind in ("twoCellAnchor", "oneCellAnchor", "absoluteAnchor")
                for a in root.findall(_q(_XDR, kind))
            ]
            for anchor in anchors:
                for ref in anchor.iter(_q(_CHART, "chart")):
                    chart_part = chart_parts.get(ref.get(_q(_REL, "id"), ""))
                    if chart_part is not None:
                        out.append(self._chart(chart_part, anchor))
        return out

    def _chart(self, part: str, anchor: ET.Element) -> Chart:
        chart = self.xml(part).find(_q(_CHART, "chart"))
        plot = None if chart is None else chart.find(_q(_CHART, "plotArea"))
        if chart is None or plot is None:
            raise ValueError(f"chart part {part} has no plot area")
        groups = [
            g for g in plot if g.tag.startswith(f"{{{_CHART}}}") and _local(g) in _CHART_TYPES
        ]
        if not groups:
            raise ValueError(f"chart part {part} has no chart group")
        group = groups[0]  # openpyxl (and so OSWorld) reads a combined chart's first group
        axes = {
            _attr(ax, "axId"): ax
            for ax in plot
            if _local(ax) in ("catAx", "dateAx", "valAx", "serAx")
        }
        x_axis, y_axis, z_axis = _group_axes(group, axes)
        legend = chart.find(_q(_CHART, "legend"))
        return Chart(
            series=";".join(_series_key(s) for s in _ordered_series(group)),
            type=_local(group),
            direction=_attr(group, "barDir")
            if _local(group) in ("barChart", "bar3DChart")
            else None,
            title=_title_text(chart.find(_q(_CHART, "title"))),
            xtitle=_title_text(None if x_axis is None else x_axis.find(_q(_CHART, "title"))),
            ytitle=_title_text(None if y_axis is None else y_axis.find(_q(_CHART, "title"))),
            ztitle=_title_text(None if z_axis is None else z_axis.find(_q(_CHART, "title"))),
            legend=None if legend is None else (_attr(legend, "legendPos") or "r"),
            anchor=_anchor(anchor),
        )

    # -- pivot tables --------------------------------------------------------------------

    def pivot_tables(self, sheet: str) -> list[PivotTable]:
        """The pivot tables a sheet holds, each with its cache's worksheet source."""
        out = []
        for part in self.related(self._sheet(sheet), "pivotTable").values():
            root = self.xml(part)
            caches = list(self.related(part, "pivotCacheDefinition").values())
            source = None
            if caches:
                source = self.xml(caches[0]).find(_q(_MAIN, "cacheSource"))
            ws_source = None if source is None else source.find(_q(_MAIN, "worksheetSource"))
            loc = root.find(_q(_MAIN, "location"))
            out.append(
                PivotTable(
                    name=root.get("name"),
                    location=()
                    if loc is None
                    else tuple(
                        loc.get(k)
                        for k in (
                            "ref",
                            "firstHeaderRow",
                            "firstDataRow",
                            "firstDataCol",
                            "rowPageCount",
                            "colPageCount",
                        )
                    ),  # fmt: skip
                    visual_totals=bool(_bool(root.get("visualTotals"), True)),
                    show_empty_row=bool(_bool(root.get("showEmptyRow"), False)),
                    show_empty_col=bool(_bool(root.get("showEmptyCol"), False)),
                    show_headers=bool(_bool(root.get("showHeaders"), True)),
                    source_type=None if source is None else source.get("type"),
                    source_ref=None if ws_source is None else ws_source.get("ref"),
                    source_sheet=None if ws_source is None else ws_source.get("sheet"),
                    fields=[
                        PivotField(
                            [
                                (_bool(item.get("h"), None), int(item.get("x", "0")))
                                for item in f.iter(_q(_MAIN, "item"))
                                if item.get("x") is not None
                            ]
                        )
                        for f in root.iter(_q(_MAIN, "pivotField"))
                    ],
                    page_fields=[int(f.get("fld", "0")) for f in root.iter(_q(_MAIN, "pageField"))],
                    col_fields=_field_indices(root, "colFields"),
                    row_fields=_field_indices(root, "rowFields"),
                    data_fields=[
                        (
                            int(f.get("fld", "0")),
                            f.get("name"),
                            f.get("subtotal", "sum"),
                            f.get("showDataAs", "normal"),
                        )
                        for f in root.iter(_q(_MAIN, "dataField"))
                    ],
                )
            )
        return out


def _local(element: ET.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def _attr(element: ET.Element, child: str) -> str | None:
    """The `val` attribute of a chart element's child, e.g. <c:barDir val="col"/>."""
    found = element.find(_q(_CHART, child))
    return None if found is None else found.get("val")


def _field_indices(root: ET.Element, tag: str) -> list[int]:
    holder = root.find(_q(_MAIN, tag))
    return [] if holder is None else [int(f.get("x", "0")) for f in holder.iter(_q(_MAIN, "field"))]


def _ordered_series(group: ET.Element) -> list[ET.Element]:
    series = group.findall(_q(_CHART, "ser"))
    return sorted(series, key=lambda s: int(_attr(s, "order") or 0))


def _series_key(series: ET.Element) -> str:
    """ "values,categories": the formulas a series reads its data and labels from."""

    def ref(tag: str) -> str:
        holder = series.find(_q(_CHART, tag))
        if holder is None:
            return ""
        for kind in ("numRef", "strRef"):
            formula = holder.findtext(f"{_q(_CHART, kind)}/{_q(_CHART, 'f')}")
            if formula is not None:
                return formula
        return ""

    return f"{ref('val')},{ref('cat')}"


def _group_axes(
    group: ET.Element, axes: dict[str | None, ET.Element]
) -> tuple[ET.Element | None, ET.Element | None, ET.Element | None]:
    """The (x, y, z) axes of a chart group, assigned as openpyxl assigns them."""
    ids = [a.get("val") for a in group.findall(_q(_CHART, "axId"))]
    found = [axes.get(i) for i in ids]
    if _local(group) in ("scatterChart", "bubbleChart"):
        return (found + [None, None])[0], (found + [None, None])[1], None
    x = y = z = None
    for axis in found:
        if axis is None:
            continue
        kind = _local(axis)
        if kind in ("catAx", "dateAx"):
            x = axis
        elif kind == "valAx":
            y = axis
        elif kind == "serAx":
            z = axis
    return x, y, z


def _title_text(title: ET.Element | None) -> str | None:
    """The text of a title's first run of its first paragraph (None for a linked title)."""
    if title is None:
        return None
    rich = title.find(f"{_q(_CHART, 'tx')}/{_q(_CHART, 'rich')}")
    if rich is None:
        return None
    paragraph = rich.find(_q(_DRAW, "p"))
    run = None if paragraph is None else paragraph.find(_q(_DRAW, "r"))
    return None if run is None else run.findtext(_q(_DRAW, "t"))


def _anchor(anchor: ET.Element) -> list[Any] | None:
    if _local(anchor) != "twoCellAnchor":
        return [_local(anchor)]

    def pos(tag: str) -> tuple[int | None, int | None]:
        marker = anchor.find(_q(_XDR, tag))
        if marker is None:
            return None, None
        return _int(marker.findtext(_q(_XDR, "col"))), _int(marker.findtext(_q(_XDR, "row")))

    (c0, r0), (c1, r1) = pos("from"), pos("to")
    return [anchor.get("editAs", "twoCell"), c0, r0, c1, r1]
