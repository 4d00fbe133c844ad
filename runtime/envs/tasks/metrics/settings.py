"""Metrics on app and desktop settings, with OSWorld's names: LibreOffice's user registry
(`registrymodifications.xcu`: Writer's default font, the autosave interval, Impress's
presenter console) and GNOME's text scaling.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

__all__ = [
    "METRICS",
    "check_auto_saving_time",
    "check_presenter_console_disable",
    "find_default_font",
    "registry_values",
]

_OOR = "http://openoffice.org/2001/registry"


def registry_values(xcu: str, item_path: str, prop: str) -> list[str]:
    """Every value LibreOffice's registry file records for `prop` under `item_path`, in order."""
    root = ET.parse(xcu).getroot()
    values = []
    for item in root.iter("item"):
        if item.get(f"{{{_OOR}}}path") != item_path:
            continue
        for node in item.iter("prop"):
            if node.get(f"{{{_OOR}}}name") == prop:
                value = node.find("value")
                values.append(value.text or "" if value is not None else "")
    return values


def _last(xcu: str | None, item_path: str, prop: str) -> str | None:
    """The value in force (the last one written), None when the file or the setting is absent."""
    if not xcu:
        return None
    try:
        values = registry_values(xcu, item_path, prop)
    except (ET.ParseError, OSError):
        return None
    return values[-1] if values else None


def find_default_font(xcu: str | None, rules: dict[str, Any]) -> float:
    """1.0 when Writer's default (Standard) font is `font_name`."""
    found = _last(xcu, "/org.openoffice.Office.Writer/DefaultFont", "Standard")
    return float(found == rules["font_name"])


def check_auto_saving_time(xcu: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the autosave interval is `minutes`, as OSWorld reads it (Common/Save/Document)."""
    found = _last(xcu, "/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall")
    try:
        return float(found is not None and int(found) == int(rules["minutes"]))
    except ValueError:
        return 0.0


def check_presenter_console_disable(xcu: str | None) -> float:
    """1.0 when Impress's presenter screen is switched off (EnablePresenterScreen false)."""
    found = _last(xcu, "/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen")
    return float(found is not None and found.strip().lower() == "false")


METRICS = {
    "find_default_font": find_default_font,
    "check_auto_saving_time": check_auto_saving_time,
    "check_presenter_console_disable": check_presenter_console_disable,
}
