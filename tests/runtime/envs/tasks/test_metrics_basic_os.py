"""The OS metrics on what the desktop's commands print (gsettings, timedatectl, xsel) and
on folder listings and Desktop launchers."""

from __future__ import annotations

import pytest

from runtime.envs.tasks.metrics import METRICS
from runtime.errors import TaskError

TIMEDATECTL = """               Local time: Thu 2024-01-25 12:56:06 {abbr}
           Universal time: Thu 2024-01-25 12:56:06 UTC
                 RTC time: Thu 2024-01-25 12:56:05
                Time zone: {zone}
System clock synchronized: yes
              NTP service: inactive
          RTC in local TZ: no
"""


def test_is_utc_0():
    m = METRICS["is_utc_0"]
    assert m(TIMEDATECTL.format(abbr="WET", zone="Atlantic/Faroe (WET, +0000)")) == 1.0
    assert m(TIMEDATECTL.format(abbr="UTC", zone="Etc/UTC (UTC, +0000)")) == 1.0
    assert m(TIMEDATECTL.format(abbr="CET", zone="Europe/Paris (CET, +0100)")) == 0.0
    assert m("Failed to connect to bus: No such file or directory") == 0.0
    assert m("") == 0.0


def test_gsettings_values():
    m = METRICS["check_gnome_favorite_apps"]
    rule = {"expected": ["google-chrome.desktop", "thunderbird.desktop"]}
    assert m("['thunderbird.desktop', 'google-chrome.desktop']\n", rule) == 1.0
    assert m("['thunderbird.desktop', 'vim.desktop', 'google-chrome.desktop']", rule) == 0.0
    assert m("@as []", rule) == 0.0
    with pytest.raises(ValueError):
        m("__import__('os').system('true')", rule)  # a literal, never code
    assert METRICS["check_text_enlarged"]("1.25\n") == 1.0
    assert METRICS["check_text_enlarged"]("1.0") == 0.0


def test_check_moved_jpgs_and_clipboard():
    listing = {
        "type": "directory",
        "name": "cpjpg",
        "children": [{"type": "file", "name": n} for n in ("a.jpg", "b.jpg")],
    }
    m = METRICS["check_moved_jpgs"]
    assert m(listing, {"expected": ["b.jpg", "a.jpg"]}) == 1.0
    assert m(listing, {"expected": ["a.jpg"]}) == 0.0
    assert m({"error": "The provided path is not a directory"}, {"expected": []}) == 0.0
    clip = METRICS["is_in_vm_clickboard"]
    path = "/home/user/Data3/List3/secret.docx"
    assert clip({"expected": path}, path) == 1.0
    assert clip({"expected": [path, "Data3"]}, f"{path}\n") == 1.0
    assert clip({"expected": path}, "") == 0.0


def test_is_shortcut_on_desktop():
    launcher = "[Desktop Entry]\nVersion=1.0\nName=Play Puzzle Game 2048\nType=Link\n"
    m = METRICS["is_shortcut_on_desktop"]
    rule = {"type": "name", "name": "Play Puzzle Game 2048"}
    assert m({"2048.desktop": launcher}, rule) == 1.0
    assert m({"other.desktop": launcher.replace("2048", "1024")}, rule) == 0.0
    assert m({}, rule) == 0.0
    with pytest.raises(TaskError):
        m({}, {"type": "url", "url": "https://play2048.co"})
