"""Metrics on the desktop's own state with OSWorld's names: GNOME settings read with
gsettings, the time zone, the clipboard, folder listings and Desktop launchers."""

from __future__ import annotations

import ast
from typing import Any

from runtime.errors import TaskError

__all__ = [
    "METRICS",
    "check_gnome_favorite_apps",
    "check_moved_jpgs",
    "check_text_enlarged",
    "is_in_vm_clickboard",
    "is_shortcut_on_desktop",
    "is_utc_0",
    "parse_gvariant_strings",
]


def parse_gvariant_strings(text: str) -> list[str]:
    """A string list as `gsettings get` prints it (`['a', 'b']`, or `@as []` when empty)."""
    text = text.strip()
    if text.startswith("@as "):
        text = text[len("@as ") :]
    value = ast.literal_eval(text)  # a literal, never code (OSWorld used eval)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not a list of strings: {text!r}")
    return list(value)


def check_gnome_favorite_apps(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the dock's favourites (`gsettings get org.gnome.shell favorite-apps`) are
    exactly the `expected` apps, in any order."""
    if not result:
        return 0.0
    apps = parse_gvariant_strings(result)
    expected = list(rule["expected"])
    return float(len(apps) == len(expected) and set(apps) == set(expected))


def is_utc_0(result: str | None) -> float:
    """1.0 when `timedatectl status` reports a time zone at offset +0000."""
    if not result:
        return 0.0
    for line in result.splitlines():
        if line.strip().startswith("Time zone:"):
            return float(line.rstrip().endswith("+0000)"))
    return 0.0


def check_text_enlarged(result: str | None) -> float:
    """1.0 when GNOME's text scaling factor (a gsettings double) is above 1."""
    if not result:
        return 0.0
    return float(float(result.strip()) > 1.0)


def check_moved_jpgs(result: dict[str, Any] | None, rule: dict[str, Any]) -> float:
    """1.0 when a folder listing (list_directory) holds exactly the `expected` names."""
    if not isinstance(result, dict) or "children" not in result:
        return 0.0
    names = [child["name"] for child in result["children"]]
    expected = list(rule["expected"])
    return float(len(names) == len(expected) and set(names) == set(expected))


def is_in_vm_clickboard(rule: dict[str, Any], clipboard: str | None) -> float:
    """1.0 when the clipboard text holds the `expected` string (or every one of a list).

    OSWorld's tasks give the rule as `result` and the clipboard command as `expected`,
    so the rule comes first.
    """
    if clipboard is None:
        return 0.0
    expected = rule["expected"]
    wanted = expected if isinstance(expected, list) else [expected]
    return float(all(str(w) in clipboard for w in wanted))


def is_shortcut_on_desktop(result: dict[str, str] | None, rule: dict[str, Any]) -> float:
    """1.0 when a Desktop launcher (shortcuts_on_desktop) has `Name=` the rule's `name`."""
    if rule.get("type") != "name":
        raise TaskError(f"is_shortcut_on_desktop: rule type {rule.get('type')!r} is not supported")
    entries = (result or {}).values()
    return float(any(f"Name={rule['name']}" in text.splitlines() for text in entries))


METRICS: dict[str, Any] = {
    "check_gnome_favorite_apps": check_gnome_favorite_apps,
    "is_utc_0": is_utc_0,
    "check_text_enlarged": check_text_enlarged,
    "check_moved_jpgs": check_moved_jpgs,
    "is_in_vm_clickboard": is_in_vm_clickboard,
    "is_shortcut_on_desktop": is_shortcut_on_desktop,
}
