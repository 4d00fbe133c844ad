"""Thunderbird metrics with OSWorld's names: preferences (prefs.js), message filters
(msgFilterRules.dat) and mail folders (mbox files)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runtime.envs.tasks.metrics.general import match_record, match_value_to_rule

__all__ = [
    "METRICS",
    "check_thunderbird_filter",
    "check_thunderbird_folder",
    "check_thunderbird_prefs",
    "read_filters",
    "read_prefs",
]

# One line of prefs.js: user_pref("key", value);  (the value is a JSON literal)
_PREF = re.compile(r'^user_pref\("(?P<key>(?:[^"\\]|\\.)+)",\s*(?P<value>.+)\);$')


def read_prefs(text: str) -> dict[str, Any]:
    """The preferences a prefs.js (or user.js) sets, by key; unreadable lines are skipped."""
    prefs: dict[str, Any] = {}
    for line in text.splitlines():
        match = _PREF.match(line.strip())
        if match is None:
            continue
        try:
            prefs[json.loads(f'"{match["key"]}"')] = json.loads(match["value"])
        except ValueError:
            continue
    return prefs


def check_thunderbird_prefs(result: str | None, rule: dict[str, dict[str, Any]]) -> float:
    """1.0 when every `expect` preference is set and matches its rule and no `unexpect`
    preference that is set matches its rule (`{"key": {"method", "ref"}}` each)."""
    if result is None or not Path(result).is_file():
        return 0.0
    prefs = read_prefs(Path(result).read_text(encoding="utf-8", errors="replace"))
    expect, unexpect = rule.get("expect", {}), rule.get("unexpect", {})
    if not all(key in prefs and match_value_to_rule(prefs[key], r) for key, r in expect.items()):
        return 0.0
    return float(
        not any(
            key in prefs and key not in expect and match_value_to_rule(prefs[key], r)
            for key, r in unexpect.items()
        )
    )


# A filter condition: `AND (subject,contains,discount)`, `OR (from,is,"a, b")` or `ALL`.
_CONDITION = re.compile(r'\b(?:AND|OR) \([\w ]+,[\w \']+,(?:"(?:[^"]|\\")+"|[^)]+)\)|\bALL\b')


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value.replace('\\"', '"').replace("\\\\", "\\")


def read_filters(text: str) -> list[dict[str, Any]]:
    """The filters of a msgFilterRules.dat: name, enabled, type, conditions and actions.

    A filter starts at its `name=` line; each `action=` line starts an action whose value
    is the following `actionValue=`; `condition` is the list of its parts (see _CONDITION).
    """
    filters: list[dict[str, Any]] = []
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        value = _unquote(raw)
        if key == "name":
            filters.append({"name": value, "actions": []})
        elif not filters:
            continue  # the file's header (version, logging)
        elif key == "action":
            filters[-1]["actions"].append({"action": value})
        elif key == "actionValue" and filters[-1]["actions"]:
            filters[-1]["actions"][-1]["actionValue"] = value
        elif key == "condition":
            filters[-1]["condition"] = _CONDITION.findall(value)
        elif key in ("enabled", "type"):
            filters[-1][key] = value
    return filters


def _filter_matches(pattern: dict[str, Any], flt: dict[str, Any]) -> bool:
    """A rule's filter fields must all match, its action fields those of one action."""
    action_keys = {"action", "actionValue"}
    own = {k: v for k, v in pattern.items() if k not in action_keys}
    acts = {k: v for k, v in pattern.items() if k in action_keys}
    if not match_record(own, flt):
        return False
    return not acts or any(match_record(acts, a) for a in flt["actions"])


def check_thunderbird_filter(result: str | None, rules: dict[str, list[dict[str, Any]]]) -> float:
    """1.0 when each `expect` record matches a filter and no `unexpect` record matches any.

    Records name `name`, `enabled` ("yes"/"no"), `type`, `condition` (a list such as
    ["AND (subject,contains,discount)"] or ["ALL"]), `action` and `actionValue`.
    """
    if result is None or not Path(result).is_file():
        return 0.0
    filters = read_filters(Path(result).read_text(encoding="utf-8", errors="replace"))
    expect, unexpect = rules.get("expect", []), rules.get("unexpect", [])
    if any(_filter_matches(r, f) for r in unexpect for f in filters):
        return 0.0
    return float(all(any(_filter_matches(r, f) for f in filters) for r in expect))


_STATUS = re.compile(r"^X-Mozilla-Status2?:.*\n?", re.MULTILINE)
_KEYS = re.compile(r"^X-Mozilla-Keys:.*\n?", re.MULTILINE)
_DELETED = re.compile(r"^X-Mozilla-Status: 000[89]", re.MULTILINE)
_SEPARATOR = re.compile(r"^From ", re.MULTILINE | re.IGNORECASE)


def _messages(path: str, options: dict[str, Any]) -> list[str]:
    """The messages of an mbox file, normalised by the comparison options, sorted."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    starts = [m.start() for m in _SEPARATOR.finditer(text)]
    chunks = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    messages = []
    for chunk in chunks:
        body = chunk.split("\n", 1)[1] if "\n" in chunk else ""  # the separator line holds a date
        if options.get("remove_deleted", True) and _DELETED.search(body):
            continue
        if options.get("ignore_status", False):
            body = _STATUS.sub("", body)
        if options.get("ignore_keys", False):
            body = _KEYS.sub("", body)
        messages.append(body.strip())
    if options.get("remove_duplicate", True):
        messages = list(set(messages))
    return sorted(messages)


def check_thunderbird_folder(result: Any, reference: Any, **options: Any) -> float:
    """1.0 when each mail folder file (mbox) holds the same messages as its reference.

    Options as OSWorld's: `ignore_status` and `ignore_keys` drop the X-Mozilla-Status and
    X-Mozilla-Keys headers, `remove_deleted` (default true) skips deleted messages,
    `remove_duplicate` (default true) compares the sets of messages. The `From ` line that
    starts a message (it carries the delivery date) is not compared.
    """
    results = result if isinstance(reference, list) else [result]
    references = reference if isinstance(reference, list) else [reference]
    if not isinstance(results, list) or len(results) != len(references):
        return 0.0
    for got, want in zip(results, references, strict=True):
        if got is None or not Path(got).is_file():
            return 0.0
        if _messages(got, options) != _messages(want, options):
            return 0.0
    return 1.0


METRICS: dict[str, Any] = {
    "check_thunderbird_prefs": check_thunderbird_prefs,
    "check_thunderbird_filter": check_thunderbird_filter,
    "check_thunderbird_folder": check_thunderbird_folder,
}
