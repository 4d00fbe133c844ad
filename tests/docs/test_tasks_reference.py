"""docs/tasks.md is the reference of the task vocabulary: its getter and metric tables name
every registered getter type and metric exactly once, and nothing that is not registered."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from runtime.envs.tasks.getters import GETTERS
from runtime.envs.tasks.metrics import UNAVAILABLE_METRICS, metric_names

TASKS_MD = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
_ROW = re.compile(r"^\|(?P<first>[^|]*)\|")
_NAME = re.compile(r"`([^`]+)`")


def table_entries(text: str) -> dict[str, list[str]]:
    """The backticked names in the first column of every table, by the table's header word
    ("getter", "metric", or another header such as "rule" or "family")."""
    entries: dict[str, list[str]] = {}
    kind: str | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        row = _ROW.match(line)
        if row is None:
            kind = None
            continue
        if kind is None:  # a table's header row, with its |---| separator under it
            next_line = lines[i + 1] if i + 1 < len(lines) else ""
            kind = row["first"].strip() if next_line.startswith("|-") else None
            entries.setdefault(kind or "", [])
            continue
        if set(row["first"].strip()) <= {"-", ":"}:
            continue
        entries[kind].extend(_NAME.findall(row["first"]))
    return entries


def check_reference(text: str) -> list[str]:
    """Every problem with the reference tables of `text`; empty when they match the registries."""
    entries = table_entries(text)
    everywhere = Counter(name for names in entries.values() for name in names)
    problems = []
    for kind, registered in (
        ("getter", set(GETTERS)),
        ("metric", set(metric_names()) | set(UNAVAILABLE_METRICS)),
    ):
        listed = set(entries.get(kind, []))
        problems += [f"{kind} `{n}` is not in docs/tasks.md" for n in sorted(registered - listed)]
        problems += [
            f"{kind} `{n}` is listed {everywhere[n]} times"
            for n in sorted(registered)
            if everywhere[n] > 1
        ]
        problems += [
            f"{kind} `{n}` is listed but not registered" for n in sorted(listed - registered)
        ]
    return problems


def test_every_getter_and_metric_is_listed_exactly_once() -> None:
    assert check_reference(TASKS_MD.read_text()) == []


def test_a_missing_or_doubled_or_unknown_row_is_caught() -> None:
    text = TASKS_MD.read_text()
    row = "| `compare_table` |"
    (line,) = [line for line in text.splitlines() if line.startswith(row)]
    without = text.replace(line + "\n", "")
    assert check_reference(without) == ["metric `compare_table` is not in docs/tasks.md"]
    twice = text.replace(line, f"{line}\n{line}")
    assert check_reference(twice) == ["metric `compare_table` is listed 2 times"]
    unknown = text.replace(line, f"{line}\n| `compare_nothing` | no such metric |")
    assert check_reference(unknown) == ["metric `compare_nothing` is listed but not registered"]
    getter = "| `vm_file` |"
    (line,) = [line for line in text.splitlines() if line.startswith(getter)]
    assert check_reference(text.replace(line + "\n", "")) == [
        "getter `vm_file` is not in docs/tasks.md"
    ]
