"""General metrics with OSWorld's names and arguments: strings, JSON, lists, records, text
files, the accessibility tree and SQLite databases.

Every metric takes the getter values (`result`, then `expected` when the task has one)
plus the task's `options` as keywords, and returns a float in [0, 1].
"""

from __future__ import annotations

import ast
import datetime
import difflib
import functools
import json
import operator
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz

from runtime.errors import TaskError

__all__ = [
    "METRICS",
    "check_accessibility_tree",
    "check_direct_json_object",
    "check_include_exclude",
    "check_json",
    "check_line_number",
    "check_list",
    "compare_python_pure_text",
    "compare_result_files",
    "compare_time_in_speedtest_results",
    "diff_text_file",
    "exact_match",
    "file_contains",
    "file_exists",
    "fuzzy_match",
    "is_in_list",
    "literal_match",
    "match_record",
    "match_value_to_rule",
    "parse_json_object",
    "run_sqlite3",
]


def match_value_to_rule(value: Any, rule: dict[str, Any]) -> bool:
    """OSWorld's `{"method", "ref"}` rule: re[.FLAG...], eq/ne/lt/le/gt/ge, approx:T."""
    method = str(rule.get("method", ""))
    ref = rule.get("ref")
    if method.startswith("re"):
        flags = functools.reduce(
            operator.or_, (getattr(re, f) for f in method.split(".")[1:]), re.RegexFlag(0)
        )
        return value is not None and re.search(str(ref), str(value), flags) is not None
    if method in ("eq", "ne", "lt", "le", "gt", "ge"):
        try:
            return bool(getattr(operator, method)(value, ref))
        except TypeError:  # ordering None or mixed types: the rule simply does not hold
            return False
    if method.startswith("approx:"):
        try:
            return abs(float(value) - float(ref)) <= float(method.split(":", 1)[1])
        except (TypeError, ValueError):
            return False
    if method in ("in", "not_in"):
        return (value in ref) == (method == "in")
    raise TaskError(f"unknown rule method {method!r}")


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    """1.0 when the result equals `rules["expected"]`."""
    return float(result == rules["expected"])


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    """1.0 when `rules["expected"]` is an item of the result."""
    return float(result is not None and rules["expected"] in result)


def literal_match(result: Any, expected: Any, **options: Any) -> float:
    """1.0 when result and expected read the same: as strings (`type` "str", the default) or
    item by item as strings (`type` "list"); `ignore_case` folds case."""
    fold = (lambda s: s.lower()) if options.get("ignore_case") else (lambda s: s)
    kind = options.get("type", "str")
    if kind == "str":
        return float(fold(str(result)) == fold(str(expected)))
    if kind == "list":
        if not isinstance(result, list | tuple) or not isinstance(expected, list | tuple):
            return 0.0
        return float([fold(str(r)) for r in result] == [fold(str(e)) for e in expected])
    raise TaskError(f"literal_match: unknown type {kind!r} (str or list)")


def check_include_exclude(result: str | None, rules: dict[str, Any]) -> float:
    """1.0 when every `include` string is in the result and no `exclude` string is."""
    if result is None:
        return 0.0
    include = rules.get("include", [])
    exclude = rules.get("exclude", [])
    return float(all(s in result for s in include) and not any(s in result for s in exclude))


def fuzzy_match(result: str | None, rules: dict[str, Any]) -> float:
    """Similarity ratio in [0, 1] between the result and `rules["expected"]`."""
    if result is None:
        return 0.0
    return fuzz.ratio(str(result), str(rules["expected"])) / 100.0


def check_json(result: str | None, rules: dict[str, Any], is_yaml: bool = False) -> float:
    """1.0 when the JSON (or YAML) file meets every `expect` rule and no `unexpect` rule."""
    if result is None or not Path(result).is_file():
        return 0.0
    text = Path(result).read_text(encoding="utf-8", errors="replace")
    try:
        if is_yaml:
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError:
        return 0.0
    for rule in rules.get("expect", []):
        found, value = _lookup(data, rule["key"])
        if not found or not match_value_to_rule(value, rule):
            return 0.0
    for rule in rules.get("unexpect", []):
        found, value = _lookup(data, rule["key"])
        if match_value_to_rule(value if found else None, rule):
            return 0.0
    return 1.0


def _lookup(data: Any, keys: list[Any]) -> tuple[bool, Any]:
    """Follow a key path into nested JSON; (False, None) when any step is missing."""
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, data


def diff_text_file(result: str | None, expect: str | None) -> float:
    """Line-level similarity ratio between two text files (1.0 when identical)."""
    if result is None or expect is None or not Path(result).is_file():
        return 0.0
    a = Path(result).read_text(encoding="utf-8", errors="replace").splitlines()
    b = Path(expect).read_text(encoding="utf-8", errors="replace").splitlines()
    return difflib.SequenceMatcher(a=a, b=b).ratio()


def file_contains(result: str | None, config: dict[str, Any]) -> float:
    """1.0 when the file exists and contains every string in `config["expected"]`."""
    if result is None or not Path(result).is_file():
        return 0.0
    text = Path(result).read_text(encoding="utf-8", errors="replace")
    return float(all(s in text for s in config["expected"]))


def file_exists(result: Any, expected: Any = None, **options: Any) -> float:
    """1.0 when a file getter found the file (or every file of a multi getter)."""
    paths = result if isinstance(result, list) else [result]
    return float(bool(paths) and all(p is not None and Path(p).exists() for p in paths))


# -- results an agent leaves as text, lists, records or JSON --------------------------


def _read_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace")


def parse_json_object(text: str) -> Any:
    """A JSON object a command printed: JSON, a Python literal, or JSON with single quotes."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)  # what `print(some_dict)` writes
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    return json.loads(text.replace("'", '"'))  # OSWorld's own fallback; raises if still bad


def check_direct_json_object(result: Any, rules: dict[str, Any]) -> float:
    """1.0 when the JSON object result holds every `expected` key with its value.

    With `expect_in_result`, an expected string must occur in the result's value and an
    expected list needs one of its items in the result's list (OSWorld's two modes).
    """
    if isinstance(result, str):
        try:
            result = parse_json_object(result)
        except ValueError:  # not an object the command printed: no match, as OSWorld scores it
            return 0.0
    if not isinstance(result, dict):
        return 0.0
    expected: dict[str, Any] = rules["expected"]
    if not rules.get("expect_in_result", False):
        return float(all(result.get(key) == value for key, value in expected.items()))
    for key, value in expected.items():
        actual = result.get(key)
        if isinstance(value, list):
            if not isinstance(actual, list) or not any(v in actual for v in value):
                return 0.0
        elif isinstance(value, str):
            if not isinstance(actual, str | list | dict) or value not in actual:
                return 0.0
        else:
            return 0.0
    return 1.0


def check_list(result: str | None, rules: dict[str, list[str]]) -> float:
    """1.0 when each `expect` regex matches some line of the file and no `unexpect` one does."""
    if result is None or not Path(result).is_file():
        return 0.0
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    lines = _read_text(result).splitlines()
    if any(p.search(line) for p in unexpect for line in lines):
        return 0.0
    return float(all(any(p.search(line) for line in lines) for p in expect))


def match_record(pattern: dict[str, Any], record: dict[str, Any]) -> bool:
    """True when the record has every key of the pattern with the same value."""
    return all(key in record and record[key] == value for key, value in pattern.items())


def check_line_number(result: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the number of lines holding a clock time (HH:MM:SS) is `expected`."""
    if result is None or not Path(result).is_file():
        return 0.0
    clock = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d")
    count = sum(1 for line in _read_text(result).splitlines() if clock.search(line))
    return float(count == int(rules["expected"]))


def compare_python_pure_text(result: str | None, expected: str | None) -> float:
    """1.0 when two source files are equal once every whitespace character is removed."""
    if not result or not expected or not Path(result).is_file():
        return 0.0
    return float("".join(_read_text(result).split()) == "".join(_read_text(expected).split()))


def compare_result_files(result: str | None, expected: str | None) -> float:
    """1.0 when the result file holds the expected answer: the same number (±1e-4), the
    expected number somewhere in its text, or the same text."""
    if not result or not expected or not Path(result).is_file():
        return 0.0
    got, want = _read_text(result).strip(), _read_text(expected).strip()
    try:
        want_number = float(want)
    except ValueError:
        return float(got == want)
    if want in got:  # an answer may come with words around the number
        return 1.0
    try:
        return float(abs(float(got) - want_number) < 1e-4)
    except ValueError:
        return 0.0


def compare_time_in_speedtest_results(result: str | None, time_diff: Any) -> float:
    """1.0 when the first record of a speedtest CSV was taken within `time_diff` minutes of now.

    The time is the last five characters (HH:MM) of the second field of the second line,
    compared with the local clock as OSWorld does (the date is not compared).
    """
    if not result or not Path(result).is_file():
        return 0.0
    lines = _read_text(result).splitlines()
    try:
        stamp = lines[1].split(",")[1].strip()[-5:]
        taken = datetime.datetime.strptime(stamp, "%H:%M")
    except (IndexError, ValueError):
        return 0.0
    now = datetime.datetime.now()
    minutes = abs(taken.hour * 60 + taken.minute - (now.hour * 60 + now.minute))
    return float(min(minutes, 24 * 60 - minutes) < int(time_diff))


_A11Y_PREFIXES = ("st", "attr", "cp", "doc", "docattr", "txt", "val", "act")
_A11Y_NS = "https://accessibility.ubuntu.example.org/ns/"
_A11Y_DEFAULT = {
    "st": _A11Y_NS + "state",
    "attr": _A11Y_NS + "attributes",
    "cp": _A11Y_NS + "component",
    "doc": _A11Y_NS + "document",
    "docattr": _A11Y_NS + "document/attributes",
    "txt": _A11Y_NS + "text",
    "val": _A11Y_NS + "value",
    "act": _A11Y_NS + "action",
}


def check_accessibility_tree(result: str | None, rules: list[dict[str, Any]]) -> float:
    """Product over rules of how well the elements a CSS selector (or XPath) finds in the
    accessibility tree match the rule's `text` (1 when found and no text is asked).

    A rule is {"selectors": [css, ...]} or {"xpath": str}, optional "text" and "exact"
    (default true; false scores the best fuzzy ratio). No element found scores 0.
    """
    if not result:
        return 0.0
    from lxml import etree
    from lxml.cssselect import CSSSelector

    root = etree.fromstring(result.encode("utf-8"))
    declared = {k: v for k, v in root.nsmap.items() if k in _A11Y_PREFIXES}
    namespaces = {**_A11Y_DEFAULT, **declared}
    score = 1.0
    for rule in rules:
        if "xpath" in rule:
            elements = root.xpath(rule["xpath"], namespaces=namespaces)
        elif "selectors" in rule:
            elements = CSSSelector(", ".join(rule["selectors"]), namespaces=namespaces)(root)
        else:
            raise TaskError("check_accessibility_tree: a rule needs `selectors` or `xpath`")
        if not elements:
            return 0.0
        if "text" in rule:
            texts = [e.text or "" for e in elements if isinstance(e, etree._Element)]
            if rule.get("exact", True):
                best = float(rule["text"] in texts)
            else:
                best = max((fuzz.ratio(rule["text"], t) / 100.0 for t in texts), default=0.0)
            score *= best
    return score


_SQL_SECONDS = 10.0  # a task's query is untrusted: it may not run forever


def run_sqlite3(result: str | None, rules: dict[str, Any]) -> float:
    """The first column of the first row the task's `sql` returns on the SQLite file (0 if none).

    The database is opened read-only and the query may not attach other files, so a
    task's SQL reads only the file the getter fetched.
    """
    if result is None or not Path(result).is_file():
        return 0.0
    uri = Path(result).resolve().as_uri() + "?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    try:
        connection.set_authorizer(_sql_authorizer)
        deadline = time.monotonic() + _SQL_SECONDS
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        row = connection.execute(str(rules["sql"])).fetchone()
    finally:
        connection.close()
    if not row:
        return 0.0
    return float(row[0] or 0)


def _sql_authorizer(action: int, *args: Any) -> int:
    refused = (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA)
    return sqlite3.SQLITE_DENY if action in refused else sqlite3.SQLITE_OK


METRICS: dict[str, Any] = {
    "exact_match": exact_match,
    "is_in_list": is_in_list,
    "literal_match": literal_match,
    "check_include_exclude": check_include_exclude,
    "fuzzy_match": fuzzy_match,
    "check_json": check_json,
    "diff_text_file": diff_text_file,
    "file_contains": file_contains,
    "file_exists": file_exists,
    "check_direct_json_object": check_direct_json_object,
    "check_list": check_list,
    "check_line_number": check_line_number,
    "compare_python_pure_text": compare_python_pure_text,
    "compare_result_files": compare_result_files,
    "compare_time_in_speedtest_results": compare_time_in_speedtest_results,
    "check_accessibility_tree": check_accessibility_tree,
    "run_sqlite3": run_sqlite3,
}
