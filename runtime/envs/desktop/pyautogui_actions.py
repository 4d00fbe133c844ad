"""Pixel-space actions as commands for a server without `/scalecua/action` (an OSWorld VM).

OSWorld's own agents act by sending pyautogui code to `/execute`; this module writes that
code for one parsed action (coordinates already in pixels), so the controller can drive
any OSWorld server. Text is typed by vm_typer.py with the text as an argv element:
pyautogui types ASCII only, and `xdotool type` drops characters it remaps in slow
clients. Every value is embedded with `repr` or passed in argv, never formatted in.
"""

from __future__ import annotations

import functools
from pathlib import Path

from Xlib import XK

from runtime.envs.desktop.actions import CLICKS

__all__ = ["action_command", "pyautogui_key"]

_BUTTONS = {1: "left", 2: "middle", 3: "right"}
_KEY_NAMES = {
    "Control_L": "ctrl",
    "Control_R": "ctrlright",
    "Alt_L": "alt",
    "Alt_R": "altright",
    "Shift_L": "shift",
    "Shift_R": "shiftright",
    "Super_L": "win",
    "Super_R": "winright",
    "Return": "enter",
    "KP_Enter": "enter",
    "Escape": "esc",
    "BackSpace": "backspace",
    "Delete": "delete",
    "Insert": "insert",
    "Tab": "tab",
    "ISO_Left_Tab": "tab",
    "space": "space",
    "Prior": "pageup",
    "Next": "pagedown",
    "Home": "home",
    "End": "end",
    "Up": "up",
    "Down": "down",
    "Left": "left",
    "Right": "right",
    "Caps_Lock": "capslock",
    "Num_Lock": "numlock",
    "Print": "printscreen",
    "Menu": "apps",
}


def pyautogui_key(keysym: int) -> str:
    """Return pyautogui's name for the key with this keysym."""
    if 0x20 < keysym < 0x7F:
        return chr(keysym).lower() if chr(keysym).isalpha() else chr(keysym)
    name = _keysym_names().get(keysym, "")
    return _KEY_NAMES.get(name, name.lower())


@functools.cache
def _typer_source() -> str:
    return Path(__file__).with_name("vm_typer.py").read_text()


@functools.cache
def _keysym_names() -> dict[int, str]:
    # python-xlib has name -> keysym only; invert it once (first name wins, as in X).
    names: dict[int, str] = {}
    for attr, value in vars(XK).items():
        if attr.startswith("XK_") and isinstance(value, int):
            names.setdefault(value, attr[3:])
    return names


def action_command(action: dict) -> list[str]:
    """Return the argv that performs one pixel-space action on an OSWorld desktop."""
    name = action["action"]
    if name == "type":
        return ["python", "-c", _typer_source(), action["text"]]
    return ["python", "-c", "import pyautogui, time; pyautogui.FAILSAFE = False; " + _code(action)]


def _code(a: dict) -> str:
    name = a["action"]
    point = a.get("coordinate")
    at = f"{point[0]!r}, {point[1]!r}" if point else "None, None"
    if name in CLICKS:
        button, count = CLICKS[name]
        keys = [pyautogui_key(k) for k in a.get("modifiers") or []]
        click = f"pyautogui.click({at}, clicks={count}, interval=0.05, button={_BUTTONS[button]!r})"
        return _holding(keys, click)
    if name == "mouse_move":
        return f"pyautogui.moveTo({at})"
    if name == "left_mouse_down":
        return f"pyautogui.mouseDown({at}, button='left')"
    if name == "left_mouse_up":
        return f"pyautogui.mouseUp({at}, button='left')"
    if name == "left_click_drag":
        start = a["start_coordinate"]
        return (
            f"pyautogui.moveTo({start[0]!r}, {start[1]!r}); "
            f"pyautogui.dragTo({at}, duration=0.3, button='left')"
        )
    if name == "scroll":
        amount = int(a["scroll_amount"])
        direction = a["scroll_direction"]
        clicks = amount if direction in ("up", "left") else -amount
        fn = "scroll" if direction in ("up", "down") else "hscroll"
        return f"pyautogui.{fn}({clicks!r}, {at})"
    if name == "key":
        return "; ".join(
            f"pyautogui.hotkey(*{[pyautogui_key(k) for k in combo]!r})" for combo in a["combos"]
        )
    if name == "hold_key":
        keys = [pyautogui_key(k) for combo in a["combos"] for k in combo]
        return _holding(keys, f"time.sleep({float(a['duration'])!r})")
    if name == "cursor_position":
        return "pass"
    raise ValueError(f"no pyautogui form for {name!r}")


def _holding(keys: list[str], body: str) -> str:
    down = "".join(f"pyautogui.keyDown({k!r}); " for k in keys)
    up = "".join(f"; pyautogui.keyUp({k!r})" for k in reversed(keys))
    return down + body + up
