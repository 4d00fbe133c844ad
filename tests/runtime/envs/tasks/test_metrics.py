"""Metrics on real files: spreadsheets, documents, JSON and text."""

from __future__ import annotations

import json

import docx
import openpyxl
import pytest

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.general import match_value_to_rule
from runtime.errors import TaskError


def _xlsx(path, rows, title="Sheet1", bold=None):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = title
    for row in rows:
        ws.append(row)
    if bold:
        ws[bold].font = openpyxl.styles.Font(bold=True)
    wb.save(path)
    return str(path)


def test_exact_and_include_exclude_and_fuzzy():
    assert METRICS["exact_match"]("abc", {"expected": "abc"}) == 1.0
    assert METRICS["exact_match"]("abc\n", {"expected": "abc"}) == 0.0
    rules = {"include": ["alpha", "beta"], "exclude": ["error"]}
    assert METRICS["check_include_exclude"]("alpha beta", rules) == 1.0
    assert METRICS["check_include_exclude"]("alpha beta error", rules) == 0.0
    assert METRICS["check_include_exclude"]("alpha", rules) == 0.0
    assert METRICS["check_include_exclude"](None, rules) == 0.0
    assert METRICS["fuzzy_match"]("hello world", {"expected": "hello world"}) == 1.0
    assert 0.5 < METRICS["fuzzy_match"]("hello wrld", {"expected": "hello world"}) < 1.0


def test_check_json_expect_and_unexpect(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"editor": {"size": 14, "theme": "dark"}, "list": [1, 2]}))
    rules = {
        "expect": [
            {"key": ["editor", "size"], "method": "eq", "ref": 14},
            {"key": ["editor", "theme"], "method": "re.I", "ref": "^DARK$"},
            {"key": ["list", 1], "method": "approx:0.1", "ref": 2.05},
        ],
        "unexpect": [{"key": ["editor", "font"], "method": "eq", "ref": "x"}],
    }
    assert METRICS["check_json"](str(f), rules) == 1.0
    assert (
        METRICS["check_json"](str(f), {"expect": [{"key": ["nope"], "method": "eq", "ref": 1}]})
        == 0.0
    )
    bad = {"unexpect": [{"key": ["editor", "size"], "method": "ge", "ref": 10}]}
    assert METRICS["check_json"](str(f), bad) == 0.0
    f.write_text("{not json")
    assert METRICS["check_json"](str(f), rules) == 0.0


def test_unknown_rule_method_is_a_task_error():
    with pytest.raises(TaskError):
        match_value_to_rule(1, {"method": "bogus", "ref": 1})


def test_text_file_metrics(tmp_path):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    a.write_text("one\ntwo\nthree\n")
    b.write_text("one\ntwo\nthree\n")
    c.write_text("one\n2\nthree\n")
    assert METRICS["diff_text_file"](str(a), str(b)) == 1.0
    assert 0.0 < METRICS["diff_text_file"](str(a), str(c)) < 1.0
    assert METRICS["compare_text_file"](str(a), str(b)) == 1.0
    assert METRICS["compare_text_file"](str(a), str(c)) == 0.0
    c.write_text("ONE two   three")
    assert METRICS["compare_text_file"](str(a), str(c), ignore_blanks=True, ignore_case=True) == 1.0
    assert METRICS["file_contains"](str(a), {"expected": ["two", "three"]}) == 1.0
    assert METRICS["file_contains"](str(a), {"expected": ["four"]}) == 0.0
    assert METRICS["file_exists"](str(a)) == 1.0
    assert METRICS["file_exists"](None) == 0.0
    assert METRICS["file_exists"]([str(a), None]) == 0.0


def test_compare_table_sheet_data_and_check_cell(tmp_path):
    r = _xlsx(tmp_path / "r.xlsx", [["name", "qty"], ["apple", 3], ["pear", 2.5]], bold="A1")
    e = _xlsx(tmp_path / "e.xlsx", [["name", "qty"], ["apple", 3.0], ["pear", 2.5]])
    wrong = _xlsx(tmp_path / "w.xlsx", [["name", "qty"], ["apple", 4], ["pear", 2.5]])
    data = {"rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}
    assert METRICS["compare_table"](r, e, **data) == 1.0
    assert METRICS["compare_table"](wrong, e, **data) == 0.0
    assert METRICS["compare_table"](None, e, **data) == 0.0
    cell = {
        "rules": [
            {
                "type": "check_cell",
                "sheet_idx": "RNSheet1",
                "coordinate": "B2",
                "props": {"value": {"method": "eq", "ref": 3}},
            },
            {
                "type": "check_cell",
                "sheet_idx": "RI0",
                "coordinate": "A1",
                "props": {"font_bold": {"method": "eq", "ref": True}},
            },
        ]
    }
    assert METRICS["compare_table"](r, **cell) == 1.0
    assert METRICS["compare_table"](e, **cell) == 0.0  # A1 not bold there
    # a CSV compares against an xlsx by values, and a broken file scores 0
    (tmp_path / "r.csv").write_text("name,qty\napple,3\npear,2.5\n")
    assert METRICS["compare_table"](str(tmp_path / "r.csv"), e, **data) == 1.0
    (tmp_path / "junk.xlsx").write_bytes(b"not a zip")
    assert METRICS["compare_table"](str(tmp_path / "junk.xlsx"), e, **data) == 0.0


def test_compare_table_precision_ignore_case_and_default_rules(tmp_path):
    # the first row names the columns (as pandas reads a sheet); precision is 4 by default
    r = _xlsx(tmp_path / "r.xlsx", [["item", "value"], ["Total", 1.23456]])
    e = _xlsx(tmp_path / "e.xlsx", [["item", "value"], ["total", 1.2349]])
    rule = {"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}
    assert METRICS["compare_table"](r, e, rules=[rule]) == 0.0
    assert METRICS["compare_table"](r, e, rules=[dict(rule, precision=2, ignore_case=True)]) == 1.0
    assert METRICS["compare_table"](r, r) == 1.0
    other = _xlsx(tmp_path / "o.xlsx", [["Total", 1.23456]], title="Other")
    assert METRICS["compare_table"](other, r) == 0.0  # sheet names differ


def test_compare_docx_files(tmp_path):
    def make(path, paragraphs):
        d = docx.Document()
        for p in paragraphs:
            d.add_paragraph(p)
        d.save(path)
        return str(path)

    a = make(tmp_path / "a.docx", ["Title", "", "Body  text"])
    b = make(tmp_path / "b.docx", ["Title", "Body text"])
    c = make(tmp_path / "c.docx", ["Title", "Other text"])
    assert METRICS["compare_docx_files"](a, b) == 1.0
    assert METRICS["compare_docx_files"](a, c) == 0.0
    assert METRICS["compare_docx_files"](None, b) == 0.0
