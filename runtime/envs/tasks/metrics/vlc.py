"""VLC metrics with OSWorld's names: its saved settings (`vlcrc`), what its HTTP interface
says is playing, its window against the screen, and videos compared frame by frame.

VLC writes every option to `vlcrc` when it saves its preferences: a changed one as
`key=value`, the others commented out with their default (`#qt-bgcone=1`). The `check_qt_*`
family reads the last line naming the key, commented or not, with VLC's default when no line
does; `is_vlc_recordings_folder` reads only a set (uncommented) `input-record-path`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
from PIL import Image

__all__ = [
    "METRICS",
    "vlcrc_value",
    "check_global_key_play_pause",
    "check_one_instance_when_started_from_file",
    "check_qt_bgcone",
    "check_qt_max_volume",
    "check_qt_minimal_view",
    "check_qt_slider_colours",
    "compare_videos",
    "is_vlc_fullscreen",
    "is_vlc_playing",
    "is_vlc_recordings_folder",
]

# VLC 3's defaults for the options OSWorld's tasks check.
_DEFAULTS = {
    "qt-bgcone": "1",
    "qt-max-volume": "125",
    "qt-minimal-view": "0",
    "qt-slider-colours": "153;210;153;20;210;20;255;199;15;245;39;29",
    "one-instance-when-started-from-file": "1",
    "global-key-play-pause": "",
}


def vlcrc_value(text: str, key: str, *, commented: bool = True) -> str | None:
    """The value the last line of a vlcrc gives `key` (`#key=v` counts if `commented`)."""
    value = None
    for line in text.splitlines():
        if line.startswith("#"):
            if not commented:
                continue
            line = line[1:]
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key:
            value = rest.strip()
    return value


def _setting(result: str | None, key: str) -> str | None:
    """What VLC's saved config sets `key` to (its default when unsaved); None without a file."""
    if result is None:
        return None
    text = Path(result).read_bytes().decode("utf-8", errors="replace")
    found = vlcrc_value(text, key)
    return _DEFAULTS[key] if found is None else found


def _expect(rule: dict[str, Any], name: str) -> str:
    return str(rule[name])  # tasks write 0/1 as numbers, vlcrc holds text


def check_qt_bgcone(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the splash-screen cone setting (`qt-bgcone`) is the expected one."""
    found = _setting(result, "qt-bgcone")
    return float(found is not None and found == _expect(rule, "expected_qt_bgcone"))


def check_qt_max_volume(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the maximum volume (`qt-max-volume`) is the expected one."""
    found = _setting(result, "qt-max-volume")
    return float(found is not None and found == _expect(rule, "expected_qt_max_volume"))


def check_qt_minimal_view(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the minimal view (`qt-minimal-view`, no toolbar) is as expected."""
    found = _setting(result, "qt-minimal-view")
    return float(found is not None and found == _expect(rule, "expected_qt_minimal_view"))


def check_one_instance_when_started_from_file(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when `one-instance-when-started-from-file` is the expected one."""
    found = _setting(result, "one-instance-when-started-from-file")
    want = _expect(rule, "expected_one_instance_when_started_from_file")
    return float(found is not None and found == want)


def check_global_key_play_pause(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when a global play/pause hotkey is set (expected 1) or unset (expected 0)."""
    found = _setting(result, "global-key-play-pause")
    if found is None:
        return 0.0
    return float(("1" if found else "0") == _expect(rule, "expected_global_key_play_pause"))


def check_qt_slider_colours(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the volume slider colours match `expected_qt_slider_colours` (type `match`)
    or are all blackish, every RGB component below 100 (type `blackish`)."""
    found = _setting(result, "qt-slider-colours")
    if found is None:
        return 0.0
    if rule["type"] == "match":
        return float(found == rule["expected_qt_slider_colours"])
    if rule["type"] == "blackish":
        values = [int(v) for v in found.split(";")]
        colours = list(zip(values[0::3], values[1::3], values[2::3], strict=False))
        return float(all(c < 100 for colour in colours for c in colour))
    return 0.0


def is_vlc_recordings_folder(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when VLC's recordings folder (`input-record-path`) is `recording_file_path`."""
    if result is None:
        return 0.0
    text = Path(result).read_bytes().decode("utf-8", errors="replace")
    for line in text.splitlines():  # OSWorld takes the first set line that names it
        if not line.startswith("#") and "input-record-path" in line:
            return float(line.partition("=")[2].strip() == rule["recording_file_path"])
    return 0.0


def is_vlc_playing(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when VLC's status (its HTTP interface's status.xml) is playing the expected media:
    rule type `file_name` (the file name ends with it) or `url` (the URL ends with it)."""
    if result is None:
        return 0.0
    root = ElementTree.fromstring(Path(result).read_bytes())
    if root.findtext("state") != "playing":
        return 0.0
    fields = {"file_name": "filename", "url": "url"}  # rule type -> status.xml meta field
    kind = rule.get("type")
    if kind not in fields:
        return 0.0
    info = root.find(f"information/category[@name='meta']/info[@name='{fields[kind]}']")
    value = info.text if info is not None else None
    return float(bool(value) and value.endswith(rule[kind]))


def is_vlc_fullscreen(result: dict[str, int] | None, expected: dict[str, int] | None) -> float:
    """1.0 when VLC's window is exactly the screen's size (as `vm_window_size` and
    `vm_screen_size` give them, in either order)."""
    if not result or not expected:
        return 0.0
    return float(
        result.get("width") == expected.get("width")
        and result.get("height") == expected.get("height")
    )


def _phash_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Hamming distance of the perceptual hashes of two BGR frames."""
    import cv2
    import imagehash

    ha = imagehash.phash(Image.fromarray(cv2.cvtColor(a, cv2.COLOR_BGR2RGB)))
    hb = imagehash.phash(Image.fromarray(cv2.cvtColor(b, cv2.COLOR_BGR2RGB)))
    return int(ha - hb)


def compare_videos(
    result: str | None, expected: str | None, max_frames_to_check: int = 100, threshold: int = 5
) -> float:
    """1.0 when two videos look the same: over their first `max_frames_to_check` frames, at
    most `threshold` frames differ by more than `threshold` bits of perceptual hash, and if
    either ends within them, both end at the same frame."""
    import cv2

    if not result or not expected:
        return 0.0
    a, b = cv2.VideoCapture(result), cv2.VideoCapture(expected)
    try:
        mismatches = 0
        for _ in range(max_frames_to_check):
            ok_a, frame_a = a.read()
            ok_b, frame_b = b.read()
            if not ok_a or not ok_b:
                return float(ok_a == ok_b)
            if _phash_distance(frame_a, frame_b) > threshold:
                mismatches += 1
                if mismatches > threshold:
                    return 0.0
        return 1.0
    finally:
        a.release()
        b.release()


METRICS = {
    "is_vlc_playing": is_vlc_playing,
    "is_vlc_recordings_folder": is_vlc_recordings_folder,
    "is_vlc_fullscreen": is_vlc_fullscreen,
    "compare_videos": compare_videos,
    "check_qt_bgcone": check_qt_bgcone,
    "check_qt_max_volume": check_qt_max_volume,
    "check_qt_minimal_view": check_qt_minimal_view,
    "check_qt_slider_colours": check_qt_slider_colours,
    "check_one_instance_when_started_from_file": check_one_instance_when_started_from_file,
    "check_global_key_play_pause": check_global_key_play_pause,
}
