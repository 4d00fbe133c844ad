"""OSWorld's general metrics on files and values built here: JSON objects, lists, records,
text files, the accessibility tree, SQLite, and OSWorld's literal_match types."""

from __future__ import annotations

import datetime
import sqlite3

import docx
import pytest

from runtime.envs.tasks.metrics import METRICS


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_literal_match_compares_as_strings_or_lists_like_osworld():
    m = METRICS["literal_match"]
    assert m(3, "3") == 1.0  # OSWorld compares str() of both
    assert m("Yes", "yes") == 0.0 and m("Yes", "yes", ignore_case=True) == 1.0
    row = ["Yann LeCun", "345074", "147"]
    assert m(row, ["yann lecun", "345074", "147"], type="list", ignore_case=True) == 1.0
    assert m(row, ["Yann LeCun", "345074"], type="list") == 0.0
    assert m("Yann", ["Yann"], type="list") == 0.0


def test_check_direct_json_object_exact_and_expect_in_result():
    m = METRICS["check_direct_json_object"]
    rules = {"expected": {"start": "SEA", "end": "NYC"}}
    assert m({"start": "SEA", "end": "NYC", "extra": 1}, rules) == 1.0
    assert m({"start": "SEA", "end": "LAX"}, rules) == 0.0
    assert m(None, rules) == 0.0
    # What a script prints: single-quoted (Python) or JSON text.
    assert m("{'start': 'SEA', 'end': 'NYC'}\n", rules) == 1.0
    assert m('{"start": "SEA", "end": "NYC"}', rules) == 1.0
    contains = {
        "expected": {"a1": ["Kilimanjaro"], "b2": ["Everest", "Himalayas"], "c": "Hua"},
        "expect_in_result": True,
    }
    assert m({"a1": ["Kilimanjaro"], "b2": ["Himalayas"], "c": "Mount Hua"}, contains) == 1.0
    assert m({"a1": ["Kilimanjaro"], "b2": ["Alps"], "c": "Mount Hua"}, contains) == 0.0
    assert m({"a1": ["Kilimanjaro"], "b2": ["Everest"]}, contains) == 0.0  # c missing
    assert m("not json at all", rules) == 0.0  # OSWorld scores output it cannot read 0


def test_check_list_regexes_per_line(tmp_path):
    m = METRICS["check_list"]
    listing = _file(tmp_path, "ls.txt", "Local Folders:\nCOMPANY\nCOMPANY.msf\nTrash\n")
    rules = {"expect": [r"\bCOMPANY\.msf\b", r"\bCOMPANY/?(?!\.msf)"]}
    assert m(listing, rules) == 1.0
    assert m(listing, {"expect": [r"\bUNIVERSITY\.msf\b"]}) == 0.0
    assert m(listing, {"expect": ["COMPANY"], "unexpect": ["^Trash$"]}) == 0.0
    assert m(_file(tmp_path, "e.txt", ""), rules) == 0.0
    assert m(None, rules) == 0.0


def test_check_csv_expect_and_unexpect_records(tmp_path):
    m = METRICS["check_csv"]
    accounts = _file(
        tmp_path,
        "a.csv",
        "url,user,password\nimap://outlook.office365.com,me@outlook.com,pw\n"
        "smtp://smtp.office365.com,me@outlook.com,pw\n",
    )
    imap = {"url": "imap://outlook.office365.com", "user": "me@outlook.com"}
    assert m(accounts, {"expect": [imap, {**imap, "password": "pw"}]}) == 1.0
    assert m(accounts, {"unexpect": [imap]}) == 0.0
    assert m(accounts, {"expect": [{**imap, "password": "other"}]}) == 0.0
    assert m(_file(tmp_path, "h.csv", "url,user,password\n"), {"unexpect": [imap]}) == 1.0


def test_text_file_metrics(tmp_path):
    sar = "".join(f"12:00:{i:02d} AM all 1.0\n" for i in range(31)) + "Average: all\n"
    assert METRICS["check_line_number"](_file(tmp_path, "r.txt", sar), {"expected": "31"}) == 1.0
    assert METRICS["check_line_number"](_file(tmp_path, "s.txt", sar), {"expected": 30}) == 0.0
    a = _file(tmp_path, "a.py", "def f(x):\n    return x + 1\n")
    b = _file(tmp_path, "b.py", "def f(x):\n\treturn x+1\n\n")
    c = _file(tmp_path, "c.py", "def f(x):\n    return x + 2\n")
    assert METRICS["compare_python_pure_text"](a, b) == 1.0
    assert METRICS["compare_python_pure_text"](a, c) == 0.0
    gold = _file(tmp_path, "gold.txt", "41.5\n")
    m = METRICS["compare_result_files"]
    assert m(_file(tmp_path, "r1.txt", "41.50001"), gold) == 1.0
    assert m(_file(tmp_path, "r2.txt", "The median is 41.5"), gold) == 1.0
    assert m(_file(tmp_path, "r3.txt", "42"), gold) == 0.0
    assert m(_file(tmp_path, "r4.txt", "n/a"), gold) == 0.0
    words = _file(tmp_path, "w.txt", "alpha")
    assert m(_file(tmp_path, "r5.txt", "alpha\n"), words) == 1.0


def test_compare_time_in_speedtest_results(tmp_path):
    now = datetime.datetime.now()
    recent = _file(tmp_path, "now.csv", f"Server,Date\nX,{now:%Y-%m-%d %H:%M}\n")
    old = now - datetime.timedelta(minutes=90)
    stale = _file(tmp_path, "old.csv", f"Server,Date\nX,{old:%Y-%m-%d %H:%M}\n")
    m = METRICS["compare_time_in_speedtest_results"]
    assert m(recent, "60") == 1.0
    assert m(stale, 60) == 0.0
    assert m(_file(tmp_path, "bad.csv", "only a header\n"), 60) == 0.0


def test_fuzzy_place_math(tmp_path):
    document = docx.Document()
    for word in ("Kilimanjaro", "Everest", "Huashan"):
        document.add_paragraph(word)
    path = str(tmp_path / "list.docx")
    document.save(path)
    rules = {"expected": ["Kilimanjaro", "Everest", "Huashan", "Fuji"]}
    assert METRICS["fuzzy_place_math"](path, rules) == 1.0
    document.add_paragraph("Alps")
    document.save(path)
    assert METRICS["fuzzy_place_math"](path, rules) == 0.0  # OSWorld wants exactly three


# What the desktop's accessibility dump writes (runtime/envs/desktop/a11y_dump.py).
_NS = "https://accessibility.ubuntu.example.org/ns/"
_TREE = f"""<desktop-frame xmlns:st="{_NS}state" xmlns:attr="{_NS}attributes"
 xmlns:cp="{_NS}component" name="main">
 <application name="Thunderbird">
  <frame name="Mail">
   <page-tab-list attr:id="tabmail-tabs" name="">
    <page-tab name="Inbox" st:showing="true"/>
    <page-tab name="About Profiles" st:selected="true"/>
   </page-tab-list>
   <label name="Status">Done loading</label>
  </frame>
 </application>
</desktop-frame>"""


def test_check_accessibility_tree_selectors_xpath_and_text():
    m = METRICS["check_accessibility_tree"]
    profiles = 'application[name=Thunderbird] page-tab-list[attr|id="tabmail-tabs"]>page-tab'
    assert m(_TREE, [{"selectors": [profiles + '[name="About Profiles"]']}]) == 1.0
    assert m(_TREE, [{"selectors": [profiles + '[name="Settings"]']}]) == 0.0
    assert m(_TREE, [{"xpath": "//page-tab[@st:selected='true']"}]) == 1.0
    assert m(_TREE, [{"selectors": ["label"], "text": "Done loading"}]) == 1.0
    assert m(_TREE, [{"selectors": ["label"], "text": "Done"}]) == 0.0
    fuzzy = m(_TREE, [{"selectors": ["label"], "text": "Done loadin", "exact": False}])
    assert 0.9 < fuzzy < 1.0
    # OSWorld's older trees declare other namespace URIs: the tree's own prefixes win.
    old = _TREE.replace(_NS + "attributes", "uri:deskat:attributes.at-spi.gnome.org")
    assert m(old, [{"selectors": [profiles + '[name="About Profiles"]']}]) == 1.0


def test_run_sqlite3_reads_only_its_file(tmp_path):
    db = tmp_path / "global-messages-db.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("create table messages (id integer, folderID integer)")
        c.execute("create table messageAttributes (messageID, attributeID, value)")
        c.executemany("insert into messages values (?, 13)", [(1,), (2,)])
        c.execute("insert into messageAttributes values (1, 58, 1)")
    sql = (
        "select sum(1) > 0 from messageAttributes where attributeID = 58 and value = 1 "
        "and messageID in (select id from messages where folderID = 13);"
    )
    m = METRICS["run_sqlite3"]
    assert m(str(db), {"sql": sql}) == 1.0
    assert m(str(db), {"sql": sql.replace("= 13", "= 14")}) == 0.0  # sum() of nothing: NULL
    outside = tmp_path / "written-by-the-task.sqlite"
    with pytest.raises(sqlite3.DatabaseError):
        m(str(db), {"sql": f"attach database '{outside}' as x"})
    with pytest.raises(sqlite3.OperationalError):
        m(str(db), {"sql": "delete from messages"})  # read-only
    assert not outside.exists()
    assert m(str(tmp_path / "missing.sqlite"), {"sql": sql}) == 0.0
