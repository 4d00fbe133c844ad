"""Table-shaped answers outside `compare_table`, with OSWorld's names and semantics.

- `compare_csv`: two text files (CSV exports) have the same lines; `strict=False` strips
  each line, `ignore_case` lower-cases them.
- `check_csv`: a CSV file (read with its header row) has, for every `expect` record, a row
  agreeing on all of its keys, and no row agreeing with an `unexpect` record.
- `compare_conference_city_in_order`: the active sheet's C2:C22 hold, in order, text
  containing each expected city (or one of a list of spellings).
- `fuzzy_place_math`: a document's text is exactly three words (whitespace-separated),
  and the score is their mean best fuzzy ratio against the expected places.
"""

from __future__ import annotations

import csv
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openpyxl
from rapidfuzz import fuzz

__all__ = [
    "METRICS",
    "check_csv",
    "compare_conference_city_in_order",
    "compare_csv",
    "fuzzy_place_math",
]


def _lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()


def compare_csv(result: str | None, expected: str, **options: Any) -> float:
    """1.0 when both files have the same lines (after `strict`/`ignore_case` folding)."""
    if result is None or not Path(result).is_file():
        return 0.0
    got, want = _lines(result), _lines(expected)
    if not options.get("strict", True):
        got, want = [line.strip() for line in got], [line.strip() for line in want]
    if options.get("ignore_case", False):
        got, want = [line.lower() for line in got], [line.lower() for line in want]
    return float(got == want)


def check_csv(result: str | None, rules: dict[str, Any]) -> float:
    """1.0 when every `expect` record is matched by a row and no row matches an `unexpect`."""
    if result is None or not Path(result).is_file():
        return 0.0
    expect = rules.get("expect", [])
    unexpect = rules.get("unexpect", [])
    found = [False] * len(expect)
    with open(result, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(f):
            for i, pattern in enumerate(expect):
                found[i] = found[i] or _matches(pattern, row)
            if any(_matches(pattern, row) for pattern in unexpect):
                return 0.0
    return float(all(found))


def _matches(pattern: dict[str, Any], row: dict[str, Any]) -> bool:
    return all(key in row and row[key] == value for key, value in pattern.items())


def compare_conference_city_in_order(result: str | None, expected: dict[str, Any]) -> float:
    """1.0 when C2:C22 of the active sheet name the expected cities in order."""
    if result is None or not Path(result).is_file():
        return 0.0
    try:
        sheet = openpyxl.load_workbook(result).active
    except (zipfile.BadZipFile, KeyError, OSError, ValueError):
        return 0.0
    cities = expected["expected"]
    actual = [cell.value for row in sheet["C2:C22"] for cell in row]
    if len(cities) < len(actual):
        return 0.0  # OSWorld's loop reads past the list and fails
    for want, got in zip(cities, actual, strict=False):
        if not isinstance(got, str):
            return 0.0
        options = [want] if isinstance(want, str) else want
        if not isinstance(options, list) or not any(str(o) in got for o in options):
            return 0.0
    return 1.0


def fuzzy_place_math(result: str | None, rules: dict[str, Any]) -> float:
    """Mean best fuzzy ratio of the document's words to the expected places; 0.0 unless
    the document holds exactly three words."""
    if result is None or not Path(result).is_file():
        return 0.0
    import docx

    try:
        document = docx.Document(result)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError):
        return 0.0
    words = [w for p in document.paragraphs for w in p.text.split()]
    if len(words) != 3:
        return 0.0
    answers = rules["expected"]
    return sum(max((fuzz.ratio(w, a) / 100.0 for a in answers), default=0.0) for w in words) / 3


METRICS: dict[str, Callable[..., float]] = {
    "compare_csv": compare_csv,
    "check_csv": check_csv,
    "compare_conference_city_in_order": compare_conference_city_in_order,
    "fuzzy_place_math": fuzzy_place_math,
}
