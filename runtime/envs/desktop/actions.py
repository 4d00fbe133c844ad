"""The agent's action space: validation, key-combo parsing and 1000x1000 grid rescaling.

Pure functions, no I/O. An action is a JSON object shaped like a computer-use tool input,
`{"action": "left_click", "coordinate": [x, y]}`, with coordinates on a 1000x1000 grid
(`GRID`). `parse_action` checks one and returns a normalised copy or raises `ActionError`
with a reason an agent (or its author) can act on; `to_pixels` rescales its coordinates to
a real screen for the desktop server, which executes pixel-space actions.
"""

from __future__ import annotations

import math
from typing import Any

from Xlib import XK

from runtime.errors import OutcomeError

__all__ = [
    "ACTIONS",
    "ActionError",
    "CLICKS",
    "GRID",
    "MAX_HOLD",
    "MAX_SCROLL",
    "MAX_TEXT",
    "MAX_WAIT",
    "POINTER",
    "SCROLL_DIRECTIONS",
    "TERMINAL",
    "char_keysym",
    "grid_to_pixels",
    "key_keysym",
    "parse_action",
    "parse_key_combos",
    "pixels_to_grid",
    "text_keysyms",
    "to_pixels",
]

GRID = 1000
MAX_TEXT = 100_000  # characters in one `type`/`write_file`: beyond this an agent is looping
MAX_WAIT = 60.0  # seconds one `wait` may take
MAX_HOLD = 30.0  # seconds one `hold_key` may take
MAX_SCROLL = 100  # wheel clicks in one `scroll`

CLICKS = {
    "left_click": (1, 1),
    "right_click": (3, 1),
    "middle_click": (2, 1),
    "double_click": (1, 2),
    "triple_click": (1, 3),
}
POINTER = {"mouse_move", "left_mouse_down", "left_mouse_up"}
TERMINAL = {"done", "answer", "fail"}
ACTIONS = (
    set(CLICKS)
    | POINTER
    | TERMINAL
    | {"left_click_drag", "key", "hold_key", "type", "scroll", "wait", "screenshot"}
    | {"cursor_position", "write_file"}
)
SCROLL_DIRECTIONS = ("up", "down", "left", "right")

_KEY_ALIASES = {
    "ctrl": "Control_L",
    "control": "Control_L",
    "lctrl": "Control_L",
    "rctrl": "Control_R",
    "alt": "Alt_L",
    "lalt": "Alt_L",
    "ralt": "Alt_R",
    "altgr": "ISO_Level3_Shift",
    "shift": "Shift_L",
    "lshift": "Shift_L",
    "rshift": "Shift_R",
    "super": "Super_L",
    "win": "Super_L",
    "windows": "Super_L",
    "meta": "Super_L",
    "cmd": "Super_L",
    "command": "Super_L",
    "enter": "Return",
    "return": "Return",
    "kp_enter": "KP_Enter",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    " ": "space",
    "backspace": "BackSpace",
    "bksp": "BackSpace",
    "del": "Delete",
    "delete": "Delete",
    "ins": "Insert",
    "insert": "Insert",
    "home": "Home",
    "end": "End",
    "pgup": "Prior",
    "pageup": "Prior",
    "page_up": "Prior",
    "prior": "Prior",
    "pgdn": "Next",
    "pagedown": "Next",
    "page_down": "Next",
    "next": "Next",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "capslock": "Caps_Lock",
    "caps_lock": "Caps_Lock",
    "numlock": "Num_Lock",
    "printscreen": "Print",
    "print": "Print",
    "prtsc": "Print",
    "menu": "Menu",
    "apps": "Menu",
    "plus": "plus",
    "minus": "minus",
}
_CONTROL_KEYSYMS = {"\n": XK.XK_Return, "\t": XK.XK_Tab}


class ActionError(OutcomeError, ValueError):
    """An action is malformed; the message says what to fix."""


def char_keysym(char: str) -> int:
    """Return the X keysym that types `char` (Latin-1 directly, the rest as Unicode keysyms)."""
    if char in _CONTROL_KEYSYMS:
        return _CONTROL_KEYSYMS[char]
    code = ord(char)
    if code < 0x20 or 0x7F <= code < 0xA0:
        raise ActionError(f"cannot type control character U+{code:04X}")
    if code <= 0xFF:
        return code
    return 0x01000000 | code


def text_keysyms(text: str) -> list[int]:
    """Return the keysyms that type `text` exactly; a CR is dropped (CRLF types one Return)."""
    return [char_keysym(c) for c in text if c != "\r"]


def key_keysym(name: str) -> int:
    """Return the keysym of one key name in xdotool/pyautogui spelling ("ctrl", "Return", "a")."""
    if not name:
        raise ActionError("empty key name")
    alias = _KEY_ALIASES.get(name.lower())
    if alias:
        return XK.string_to_keysym(alias)
    if len(name) == 1:
        return char_keysym(name)
    for candidate in (name, name.capitalize(), name.upper()):
        keysym = XK.string_to_keysym(candidate)
        if keysym:
            return keysym
    raise ActionError(f"unknown key {name!r} (use xdotool names such as ctrl, alt, Return, F5)")


def parse_key_combos(text: str) -> list[list[int]]:
    """Parse "ctrl+s" or "ctrl+a Delete" into keysym combos pressed one after another."""
    if not isinstance(text, str) or not text.strip():
        raise ActionError("key needs a non-empty `text` such as 'ctrl+s' or 'Return'")
    if text == " ":
        return [[XK.XK_space]]
    combos = []
    for combo in text.split():
        # "ctrl++" means ctrl and the plus key.
        parts = combo.split("+") if combo != "+" else ["+"]
        if combo.endswith("++"):
            parts = combo[:-2].split("+") + ["+"]
        combos.append([key_keysym(p) for p in parts if p != ""])
    return combos


def _coordinate(action: dict, field: str, required: bool) -> list[float] | None:
    value = action.get(field)
    if value is None:
        if required:
            raise ActionError(
                f"{action['action']} needs `{field}`: [x, y] on the {GRID}x{GRID} grid"
            )
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise ActionError(f"`{field}` must be [x, y] numbers, got {value!r}")
    x, y = float(value[0]), float(value[1])
    if not (math.isfinite(x) and math.isfinite(y) and 0 <= x <= GRID and 0 <= y <= GRID):
        raise ActionError(f"`{field}` {value!r} is outside the {GRID}x{GRID} grid")
    return [x, y]


def _number(action: dict, field: str, default: float | None, low: float, high: float) -> float:
    value = action.get(field, default)
    if value is None:
        raise ActionError(f"{action['action']} needs `{field}`")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ActionError(f"`{field}` must be a number, got {value!r}")
    if not low <= value <= high:
        raise ActionError(f"`{field}` must be between {low} and {high}, got {value}")
    return float(value)


def _text(action: dict, required: bool = True) -> str:
    value = action.get("text")
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ActionError(f"{action['action']} needs `text` as a string")
    if len(value) > MAX_TEXT:
        raise ActionError(f"`text` is longer than {MAX_TEXT} characters")
    return value


def parse_action(action: Any) -> dict:
    """Validate one action and return a normalised copy; raise ActionError if it is invalid."""
    if not isinstance(action, dict):
        raise ActionError(f"an action must be a JSON object, got {type(action).__name__}")
    name = action.get("action")
    if name not in ACTIONS:
        raise ActionError(f"unknown action {name!r}; expected one of {', '.join(sorted(ACTIONS))}")
    out: dict[str, Any] = {"action": name}
    if name in CLICKS:
        out["coordinate"] = _coordinate(action, "coordinate", required=False)
        modifiers = _text(action, required=False)
        out["modifiers"] = [key_keysym(m) for m in modifiers.split("+") if m] if modifiers else []
    elif name == "mouse_move":
        out["coordinate"] = _coordinate(action, "coordinate", required=True)
    elif name in ("left_mouse_down", "left_mouse_up"):
        out["coordinate"] = _coordinate(action, "coordinate", required=False)
    elif name == "left_click_drag":
        out["start_coordinate"] = _coordinate(action, "start_coordinate", required=True)
        out["coordinate"] = _coordinate(action, "coordinate", required=True)
    elif name == "key":
        out["text"] = _text(action)
        out["combos"] = parse_key_combos(out["text"])
    elif name == "hold_key":
        out["text"] = _text(action)
        out["combos"] = parse_key_combos(out["text"])
        out["duration"] = _number(action, "duration", 1.0, 0.0, MAX_HOLD)
    elif name == "type":
        out["text"] = _text(action)
        text_keysyms(out["text"])
    elif name == "scroll":
        out["coordinate"] = _coordinate(action, "coordinate", required=False)
        direction = action.get("scroll_direction", "down")
        if direction not in SCROLL_DIRECTIONS:
            raise ActionError(
                f"`scroll_direction` must be one of {SCROLL_DIRECTIONS}, got {direction!r}"
            )
        out["scroll_direction"] = direction
        out["scroll_amount"] = int(_number(action, "scroll_amount", 3, 1, MAX_SCROLL))
    elif name == "wait":
        out["duration"] = _number(action, "duration", 1.0, 0.0, MAX_WAIT)
    elif name == "answer":
        out["text"] = _text(action)
    elif name == "done":
        out["text"] = _text(action, required=False)
    elif name == "fail":
        out["text"] = _text(action, required=False)
    elif name == "write_file":
        path = _text(action)
        if not path.startswith(("/", "~")):
            raise ActionError(f"write_file `text` must be an absolute path, got {path!r}")
        content = action.get("content")
        if not isinstance(content, str):
            raise ActionError("write_file needs `content` as a string")
        out["text"] = path
        out["content"] = content
    return out


def grid_to_pixels(coordinate: list[float], size: tuple[int, int]) -> tuple[int, int]:
    """Map a point on the 1000x1000 grid to a pixel on a `size` (width, height) screen."""
    width, height = size
    x = min(width - 1, max(0, round(coordinate[0] * width / GRID)))
    y = min(height - 1, max(0, round(coordinate[1] * height / GRID)))
    return x, y


def pixels_to_grid(position: tuple[int, int], size: tuple[int, int]) -> tuple[int, int]:
    """Map a pixel on a `size` screen back to the 1000x1000 grid."""
    return round(position[0] * GRID / size[0]), round(position[1] * GRID / size[1])


def to_pixels(action: dict, size: tuple[int, int]) -> dict:
    """Return a parsed action with its grid coordinates rescaled to pixels on `size`."""
    out = dict(action)
    for field in ("coordinate", "start_coordinate"):
        if out.get(field) is not None:
            out[field] = list(grid_to_pixels(out[field], size))
    return out
