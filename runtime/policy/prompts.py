"""System prompts for the policy: the OSWorld and ScienceBoard variants of the paper's appendix A.

Both describe the screen, the 1000x1000 coordinate grid, the action space and the response
format that `runtime.policy.actions.parse_action` reads: free-form reasoning, then one
`<tool_call>` block naming the `computer_use` tool. The ScienceBoard variant adds the
`done`, `answer` and `write_file` actions its tasks are judged by. The `compact` variant is
for small text-only policies on a CPU budget (the laptop recipe, docs/learning.md): the
same action space, described in ~110 tokens instead of ~500, and a shorter reply — the
action's JSON object alone, no reasoning and no tool-call wrapper (`response_style`) —
since every prompt token is paid for again at each turn of every rollout and in every
training segment, and every response token is a step of the decoder. A deployment can replace
either with its own text (`system_prompt(custom=...)`); the actions it describes must stay
within the parser's action space.
"""

from __future__ import annotations

from pathlib import Path

from runtime.errors import ConfigError

__all__ = ["VARIANTS", "response_style", "system_prompt"]

_HEADER = """\
You are a computer-use agent operating a desktop computer ({os}) whose screen is shown to you as a \
screenshot after every step. Complete the user's task by acting on the screen one step at \
a time.

Coordinates: the screen is mapped to a {grid}x{grid} grid, (0, 0) is the top-left corner \
and ({grid}, {grid}) the bottom-right one, whatever the real resolution. Give every \
coordinate as two integers [x, y] on this grid.

Actions (the "action" field and its arguments):
- left_click, right_click, middle_click, double_click, triple_click: "coordinate": [x, y], \
optionally "text": modifier keys to hold, e.g. "ctrl"
- mouse_move: "coordinate": [x, y]
- left_mouse_down, left_mouse_up: press or release the left button, optionally at "coordinate": [x, y]
- left_click_drag: drag from "start_coordinate": [x, y] to "coordinate": [x, y]
- type: type "text" (use "\\n" for Enter)
- key: press a key or combination, "text": e.g. "ctrl+s", "Return", "alt+F4"
- hold_key: hold "text" (a key) for "duration" seconds (at most 30)
- scroll: at "coordinate": [x, y], "scroll_direction": up/down/left/right, "scroll_amount": clicks
- wait: wait "duration" seconds for the screen to change
- screenshot: look again without acting
- cursor_position: report where the mouse cursor is
- fail: declare that the task cannot be completed
"""

_SCIENCEBOARD_ACTIONS = """\
- done: declare that the task is complete
- answer: give the final answer to a question, "text": the answer
- write_file: write "content" to the file at absolute path "text"
"""

_OSWORLD_ACTIONS = """\
- done: declare that the task is complete
"""

_FORMAT = """
Response format: first think briefly about what the screen shows and what to do next, \
then give exactly one action as a tool call, and nothing after it:
<tool_call>
{{"name": "computer_use", "arguments": {{"action": "left_click", "coordinate": [500, 300]}}}}
</tool_call>
"""

_COMPACT = """\
You operate an Ubuntu Linux desktop. Each turn shows the task and the screen as text. \
Reply with exactly one action as a JSON object and nothing else, for example:
{"action": "type", "text": "ls\\n"}
Actions: type "text" ("\\n" presses Enter); key "text" (e.g. "ctrl+s", "Return"); \
left_click "coordinate" [x, y] on a 1000x1000 grid; done (the task is complete); fail \
(it cannot be done).
"""

VARIANTS = ("osworld", "scienceboard", "compact")


def response_style(variant: str) -> str:
    """How a policy prompted with `variant` writes an action (runtime.policy.actions)."""
    return "json" if variant == "compact" else "tool_call"


def system_prompt(
    variant: str = "osworld",
    *,
    os_name: str = "Ubuntu Linux",
    grid: int = 1000,
    custom: str | Path | None = None,
) -> str:
    """The policy's system prompt: a paper variant ("osworld", "scienceboard") or custom text/file."""
    if custom is not None:
        # A Path is a prompt file; a str is the prompt itself.
        return custom.read_text() if isinstance(custom, Path) else custom
    if variant not in VARIANTS:
        raise ConfigError(f"unknown prompt variant {variant!r}; choose one of {VARIANTS}")
    if variant == "compact":
        return _COMPACT
    extra = _SCIENCEBOARD_ACTIONS if variant == "scienceboard" else _OSWORLD_ACTIONS
    return _HEADER.format(os=os_name, grid=grid) + extra + _FORMAT.format()
