"""Candidates (sound, broken, hostile) and recorded model replies for the VeriGen tests."""

from __future__ import annotations

import copy
import json
from typing import Any

NOTE_JUDGE = """
def judge(artifacts):
    path = artifacts.get("result")
    if not path:
        return 0.0
    with open(path, encoding="utf-8") as f:
        return 1.0 if f.read().strip() == artifacts["expected"]["text"] else 0.0
"""

# Opens the file without checking that a getter found it: crashes on the untouched desktop.
CRASHING_JUDGE = """
def judge(artifacts):
    with open(artifacts["result"], encoding="utf-8") as f:
        return 1.0 if f.read().strip() == artifacts["expected"]["text"] else 0.0
"""


def terminal_solution(name: str, text: str) -> list[dict[str, Any]]:
    """Open a terminal and write `text` into ~/name."""
    return [
        {"action": "key", "text": "ctrl+alt+t"},
        # Keys typed before the terminal maps are lost: under a loaded CI machine xterm took
        # over 2 s to appear, and a replay of an accepted task scored 0.
        {"action": "wait", "duration": 4.0},
        {"action": "type", "text": f"echo '{text}' > ~/{name}\n"},
        {"action": "wait", "duration": 1.0},
    ]


def note_candidate(
    name: str = "notes.txt",
    text: str = "buy milk",
    *,
    judge: str = NOTE_JUDGE,
    solution: bool = True,
    config: list[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A terminal task: write one line into a file; verified by a sandboxed judge."""
    out: dict[str, Any] = {
        "id": f"write-{name}",
        "instruction": f"Create the file {name} in the home folder containing exactly the "
        f"line: {text}",
        "config": config or [],
        "evaluator": {
            "func": "sandboxed_judge",
            "result": {"type": "vm_file", "path": f"/home/user/{name}", "dest": name},
            "expected": {"type": "rule", "rules": {"text": text}},
            "options": {"source": judge, "function": "judge", **(options or {})},
        },
        "related_apps": ["terminal"],
        "app": "terminal",
        "explanation": f"The judge reads ~/{name} and compares its text with {text!r}.",
        "difficulty": "easy",
        "estimated_steps": 4,
    }
    if solution:
        out["solution"] = terminal_solution(name, text)
    return out


def builtin_metric_candidate() -> dict[str, Any]:
    """A terminal task verified by built-in getters and metrics (no judge)."""
    return {
        "id": "mkdir-projects",
        "instruction": "Create a folder named projects inside the Documents folder.",
        "config": [],
        "evaluator": {
            "func": "exact_match",
            "result": {
                "type": "vm_command_line",
                "shell": True,
                "command": "test -d /home/user/Documents/projects && echo yes || echo no",
            },
            "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
        },  # fmt: skip
        "related_apps": ["terminal"],
        "app": "terminal",
        "explanation": "A command on the desktop says whether the folder exists.",
        "difficulty": "easy",
        "estimated_steps": 4,
        "solution": [
            {"action": "key", "text": "ctrl+alt+t"},
            {"action": "wait", "duration": 2.0},
            {"action": "type", "text": "mkdir -p ~/Documents/projects\n"},
            {"action": "wait", "duration": 1.0},
        ],
    }


def with_changes(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of a candidate with top-level fields replaced (None deletes)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def with_judge(source: str, **options: Any) -> dict[str, Any]:
    """The note candidate with another judge source (and options)."""
    return note_candidate(judge=source, options=options)


def reply(candidate: dict[str, Any]) -> str:
    """A model reply carrying a candidate, the way a chat model tends to answer."""
    return "Here is the task:\n```json\n" + json.dumps(candidate, indent=1) + "\n```"


def turn(action: dict[str, Any], thought: str = "") -> str:
    """A checker reply."""
    return json.dumps({"thought": thought, "action": action})


def checker_turns(marker: str, actions: list[dict[str, Any]], max_turns: int = 15) -> list[dict]:
    """Replay entries: the checker plays `actions` then says done, for the task with `marker`."""
    entries = []
    for i, action in enumerate([*actions, {"action": "done"}]):
        entries.append({
            "agent": "checker", "contains": [marker],
            "last_contains": [f"Step {i + 1} of at most {max_turns}"], "turn": 0,
            "reply": turn(action, f"step {i + 1}"),
        })  # fmt: skip
    return entries


def verdict(decision: str = "accept", score: float = 9, reasoning: str = "clear and sound",
            issues: list[str] | None = None) -> str:  # fmt: skip
    """A judger reply."""
    return json.dumps(
        {"verdict": decision, "score": score, "reasoning": reasoning, "issues": issues or []}
    )


def pipeline_records() -> list[dict[str, Any]]:
    """Recorded replies for the loop tests; each scenario is picked by the request's theme."""
    sound = note_candidate("groceries.txt", "buy milk")
    broken = note_candidate("todo.txt", "call mom", judge=CRASHING_JUDGE)
    fixed = note_candidate("todo.txt", "call mom")
    trivial = note_candidate(
        "done.txt", "all done",
        config=[{"type": "execute", "parameters": {
            "command": "echo 'all done' > /home/user/done.txt", "shell": True}}],
    )  # fmt: skip
    unsolved = note_candidate("plan.txt", "ship it", solution=False)
    vague = note_candidate("memo.txt", "see you")
    vague["instruction"] = "Write a memo.txt in the home folder containing exactly: see you"
    return [
        # the proposer: one candidate per theme; a malformed reply for "theme-garbage"
        {"agent": "proposer", "contains": ["Theme: sound"], "reply": reply(sound),
         "usage": {"prompt_tokens": 1000, "completion_tokens": 400}},
        {"agent": "proposer", "contains": ["Theme: broken"], "reply": reply(broken)},
        {"agent": "proposer", "contains": ["Theme: trivial"], "reply": reply(trivial)},
        {"agent": "proposer", "contains": ["Theme: unsolved"], "reply": reply(unsolved)},
        {"agent": "proposer", "contains": ["Theme: vague"], "reply": reply(vague)},
        {"agent": "proposer", "contains": ["Theme: garbage"], "reply": "I cannot do that."},
        # the fixer repairs the crashing judge; returns the trivial task unchanged
        {"agent": "fixer", "contains": ["todo.txt"], "reply": reply(fixed)},
        {"agent": "fixer", "contains": ["done.txt"], "reply": reply(trivial)},
        {"agent": "fixer", "contains": ["memo.txt"], "reply": reply(vague)},
        # the judger accepts everything but the vague memo
        {"agent": "judger", "contains": ["memo.txt"],
         "reply": verdict("reject", 3, "ambiguous", ["the instruction names no folder"])},
        {"agent": "judger", "reply": verdict()},
        # the checker: solves each task (the trivial one: says done at once)
        *checker_turns("groceries.txt", terminal_solution("groceries.txt", "buy milk")[:3]),
        *checker_turns("todo.txt", terminal_solution("todo.txt", "call mom")[:3]),
        *checker_turns("plan.txt", terminal_solution("plan.txt", "ship it")[:3]),
        *checker_turns("memo.txt", terminal_solution("memo.txt", "see you")[:3]),
        *checker_turns("done.txt", []),
    ]  # fmt: skip
