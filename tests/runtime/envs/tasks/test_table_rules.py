"""compare_table's rules and the other table metrics, on small files built here (no desktop)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import docx
import openpyxl
import pytest
from openpyxl.chart import BarChart, LineChart, Reference
from openpyxl.formatting.rule import FormulaRule
from openpyxl.styles import Font, PatternFill
from openpyxl.worksheet.datavalidation import DataValidation

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.sheet_formula import evaluate_formula
from runtime.envs.tasks.metrics.table import match_sheet_value
from runtime.envs.tasks.metrics.table_objects import pivot_info
from runtime.envs.tasks.metrics.xlsx_parts import XlsxParts
from runtime.errors import TaskError

compare_table = METRICS["compare_table"]


def _book(path: Path, sheets: dict[str, list[tuple]], edit=None) -> str:
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for row in rows:
            ws.append(row)
    if edit is not None:
        edit(wb)
    wb.save(path)
    return str(path)


def _rule(kind: str, **extra) -> dict:
    return {"rules": [{"type": kind, "sheet_idx0": "RI0", "sheet_idx1": "EI0", **extra}]}


# -- sheet_data: the sheet as pandas reads it ------------------------------------------


def test_sheet_data_reads_like_pandas(tmp_path):
    base = [("id", "name", "score"), (7, "ann", 1.23456), (8, "bob", 2.5)]
    e = _book(tmp_path / "e.xlsx", {"Sheet1": base})
    # numeric text is a number to pandas, a float 1.23461 rounds to the same 4 digits,
    # "N/A" is missing as an empty cell is, and trailing empty rows do not count
    r = _book(
        tmp_path / "r.xlsx",
        {"Sheet1": [("id", "name", "score"), ("007", "ann", 1.23461), (8, "bob", 2.5), ()]},
    )
    assert compare_table(r, e, **_rule("sheet_data")) == 1.0
    assert compare_table(r, e, **_rule("sheet_data", precision=5)) == 0.0
    na1 = _book(tmp_path / "na1.xlsx", {"Sheet1": [("a", "b"), (1, "N/A")]})
    na2 = _book(tmp_path / "na2.xlsx", {"Sheet1": [("a", "b"), (1, None)]})
    assert compare_table(na1, na2, **_rule("sheet_data")) == 1.0
    # a column's type counts: an int column never equals a float one, even when rounded
    f = _book(
        tmp_path / "f.xlsx",
        {"Sheet1": [("id", "name", "score"), (7, "ann", 1.23456), (8, "bob", 2.50001)]},
    )
    i = _book(tmp_path / "i.xlsx", {"Sheet1": [("x",), (3,)]})
    j = _book(tmp_path / "j.xlsx", {"Sheet1": [("x",), (3.00001,)]})
    assert compare_table(f, e, **_rule("sheet_data")) == 1.0
    assert compare_table(i, j, **_rule("sheet_data")) == 0.0
    # the header row names the columns: a different label is a different table
    h = _book(
        tmp_path / "h.xlsx",
        {"Sheet1": [("ID", "name", "score"), (7, "ann", 1.23456), (8, "bob", 2.5)]},
    )
    assert compare_table(h, e, **_rule("sheet_data")) == 0.0
    assert compare_table(h, e, **_rule("sheet_data", ignore_case=True)) == 1.0
    # a blank row inside a table is kept
    gap = _book(tmp_path / "gap.xlsx", {"Sheet1": [base[0], base[1], (None, None, None), base[2]]})
    assert compare_table(gap, e, **_rule("sheet_data")) == 0.0
    col1 = _book(tmp_path / "c1.xlsx", {"Sheet1": [("x",), (1,), (None,), (2,)]})
    col2 = _book(tmp_path / "c2.xlsx", {"Sheet1": [("x",), (1,), (2,)]})
    assert compare_table(col1, col2, **_rule("sheet_data")) == 0.0


def test_sheet_indices_and_names(tmp_path):
    r = _book(tmp_path / "r.xlsx", {"Data": [("a",), (1,)], "Copy": [("a",), (1,)]})
    e = _book(tmp_path / "e.xlsx", {"Data": [("a",), (1,)], "Other": [("a",), (2,)]})
    same = {"type": "sheet_data"}
    assert (
        compare_table(r, e, rules=[dict(same, sheet_idx0=0, sheet_idx1=1)]) == 1.0
    )  # int: result's
    assert compare_table(r, e, rules=[dict(same, sheet_idx0="RNCopy", sheet_idx1="ENData")]) == 1.0
    assert compare_table(r, e, rules=[dict(same, sheet_idx0="RI1", sheet_idx1="EI1")]) == 0.0
    assert compare_table(r, e, rules=[dict(same, sheet_idx0="RNNope", sheet_idx1="EI0")]) == 0.0
    assert compare_table(r, e, rules=[dict(same, sheet_idx0="RI9", sheet_idx1="EI0")]) == 0.0
    assert compare_table(r, e, rules=[{"type": "sheet_name"}]) == 0.0
    assert compare_table(r, r, rules=[{"type": "sheet_name"}]) == 1.0
    with pytest.raises(TaskError, match="bad sheet index"):
        compare_table(r, e, rules=[dict(same, sheet_idx0="X0", sheet_idx1="EI0")])
    with pytest.raises(TaskError, match="unsupported compare_table rule"):
        compare_table(r, e, rules=[{"type": "sheet_magic"}])
    assert compare_table(str(tmp_path / "missing.xlsx"), e, rules=[{"type": "sheet_name"}]) == 0.0


# -- sheet_print and sheet_fuzzy ---------------------------------------------------------


def test_sheet_print_compares_the_exported_csv_beside_each_book(tmp_path):
    r = _book(tmp_path / "r.xlsx", {"Sheet1": [("id",), (7,)]})
    e = _book(tmp_path / "e.xlsx", {"Sheet1": [("id",), (7,)]})
    rule = {"rules": [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]}
    with pytest.raises(ValueError, match="no printed copy r-Sheet1.csv"):
        compare_table(r, e, **rule)
    (tmp_path / "r-Sheet1.csv").write_text("ID\n0000007\n\n\n")
    (tmp_path / "e-Sheet1.csv").write_text("id \n0000007\n")
    assert compare_table(r, e, **rule) == 0.0
    rule["rules"][0]["ignore_case"] = True
    assert compare_table(r, e, **rule) == 1.0
    (tmp_path / "r-Sheet1.csv").write_text("id\n7\n")
    assert compare_table(r, e, **rule) == 0.0


def test_sheet_fuzzy_normalises_then_matches_each_cell(tmp_path):
    r = _book(
        tmp_path / "r.xlsx",
        {
            "Sheet1": [
                ("Name", "Address", "Phone"),
                ("Tsim Sha Tsui", "12 Nathan Rd", "+852 2345-6789 (main)"),
                ("x", 3, ""),
            ]
        },
    )
    e = _book(tmp_path / "e.xlsx", {"Sheet1": [("name", "Address", "Phone"), ("Tsim Sha Tsui", "12 nathan road", "23456789"), ("x", 3.0, "")]})  # fmt: skip

    def fuzzy(*parts):
        return {
            "rules": [
                {
                    "type": "sheet_fuzzy",
                    "sheet_idx0": "RNSheet1",
                    "sheet_idx1": "ENSheet1",
                    "rules": list(parts),
                }
            ]
        }

    assert compare_table(r, e, **fuzzy({"range": ["A2:A3", "B3"], "type": "exact_match"})) == 1.0
    assert compare_table(r, e, **fuzzy({"range": ["A1"], "type": "exact_match"})) == 0.0
    assert (
        compare_table(r, e, **fuzzy({"range": "A1", "type": "exact_match", "ignore_case": True}))
        == 1.0
    )
    road = {
        "range": ["B2"],
        "type": "fuzzy_match",
        "normalization": [["Rd", "Road"]],
        "ignore_case": True,
    }
    assert compare_table(r, e, **fuzzy(road)) == 1.0
    assert (
        compare_table(
            r, e, **fuzzy(dict(road, normalization=[]), {"range": ["A2"], "type": "exact_match"})
        )
        == 1.0
    )
    assert compare_table(r, e, **fuzzy(dict(road, normalization=[], threshold=99))) == 0.0
    phone = {"range": ["C2"], "type": "includes", "trim_leadings": "+ ", "ignore_chars": " ()-"}
    assert compare_table(r, e, **fuzzy(phone)) == 1.0
    assert compare_table(r, e, **fuzzy(dict(phone, type="included_by"))) == 0.0
    with pytest.raises(TaskError):
        compare_table(r, e, **fuzzy({"range": ["A2"], "type": "regex"}))


# -- cells and styles --------------------------------------------------------------------


def test_check_cell_reads_stored_values_and_styles(tmp_path):
    def edit(wb):
        ws = wb["Sheet1"]
        ws["A1"].font = Font(bold=True, color="FFFFFFFF")
        ws["A1"].fill = PatternFill("solid", fgColor="FF0000FF", bgColor="FF0000FF")
        ws["B2"].number_format = "0.00"

    r = _book(tmp_path / "r.xlsx", {"Sheet1": [("Title", None), ("x", 191.66667)]}, edit)

    def cell(coord, **props):
        return {
            "rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": coord, "props": props}]
        }

    assert compare_table(r, **cell("B2", value={"method": "approx:0.001", "ref": 191.6667})) == 1.0
    assert compare_table(r, **cell("B2", number_format={"method": "eq", "ref": "0.00"})) == 1.0
    assert compare_table(r, **cell("A1", value={"method": "eq", "ref": "Title"}, font_bold={"method": "eq", "ref": True},
                                   font_color={"method": "eq", "ref": "FFFFFFFF"}, bgcolor={"method": "eq", "ref": "FF0000FF"},
                                   fill_type={"method": "eq", "ref": "patternFill"})) == 1.0  # fmt: skip
    assert compare_table(r, **cell("A2", font_bold={"method": "eq", "ref": True})) == 0.0
    assert compare_table(r, **cell("C9", value={"method": "eq", "ref": None})) == 1.0


def test_style_applies_conditional_formats_where_they_hold(tmp_path):
    rows = [("Name", "Rate"), ("a", 3), ("b", 9), ("c", 5)]
    green = Font(color="FF00FF00")

    def direct(wb):
        wb["Sheet1"]["B3"].font = green

    def conditional(wb):
        wb["Sheet1"].conditional_formatting.add(
            "B2:B4", FormulaRule(formula=["$B2=MAX($B$2:$B$4)"], font=green)
        )

    def wrong(wb):
        wb["Sheet1"].conditional_formatting.add(
            "B2:B4", FormulaRule(formula=["$B2=MIN($B$2:$B$4)"], font=green)
        )

    e = _book(tmp_path / "e.xlsx", {"Sheet1": rows}, direct)
    cf = _book(tmp_path / "cf.xlsx", {"Sheet1": rows}, conditional)
    bad = _book(tmp_path / "bad.xlsx", {"Sheet1": rows}, wrong)
    plain = _book(tmp_path / "plain.xlsx", {"Sheet1": rows})
    rule = _rule("style", props=["font_color"])
    assert compare_table(cf, e, **rule) == 1.0
    assert compare_table(bad, e, **rule) == 0.0
    assert compare_table(plain, e, **rule) == 0.0


def test_formula_evaluation_moves_relative_references():
    cells = {(2, 1): 45293.0, (3, 1): 45298.0, (2, 2): "x"}  # 2024-01-02 (Tue), 2024-01-07 (Sun)

    def read(row, col):
        return cells.get((row, col))

    weekend = "WEEKDAY($A2;2)>5"
    assert evaluate_formula(weekend, read, (0, 0)) is False
    assert evaluate_formula(weekend, read, (1, 0)) is True
    assert evaluate_formula('=AND(LEN(B2)=1;B2&"y"="xy";-2^2=4;50%=0.5)', read) is True
    with pytest.raises(ValueError, match="VLOOKUP"):
        evaluate_formula("VLOOKUP(A2;A2:B3;2)", read)


# -- sheet objects -----------------------------------------------------------------------


def test_chart_rule_compares_charts_by_series(tmp_path):
    rows = [("Week", "Sales", "COGS"), ("W1", 1, 2), ("W2", 3, 4)]

    def with_chart(kind, title, cols=3):
        def edit(wb):
            ws = wb["Sheet1"]
            chart = kind()
            chart.title = title
            chart.add_data(
                Reference(ws, min_col=2, max_col=cols, min_row=1, max_row=3), titles_from_data=True
            )
            chart.set_categories(Reference(ws, min_col=1, min_row=2, max_row=3))
            ws.add_chart(chart, "E2")

        return edit

    e = _book(tmp_path / "e.xlsx", {"Sheet1": rows}, with_chart(BarChart, "Sales & COGS"))
    same = _book(tmp_path / "s.xlsx", {"Sheet1": rows}, with_chart(BarChart, "Sales & COGS"))
    line = _book(tmp_path / "l.xlsx", {"Sheet1": rows}, with_chart(LineChart, "Sales & COGS"))
    fewer = _book(
        tmp_path / "f.xlsx", {"Sheet1": rows}, with_chart(BarChart, "Sales & COGS", cols=2)
    )
    none = _book(tmp_path / "n.xlsx", {"Sheet1": rows})
    rule = _rule("chart", chart_props=["type", "title", "direction"])
    assert compare_table(same, e, **rule) == 1.0
    assert compare_table(line, e, **rule) == 0.0
    assert compare_table(line, e, **_rule("chart", chart_props=["title"])) == 1.0
    assert compare_table(fewer, e, **_rule("chart", chart_props=["title"])) == 0.0  # other series
    assert compare_table(none, e, **rule) == 0.0
    with XlsxParts(e) as parts:
        (chart,) = parts.charts("Sheet1")
    assert (chart.type, chart.title, chart.direction) == ("barChart", "Sales & COGS", "col")
    assert (
        chart.series
        == "'Sheet1'!$B$2:$B$3,'Sheet1'!$A$2:$A$3;'Sheet1'!$C$2:$C$3,'Sheet1'!$A$2:$A$3"
    )


_NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
_RELS = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def _package(path: Path, pivot: str | None, sheet_extra: str = "") -> Path:
    """A minimal .xlsx package: Sheet1, and a pivot table on Sheet2 if `pivot` is given."""
    parts = {
        "_rels/.rels": f'<Relationships {_RELS}><Relationship Id="r1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<workbook {_NS}><sheets><sheet name="Sheet1" sheetId="1" r:id="s1"/><sheet name="Sheet2" sheetId="2" r:id="s2"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<Relationships {_RELS}><Relationship Id="s1" Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="s2" Type="{_REL}/worksheet" Target="/xl/worksheets/sheet2.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": f'<worksheet {_NS}><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c><c r="B1" t="b"><v>1</v></c></row></sheetData>{sheet_extra}</worksheet>',
        "xl/worksheets/sheet2.xml": f"<worksheet {_NS}><sheetData/></worksheet>",
    }  # fmt: skip
    if pivot is not None:
        parts["xl/worksheets/_rels/sheet2.xml.rels"] = (
            f'<Relationships {_RELS}><Relationship Id="p" Type="{_REL}/pivotTable" Target="../pivotTables/pivotTable1.xml"/></Relationships>'
        )
        parts["xl/pivotTables/_rels/pivotTable1.xml.rels"] = (
            f'<Relationships {_RELS}><Relationship Id="c" Type="{_REL}/pivotCacheDefinition" Target="../pivotCache/pivotCacheDefinition1.xml"/></Relationships>'
        )
        parts["xl/pivotCache/pivotCacheDefinition1.xml"] = (
            f'<pivotCacheDefinition {_NS}><cacheSource type="worksheet"><worksheetSource ref="A1:E7" sheet="Sheet1"/></cacheSource></pivotCacheDefinition>'
        )
        parts["xl/pivotTables/pivotTable1.xml"] = f'<pivotTableDefinition {_NS} name="P" cacheId="1"><location ref="A3:B7" firstHeaderRow="1" firstDataRow="1" firstDataCol="1"/>{pivot}</pivotTableDefinition>'  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        for name, text in parts.items():
            z.writestr(name, text)
    return path


def _pivot_xml(row_field: int, function: str, pad: bool = False) -> str:
    empty = '<pivotField showAll="0"/>'
    used = '<pivotField axis="axisRow" showAll="0"><items count="3"><item x="0"/><item x="1"/><item h="1" x="2"/><item t="default"/></items></pivotField>'  # fmt: skip
    fields = [empty] * 3
    fields[row_field] = used
    if pad:  # the source range took one empty column more on each side
        fields = [empty, *fields, empty]
    shift = 1 if pad else 0
    return (
        f'<pivotFields count="{len(fields)}">{"".join(fields)}</pivotFields>'
        f'<rowFields count="1"><field x="{row_field + shift}"/></rowFields>'
        f'<colFields count="1"><field x="-2"/></colFields>'
        f'<dataFields count="1"><dataField name="n" fld="{row_field + shift}" subtotal="{function}"/></dataFields>'
    )


def test_pivot_tables_compare_by_source_fields_and_functions(tmp_path):
    props = ["col_fields", "filter", "row_fields", "data_fields"]

    def info(name, pivot, sheet="Sheet2"):
        with XlsxParts(_package(tmp_path / name, pivot)) as parts:
            return pivot_info(parts, sheet, props)

    count0 = info("a.xlsx", _pivot_xml(0, "count"))
    assert count0 == {
        "worksheet;(1, 1):(7, 3);Sheet1": {  # the fields without items at the end cut off
            "selection": [{(None, 0), (None, 1), (True, 2)}],
            "filter_fields": set(),
            "col_fields": [-2],
            "row_fields": [0],
            "data_fields": ["0;;count;normal"],
        }
    }
    assert info("b.xlsx", _pivot_xml(0, "count")) == count0
    assert info("c.xlsx", _pivot_xml(0, "sum")) != count0
    assert info("d.xlsx", _pivot_xml(1, "count")) != count0
    assert info("e.xlsx", None) == {}
    assert info("f.xlsx", _pivot_xml(0, "count"), sheet="Sheet1") == {}
    # empty fields at the edges of the source are cut off and the field indices follow
    padded = info("g.xlsx", _pivot_xml(0, "count", pad=True))
    assert list(padded.values()) == list(count0.values())
    assert list(padded) == ["worksheet;(1, 2):(7, 2);Sheet1"]


def test_package_cells_and_sparklines(tmp_path):
    spark = (
        '<extLst><ext uri="x"><x14:sparklineGroups xmlns:x14="http://schemas.microsoft.com/office/spreadsheetml/2009/9/main" '
        'xmlns:xm="http://schemas.microsoft.com/office/excel/2006/main"><x14:sparklineGroup><x14:sparklines>'
        "<x14:sparkline><xm:f>Sheet1!A2:E2</xm:f><xm:sqref>F2</xm:sqref></x14:sparkline>"
        "</x14:sparklines></x14:sparklineGroup></x14:sparklineGroups></ext></extLst>"
    )
    with XlsxParts(_package(tmp_path / "s.xlsx", None, spark)) as parts:
        assert parts.sparklines("Sheet1") == {"F2": "Sheet1!A2:E2"}
        assert parts.cell("Sheet1", "A1") == "a"
        assert parts.cell("Sheet1", "$B$1") is True
        assert parts.cell("Sheet1", "C1") is None
        with pytest.raises(ValueError, match="no worksheet named"):
            parts.cell("Nope", "A1")
    with pytest.raises(ValueError, match="not an .xlsx package"):
        XlsxParts(tmp_path / "missing.xlsx")


def test_freeze_zoom_dimensions_filter_and_validation(tmp_path):
    rows = [("Result", "Score")] + [("Pass", i) for i in range(1, 6)]

    def edited(freeze=None, zoom=None, hide=None, width=None, auto=None, dv=None):
        def edit(wb):
            ws = wb["Sheet1"]
            ws.freeze_panes = freeze
            if zoom:
                ws.sheet_view.zoomScale = zoom
            if hide:
                ws.row_dimensions[hide].hidden = True
            if width:
                ws.column_dimensions["A"].width = width
            if auto:
                ws.auto_filter.ref = auto
            if dv:
                validation = DataValidation(type="list", formula1='"Pass,Fail,Held"')
                validation.add(dv)
                ws.add_data_validation(validation)

        return edit

    def book(name, **kw):
        return _book(tmp_path / name, {"Sheet1": rows}, edited(**kw))

    e = book("e.xlsx", freeze="C2", hide=3, width=20, auto="A1:B6")
    assert compare_table(book("f.xlsx", freeze="C2"), e, **_rule("freeze")) == 1.0
    assert compare_table(book("g.xlsx", freeze="B2"), e, **_rule("freeze")) == 0.0
    assert compare_table(book("h.xlsx", hide=3), e, **_rule("row_props", props=["hidden"])) == 1.0
    assert compare_table(book("i.xlsx", hide=4), e, **_rule("row_props", props=["hidden"])) == 0.0
    assert compare_table(book("j.xlsx", width=20), e, **_rule("col_props", props=["width"])) == 1.0
    assert compare_table(book("k.xlsx", width=9), e, **_rule("col_props", props=["width"])) == 0.0
    assert compare_table(book("l.xlsx", auto="A1:B6"), e, **_rule("filter")) == 1.0
    assert compare_table(book("m.xlsx"), e, **_rule("filter")) == 0.0

    def zoom(method, ref):
        return {"rules": [{"type": "zoom", "sheet_idx": 0, "method": method, "ref": ref}]}

    assert compare_table(book("z.xlsx", zoom=300), **zoom("lt", 260)) == 0.0
    assert compare_table(book("y.xlsx", zoom=90), **zoom("lt", 260)) == 1.0
    assert compare_table(book("x.xlsx"), **zoom("eq", 100)) == 1.0  # unset is 100

    validity = {"rules": [{"type": "data_validation", "sheet_idx": 0, "dv_props": [{
        "ranges": {"method": "spreadsheet_range", "ref": ["A2:A6", "A2:A1048576"]},
        "type": {"method": "eq", "ref": "list"},
        "formula1": {"method": "str_set_eq", "ref": ["Pass", "Fail", "Held"]}}]}]}  # fmt: skip
    assert compare_table(book("v.xlsx", dv="A2:A6"), **validity) == 1.0
    assert compare_table(book("w.xlsx", dv="A2:A9"), **validity) == 1.0  # within the column
    assert compare_table(book("u.xlsx", dv="A3:A6"), **validity) == 0.0  # misses A2
    assert compare_table(book("t.xlsx", dv="B2:B6"), **validity) == 0.0
    assert compare_table(book("s.xlsx"), **validity) == 0.0


def test_spreadsheet_rule_methods():
    assert match_sheet_value(5, {"method": "range.te", "ref": [0, 5]})
    assert not match_sheet_value(0, {"method": "range.te", "ref": [0, 5]})
    assert match_sheet_value("'a,b'", {"method": "str_list_eq", "ref": ["a", "b"]})
    assert not match_sheet_value("b,a", {"method": "str_list_eq", "ref": ["a", "b"]})
    assert match_sheet_value("b,a", {"method": "str_set_eq", "ref": ["a", "b"]})
    assert match_sheet_value(
        "D2:D40", {"method": "spreadsheet_range", "ref": ["D2:D29", "D2:D1048576"]}
    )
    assert match_sheet_value(3.0, {"method": "eq", "ref": 3})


# -- the other table metrics ---------------------------------------------------------------


def test_csv_metrics(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("Name,City\nann,Oslo \n")
    b.write_text("name,City\nann,Oslo\n")
    assert METRICS["compare_csv"](str(a), str(b)) == 0.0
    assert METRICS["compare_csv"](str(a), str(b), strict=False, ignore_case=True) == 1.0
    assert METRICS["compare_csv"](None, str(b)) == 0.0
    accounts = tmp_path / "acc.csv"
    accounts.write_text("url,user,password\nimap://x,me,pw\nsmtp://x,me,pw\n")
    want = {"expect": [{"url": "imap://x", "user": "me"}, {"url": "smtp://x", "password": "pw"}]}
    assert METRICS["check_csv"](str(accounts), want) == 1.0
    assert METRICS["check_csv"](str(accounts), {"expect": [{"url": "pop://x"}]}) == 0.0
    assert (
        METRICS["check_csv"](
            str(accounts), dict(want, unexpect=[{"user": "me", "url": "smtp://x"}])
        )
        == 0.0
    )


def test_conference_cities_and_places(tmp_path):
    rows = [("Conf", "Year", "City")] + [
        ("C", 2013 + i, city) for i, city in enumerate(["Montréal, Canada", "Lille"] + ["X"] * 19)
    ]
    sheet = _book(tmp_path / "c.xlsx", {"Sheet1": rows})
    want = {"expected": [["Montreal", "Montréal"], "Lille"] + ["X"] * 19}
    assert METRICS["compare_conference_city_in_order"](sheet, want) == 1.0
    assert (
        METRICS["compare_conference_city_in_order"](
            sheet, {"expected": ["Lille", "Montreal"] + ["X"] * 19}
        )
        == 0.0
    )
    assert (
        METRICS["compare_conference_city_in_order"](sheet, {"expected": ["Montréal"]}) == 0.0
    )  # too short

    def document(name, lines):
        d = docx.Document()
        for line in lines:
            d.add_paragraph(line)
        d.save(tmp_path / name)
        return str(tmp_path / name)

    places = {"expected": ["福田区正义街1号", "福田区振兴路108号", "福田区香梅路2002号"]}
    assert METRICS["fuzzy_place_math"](document("p.docx", places["expected"]), places) == 1.0
    assert METRICS["fuzzy_place_math"](document("q.docx", places["expected"][:2]), places) == 0.0
    assert (
        0.0
        < METRICS["fuzzy_place_math"](document("r.docx", ["福田区正义街", "a", "b"]), places)
        < 1.0
    )
