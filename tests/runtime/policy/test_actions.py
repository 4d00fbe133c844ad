"""The action parser: every action of the paper's space, and malformed output as a ParseError."""

from __future__ import annotations

import json
import random

import pytest

from runtime.policy.actions import ACTION_ARGUMENTS, ParseError, format_action, parse_action

VALID = [
    {"action": "left_click", "coordinate": [52, 31]},
    {"action": "left_click", "coordinate": [52, 31], "text": "shift"},
    {"action": "right_click", "coordinate": [0, 0]},
    {"action": "middle_click", "coordinate": [1000, 1000]},
    {"action": "double_click", "coordinate": [500, 500]},
    {"action": "triple_click", "coordinate": [10, 990]},
    {"action": "mouse_move", "coordinate": [333, 444]},
    {"action": "left_mouse_down", "coordinate": [1, 2]},
    {"action": "left_mouse_down"},
    {"action": "left_mouse_up", "coordinate": [3, 4]},
    {"action": "left_mouse_up"},
    {"action": "left_click_drag", "start_coordinate": [100, 200], "coordinate": [300, 400]},
    {"action": "type", "text": "Hello, world!\n"},
    {"action": "type", "text": ""},
    {"action": "key", "text": "ctrl+s"},
    {"action": "key", "text": "Return"},
    {"action": "key", "text": "ctrl+shift+t"},
    {"action": "hold_key", "text": "shift", "duration": 1},
    {"action": "scroll", "coordinate": [500, 500], "scroll_direction": "down", "scroll_amount": 3},
    {"action": "scroll", "coordinate": [500, 500], "scroll_direction": "left"},
    {"action": "wait", "duration": 1},
    {"action": "wait", "duration": 0.5},
    {"action": "wait"},
    {"action": "screenshot"},
    {"action": "cursor_position"},
    {"action": "done"},
    {"action": "done", "text": "Saved."},
    {"action": "answer", "text": "42"},
    {"action": "write_file", "text": "/home/user/out.txt", "content": "a,b\n1,2\n"},
    {"action": "fail"},
]


def _call(arguments: object, name: str = "computer_use") -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"I see the window; acting now.\n<tool_call>\n{body}\n</tool_call>"


@pytest.mark.parametrize("action", VALID, ids=lambda a: a["action"])
def test_accepts_every_action(action: dict) -> None:
    assert parse_action(_call(action)) == action
    assert parse_action(format_action(action)) == action


@pytest.mark.parametrize("action", VALID, ids=lambda a: a["action"])
def test_json_style_writes_the_arguments_alone(action: dict) -> None:
    text = format_action(action, style="json")
    assert "<tool_call>" not in text and json.loads(text) == action
    assert parse_action(text) == action
    assert parse_action(f"  {text}\n") == action  # surrounding whitespace is not content


def test_json_style_is_validated_like_a_tool_call() -> None:
    bad = parse_action('{"action": "left_click", "coordinate": [1, 2000]}')
    assert isinstance(bad, ParseError) and bad.kind == "coordinate_out_of_range"
    # Prose around the object, or an object without "action", is not the compact style.
    for text in ['I am done. {"action": "done"}', '{"name": "done"}', '{"action": "done"']:
        result = parse_action(text)
        assert isinstance(result, ParseError) and result.kind == "no_tool_call", text


def test_unknown_response_style_is_an_error() -> None:
    with pytest.raises(ValueError, match="style"):
        format_action({"action": "done"}, style="xml")


def test_every_action_type_is_covered() -> None:
    assert {a["action"] for a in VALID} == set(ACTION_ARGUMENTS)


def test_float_coordinates_on_the_grid_become_ints() -> None:
    parsed = parse_action(_call({"action": "left_click", "coordinate": [52.0, 31.0]}))
    assert parsed == {"action": "left_click", "coordinate": [52, 31]}
    assert all(type(v) is int for v in parsed["coordinate"])


def test_tolerates_a_markdown_fence_and_string_arguments() -> None:
    body = json.dumps({"name": "computer_use", "arguments": {"action": "done"}})
    assert parse_action(f"<tool_call>```json\n{body}\n```</tool_call>") == {"action": "done"}
    doubled = json.dumps({"name": "computer_use", "arguments": json.dumps({"action": "done"})})
    assert parse_action(f"<tool_call>{doubled}</tool_call>") == {"action": "done"}


MALFORMED = [
    ("", "empty"),
    ("   \n ", "empty"),
    ("I will click the button.", "no_tool_call"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "done"}}', "unclosed_tool_call"),
    (_call({"action": "done"}) + _call({"action": "fail"}), "multiple_tool_calls"),
    ("<tool_call>{'name': 'computer_use'}</tool_call>", "bad_json"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "done"}</tool_call>', "bad_json"),
    ("<tool_call>[1, 2]</tool_call>", "not_an_object"),
    (_call({"action": "done"}, name="browser"), "wrong_tool"),
    ('<tool_call>{"name": "computer_use"}</tool_call>', "bad_arguments"),
    ('<tool_call>{"name": "computer_use", "arguments": "click"}</tool_call>', "bad_arguments"),
    (_call({"coordinate": [1, 2]}), "missing_action"),
    (_call({"action": "click", "coordinate": [1, 2]}), "unknown_action"),
    (_call({"action": 7}), "unknown_action"),
    (_call({"action": "left_click"}), "missing_argument"),
    (
        _call({"action": "left_click", "coordinate": [1, 2], "button": "left"}),
        "unexpected_argument",
    ),
    (_call({"action": "left_click", "coordinate": [1, 2, 3]}), "bad_coordinate"),
    (_call({"action": "left_click", "coordinate": "100,200"}), "bad_coordinate"),
    (_call({"action": "left_click", "coordinate": [True, 5]}), "bad_coordinate"),
    (_call({"action": "left_click", "coordinate": [10.5, 5]}), "bad_coordinate"),
    (_call({"action": "left_click", "coordinate": [1001, 5]}), "coordinate_out_of_range"),
    (_call({"action": "mouse_move", "coordinate": [-1, 5]}), "coordinate_out_of_range"),
    (_call({"action": "left_click_drag", "coordinate": [1, 2]}), "missing_argument"),
    (_call({"action": "type", "text": 123}), "bad_text"),
    (_call({"action": "key", "text": ""}), "bad_text"),
    (_call({"action": "key", "text": "ctrl + + s s"}), "bad_key"),
    (_call({"action": "hold_key", "text": "shift", "duration": -1}), "bad_duration"),
    (_call({"action": "hold_key", "text": "shift", "duration": 45}), "bad_duration"),
    (_call({"action": "write_file", "text": "out.txt", "content": "x"}), "bad_path"),
    (_call({"action": "type", "text": "x" * 100_001}), "bad_text"),
    (_call({"action": "left_click", "coordinate": [1, 2], "text": "not a key!"}), "bad_key"),
    (_call({"action": "wait", "duration": "1"}), "bad_duration"),
    (_call({"action": "wait", "duration": 3600}), "bad_duration"),
    (
        _call({"action": "scroll", "coordinate": [1, 2], "scroll_direction": "sideways"}),
        "bad_scroll",
    ),
    (
        _call(
            {"action": "scroll", "coordinate": [1, 2], "scroll_direction": "up", "scroll_amount": 0}
        ),
        "bad_scroll",
    ),
    (_call({"action": "write_file", "text": "/tmp/x"}), "missing_argument"),
    (_call({"action": "answer", "text": ["a"]}), "bad_text"),
]


@pytest.mark.parametrize(("text", "kind"), MALFORMED)
def test_rejects_malformed_output_with_a_reason(text: str, kind: str) -> None:
    result = parse_action(text)
    assert isinstance(result, ParseError)
    assert result.kind == kind
    assert len(result.reason) > 10
    assert kind in str(result)


def test_at_least_twenty_kinds_of_malformed_output() -> None:
    assert len(set(MALFORMED)) >= 20
    assert len({kind for _, kind in MALFORMED}) >= 15  # distinct, machine-readable reasons


def test_never_raises_on_garbage() -> None:
    rng = random.Random(0)
    alphabet = '<>/{}[]":,. tool_call computer_use action 0123456789\n\\'
    fragments = [
        "<tool_call>",
        "</tool_call>",
        '{"name": "computer_use", "arguments": ',
        "}",
        "null",
    ]
    for _ in range(500):
        pieces = [
            rng.choice(fragments) if rng.random() < 0.3 else rng.choice(alphabet) for _ in range(40)
        ]
        result = parse_action("".join(pieces))
        assert isinstance(result, dict | ParseError)
    assert isinstance(parse_action(None), ParseError)  # type: ignore[arg-type]


def test_accepted_actions_are_accepted_by_the_desktop() -> None:
    # The policy's parser is never looser than the desktop controller's validator.
    from runtime.envs.desktop.actions import parse_action as desktop_parse

    for action in VALID:
        desktop_parse(action)
