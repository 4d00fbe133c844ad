"""Parse a policy response into one desktop action, or a structured reason why it cannot be.

The policy is prompted (see `runtime.policy.prompts`) to think in free text and then emit
exactly one tool call, as Qwen's computer-use agents do:

    The Save button is at the top left.
    <tool_call>
    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [52, 31]}}
    </tool_call>

`parse_action` returns the `arguments` object, validated, in the shape the desktop controller
takes (`{"action": "left_click", "coordinate": [52, 31]}`), with coordinates as ints on the
1000x1000 grid. Anything else returns a `ParseError` (a kind and a readable reason) that the
rollout records as a failed step; it never raises.

The compact prompt (small policies on a CPU budget) asks for the arguments object alone,
as the whole response — `{"action": "done"}` is 6 tokens for SmolLM2 where the tool call
is 30, and decoding is what a CPU rollout spends its time on. A response with no
`<tool_call>` block that is exactly one JSON object with an "action" is read that way, in
every variant; `format_action(action, style="json")` writes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACTION_ARGUMENTS",
    "GRID",
    "RESPONSE_STYLES",
    "ParseError",
    "format_action",
    "parse_action",
    "MAX_HOLD_S",
    "MAX_SCROLL",
    "MAX_TEXT",
    "MAX_WAIT_S",
    "TOOL_NAME",
]

GRID = 1000  # coordinates are on a GRID x GRID grid, rescaled to the screen by the controller
TOOL_NAME = "computer_use"
# Bounds no stricter than the desktop controller's (runtime.envs.desktop.actions), so an
# action accepted here is one the desktop executes.
MAX_WAIT_S = 60.0
MAX_HOLD_S = 30.0
MAX_SCROLL = 50
MAX_TEXT = 100_000

_CLICKS = ("left_click", "right_click", "middle_click", "double_click", "triple_click")
# action -> (required arguments, optional arguments)
ACTION_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # a click's optional text holds modifier keys held during it, e.g. "shift"
    **{name: (("coordinate",), ("text",)) for name in _CLICKS},
    "mouse_move": (("coordinate",), ()),
    # the left button may also go down or up where the cursor already is
    "left_mouse_down": ((), ("coordinate",)),
    "left_mouse_up": ((), ("coordinate",)),
    "left_click_drag": (("start_coordinate", "coordinate"), ()),
    "type": (("text",), ()),
    "key": (("text",), ()),
    "hold_key": (("text", "duration"), ()),
    "scroll": (("coordinate", "scroll_direction"), ("scroll_amount",)),
    "wait": ((), ("duration",)),
    "screenshot": ((), ()),
    "cursor_position": ((), ()),
    "done": ((), ("text",)),  # an optional closing remark
    "answer": (("text",), ()),
    "write_file": (("text", "content"), ()),  # text is an absolute path
    "fail": ((), ("text",)),
}
_KEY_TEXT = {*_CLICKS, "key", "hold_key"}  # actions whose text is a key combination
_SCROLL_DIRECTIONS = ("up", "down", "left", "right")
_KEY_NAME = re.compile(r"^[A-Za-z0-9_]+$|^[^\sA-Za-z0-9]$")
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
RESPONSE_STYLES = ("tool_call", "json")  # how format_action writes an action


@dataclass(frozen=True)
class ParseError:
    """Why a response is not a valid action: a short machine kind and a readable reason."""

    kind: str
    reason: str
    text: str = ""  # the offending fragment, truncated

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


def _error(kind: str, reason: str, text: str = "") -> ParseError:
    return ParseError(kind=kind, reason=reason, text=text[:200])


def _extract_call(text: str) -> str | ParseError:
    """The JSON inside the single <tool_call> block of a response."""
    if not text.strip():
        return _error("empty", "the response is empty")
    calls = _TOOL_CALL.findall(text)
    if not calls:
        if "<tool_call>" in text:
            return _error("unclosed_tool_call", "<tool_call> is never closed by </tool_call>", text)
        if _bare_object(text) is not None:
            return text.strip()
        return _error(
            "no_tool_call",
            'no <tool_call>...</tool_call> block (nor a lone JSON object with an "action")',
            text,
        )
    if len(calls) > 1:
        return _error("multiple_tool_calls", f"{len(calls)} tool calls; exactly one is allowed")
    body = calls[0].strip()
    # Tolerate a markdown fence around the JSON: models trained on chat data emit one.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    return fenced.group(1) if fenced else body


def _bare_object(text: str) -> dict[str, Any] | None:
    """The response as one JSON object with an "action" (the compact style), else None."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "action" in value else None


def _coordinate(value: Any, name: str) -> list[int] | ParseError:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return _error("bad_coordinate", f"{name} must be a list [x, y], got {value!r}")
    point = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return _error("bad_coordinate", f"{name} must hold numbers, got {value!r}")
        if isinstance(v, float) and not v.is_integer():
            return _error("bad_coordinate", f"{name} must hold integers on the grid, got {value!r}")
        if not 0 <= v <= GRID:
            return _error("coordinate_out_of_range", f"{name} {value!r} is outside [0, {GRID}]")
        point.append(int(v))
    return point


def _duration(value: Any, limit: float) -> float | ParseError:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _error("bad_duration", f"duration must be a number of seconds, got {value!r}")
    if not 0 < value <= limit:
        return _error("bad_duration", f"duration {value!r} is outside (0, {limit:g}] s")
    return value


def _key_combo(value: str) -> str | ParseError:
    keys = value.split("+")
    if any(not _KEY_NAME.match(k.strip()) for k in keys):
        return _error("bad_key", f"{value!r} is not a key or key combination like 'ctrl+s'")
    return "+".join(k.strip() for k in keys)


def _validate(action: dict[str, Any]) -> dict[str, Any] | ParseError:
    name = action.get("action")
    if name is None:
        return _error("missing_action", 'arguments have no "action" field')
    if not isinstance(name, str) or name not in ACTION_ARGUMENTS:
        known = ", ".join(ACTION_ARGUMENTS)
        return _error("unknown_action", f"unknown action {name!r}; expected one of {known}")
    required, optional = ACTION_ARGUMENTS[name]
    extra = sorted(set(action) - {"action", *required, *optional})
    if extra:
        return _error("unexpected_argument", f"{name} takes no argument(s) {', '.join(extra)}")
    missing = [arg for arg in required if arg not in action]
    if missing:
        return _error("missing_argument", f"{name} needs {', '.join(missing)}")
    out: dict[str, Any] = {"action": name}
    for arg in (*required, *optional):
        if arg not in action:
            continue
        value = action[arg]
        if arg in ("coordinate", "start_coordinate"):
            value = _coordinate(value, arg)
        elif arg == "duration":
            value = _duration(value, MAX_HOLD_S if name == "hold_key" else MAX_WAIT_S)
        elif arg in ("text", "content"):
            if not isinstance(value, str):
                return _error("bad_text", f"{arg} of {name} must be a string, got {value!r}")
            if len(value) > MAX_TEXT:
                return _error("bad_text", f"{arg} of {name} is longer than {MAX_TEXT} characters")
            if arg == "text" and not value and name in ("key", "hold_key", "answer", "write_file"):
                return _error("bad_text", f"{arg} of {name} must not be empty")
            if arg == "text" and name in _KEY_TEXT and value:
                value = _key_combo(value)
            if arg == "text" and name == "write_file" and not value.startswith(("/", "~")):
                return _error("bad_path", f"write_file needs an absolute path, got {value!r}")
        elif arg == "scroll_direction":
            if value not in _SCROLL_DIRECTIONS:
                return _error("bad_scroll", f"scroll_direction must be one of {_SCROLL_DIRECTIONS}")
        elif arg == "scroll_amount":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SCROLL:
                return _error("bad_scroll", f"scroll_amount must be an int in [1, {MAX_SCROLL}]")
        if isinstance(value, ParseError):
            return value
        out[arg] = value
    return out


def parse_action(text: str) -> dict[str, Any] | ParseError:
    """Parse one policy response into a validated action dict, or a ParseError; never raises."""
    if not isinstance(text, str):
        return _error("not_text", f"the response is a {type(text).__name__}, not text")
    body = _extract_call(text)
    if isinstance(body, ParseError):
        return body
    try:
        call = json.loads(body)
    except ValueError as exc:
        return _error("bad_json", f"the tool call is not valid JSON: {exc}", body)
    if not isinstance(call, dict):
        return _error("not_an_object", "the tool call must be a JSON object", body)
    if "action" in call and "name" not in call and "arguments" not in call:
        return _validate(call)  # the arguments alone: the compact style
    if call.get("name") != TOOL_NAME:
        return _error(
            "wrong_tool", f'the tool call must name "{TOOL_NAME}", got {call.get("name")!r}'
        )
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        # Some chat models double-encode arguments as a JSON string.
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return _error("bad_arguments", "arguments is a string that is not JSON", arguments)
    if not isinstance(arguments, dict):
        return _error("bad_arguments", 'the tool call needs an "arguments" object')
    return _validate(arguments)


def format_action(action: dict[str, Any], style: str = "tool_call") -> str:
    """The response a policy writes for an action (inverse of parse_action): the tool-call
    block, or with style "json" the arguments object alone."""
    if style == "json":
        return json.dumps(action, ensure_ascii=False)
    if style != "tool_call":
        raise ValueError(f"unknown response style {style!r}; one of {RESPONSE_STYLES}")
    call = {"name": TOOL_NAME, "arguments": action}
    return f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
