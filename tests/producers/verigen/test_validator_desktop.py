"""The rule validator on live desktops: setup, the untouched state (0.0, judges within their
limits) and the solution (1.0), with hostile and broken candidates of every kind rejected
with a reason, and sound ones accepted; `scalecua verigen validate` prints the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from producers.verigen.probe import Probe
from producers.verigen.validator import RuleValidator
from tests.producers.verigen.scenarios import (
    builtin_metric_candidate,
    note_candidate,
    terminal_solution,
    with_changes,
    with_judge,
)

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktops and the judge sandbox need root"),
]
SCALECUA = [sys.executable, "-m", "cli"]


@pytest.fixture(scope="module")
async def validator(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RuleValidator]:
    """A validator over a probe of two real desktops, shared by the module."""
    root = tmp_path_factory.mktemp("verigen-desktops")
    async with Probe.with_pool(2, root=root) as probe:
        yield RuleValidator(probe)


@pytest.mark.parametrize(
    "raw", [note_candidate(), builtin_metric_candidate()], ids=["sandboxed-judge", "metrics"]
)
async def test_a_sound_candidate_is_accepted(validator: RuleValidator, raw: dict) -> None:
    report = await validator.validate(raw)
    assert report.accepted, report.reasons
    assert report.reasons == [] and report.executable
    assert (report.untouched_score, report.solved_score) == (0.0, 1.0)
    assert set(report.checks.values()) == {"pass"}
    if raw["evaluator"]["func"] == "sandboxed_judge":
        assert report.judge_statuses == ["ok", "ok"]  # untouched, then solved


async def test_without_a_solution_only_setup_and_untouched_are_proven(
    validator: RuleValidator,
) -> None:
    report = await validator.validate(note_candidate(solution=False))
    assert report.accepted and report.checks["solved"] == "skip"
    assert report.solved_score is None and report.untouched_score == 0.0


_SPIN = "def judge(a):\n    while True:\n        pass\n"
_HOG = "def judge(a):\n    x = bytearray(8 << 30)\n    return 0.0\n"
_NET = (
    "import socket\n\ndef judge(a):\n"
    "    socket.create_connection(('127.0.0.1', 9092), timeout=1)\n    return 0.0\n"
)
_FORK = "import subprocess\n\ndef judge(a):\n    subprocess.run(['true'])\n    return 0.0\n"
_RAISES = "def judge(a):\n    raise RuntimeError('boom')\n"
_BAD_RETURN = "def judge(a):\n    return 2.5\n"
_BAD_IMPORT = "import no_such_module\n\ndef judge(a):\n    return 0.0\n"
_ALWAYS = "def judge(a):\n    return 1.0\n"

HOSTILE = {
    # kind: (candidate, failed check, phrases the reasons must hold)
    "judge times out": (with_judge(_SPIN, wall_seconds=2), "untouched", ["`timeout`"]),
    "judge killed for memory": (with_judge(_HOG), "untouched", ["`memory`"]),
    "judge touches the network": (with_judge(_NET), "untouched", ["`forbidden`"]),
    "judge starts a process": (with_judge(_FORK), "untouched", ["`forbidden`"]),
    "judge crashes": (with_judge(_RAISES), "untouched", ["`crash`", "boom"]),
    "judge crashes on a missing file": (
        with_judge("def judge(a):\n    return float(open(a['result']).read() == 'x')\n"),
        "untouched", ["`crash`"],
    ),
    "judge returns out of range": (with_judge(_BAD_RETURN), "untouched", ["`bad_return`"]),
    "judge imports what is not there": (with_judge(_BAD_IMPORT), "untouched", ["`crash`"]),
    "solved before the agent acts (judge)": (
        with_judge(_ALWAYS), "untouched", ["already scores 1", "before the agent acts"],
    ),
    "solved before the agent acts (setup)": (
        note_candidate(config=[{"type": "execute", "parameters": {
            "command": "echo 'buy milk' > /home/user/notes.txt", "shell": True}}]),
        "untouched", ["already scores 1"],
    ),
    "setup command fails": (
        note_candidate(config=[{"type": "execute", "parameters": {
            "command": "cat /home/user/missing.txt", "shell": True}}]),
        "setup", ["setup command failed", "exited 1", "missing.txt"],
    ),
    "setup opens a file that is not there": (
        note_candidate(config=[{"type": "open", "parameters": {"path": "/home/user/nope.txt"}}]),
        "setup", ["setup failed"],
    ),
    "unsound solution": (
        with_changes(note_candidate(), solution=terminal_solution("notes.txt", "buy bread")),
        "solved", ["unsound", "scores 0"],
    ),
    "solution refused by the desktop": (
        with_changes(note_candidate(), solution=[{"action": "write_file", "text": "/proc/x",
                                                  "content": "buy milk"}]),
        "solved", ["unsound"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_each_hostile_or_broken_kind_is_rejected_with_its_reason(
    validator: RuleValidator, kind: str
) -> None:
    raw, check, phrases = HOSTILE[kind]
    report = await validator.validate(raw)
    assert not report.accepted, kind
    assert report.checks[check] == "fail", (report.checks, report.reasons)
    text = " | ".join(report.reasons)
    for phrase in phrases:
        assert phrase in text, text


async def test_a_judge_failure_is_not_executable_but_a_trivial_task_is(
    validator: RuleValidator,
) -> None:
    crash = await validator.validate(with_judge(_RAISES))
    assert not crash.executable and crash.judge_statuses == ["crash"]
    trivial = await validator.validate(with_judge(_ALWAYS))
    assert trivial.executable and trivial.untouched_score == 1.0


def _validate_cli(tmp_path: Path, raw: object, *extra: str) -> tuple[int, dict]:
    path = tmp_path / "candidate.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    done = subprocess.run([*SCALECUA, "verigen", "validate", str(path), *extra],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr[-2000:]
    return done.returncode, json.loads(lines[0])


def test_cli_accepts_a_sound_candidate_with_a_separate_solution(tmp_path: Path) -> None:
    solution = tmp_path / "actions.json"
    solution.write_text(json.dumps(terminal_solution("notes.txt", "buy milk")))
    code, out = _validate_cli(tmp_path, note_candidate(solution=False), "--solution",
                              str(solution))  # fmt: skip
    assert code == 0 and out["accepted"] is True and out["reasons"] == [], out
    assert out["solved_score"] == 1.0 and out["checks"]["solved"] == "pass"


@pytest.mark.parametrize(
    ("raw", "phrase"),
    [
        ("{not json", "cannot read"),
        (with_judge("def judge(a) return"), "does not compile"),
        (with_judge(_ALWAYS), "before the agent acts"),
    ],
    ids=["unreadable", "static", "solved-untouched"],
)
def test_cli_rejects_with_readable_reasons(tmp_path: Path, raw: object, phrase: str) -> None:
    code, out = _validate_cli(tmp_path, raw)
    assert code == 1 and out["accepted"] is False
    assert out["reasons"] and any(phrase in r for r in out["reasons"]), out


# Tasks written the way the knowledge documents say (setup, verifier, solution actions).
MOUSEPAD = {
    "id": "append-milk",
    "instruction": "In the open todo.txt, add the line 'buy milk' at the end and save the file.",
    "config": [
        {
            "type": "execute",
            "parameters": {
                "command": ["python", "-c", "open('/home/user/todo.txt', 'w').write('call mom\\n')"]
            },
        },
        {"type": "open", "parameters": {"path": "/home/user/todo.txt"}},
        {"type": "sleep", "parameters": {"seconds": 1}},
    ],
    "evaluator": {
        "func": "sandboxed_judge",
        "result": {"type": "vm_file", "path": "/home/user/todo.txt", "dest": "todo.txt"},
        "options": {
            "source": "def judge(a):\n    if not a.get('result'):\n"
            "        return 0.0\n    lines = open(a['result']).read().split()\n"
            "    return float(lines[-2:] == ['buy', 'milk'])\n"
        },
    },
    "related_apps": ["mousepad"],
    "app": "mousepad",
    "explanation": "reads the saved file",
    "difficulty": "easy",
    "estimated_steps": 4,
    "solution": [
        {"action": "key", "text": "ctrl+End"},
        {"action": "type", "text": "buy milk\n"},
        {"action": "key", "text": "ctrl+s"},
        {"action": "wait", "duration": 1},
    ],
}
CALC = {
    "id": "total-prices", "instruction": "In the open prices.xlsx, write the sum of B2:B3 in B4 "
    "and save the file.",
    "config": [
        {"type": "execute", "parameters": {"command": ["python", "-c",
         "import openpyxl; wb = openpyxl.Workbook(); ws = wb.active; ws.append(['Item', 'Price']);"
         " ws.append(['pen', 3]); ws.append(['ink', 4]); wb.save('/home/user/prices.xlsx')"]}},
        {"type": "open", "parameters": {"path": "/home/user/prices.xlsx"}},
        {"type": "execute", "parameters": {"shell": True, "command": "for i in $(seq 1 300); do "
         "[ -e \"/home/user/.~lock.prices.xlsx#\" ] && exit 0; sleep 0.1; done; exit 1"}},
        {"type": "sleep", "parameters": {"seconds": 2}},
    ],
    "evaluator": {"func": "compare_table",
                  "result": {"type": "vm_file", "path": "/home/user/prices.xlsx",
                             "dest": "prices.xlsx"},
                  "options": {"rules": [{"type": "check_cell", "sheet_idx": "RI0",
                                         "coordinate": "B4",
                                         "props": {"value": {"method": "eq", "ref": 7}}}]}},
    "related_apps": ["libreoffice_calc"], "app": "calc", "explanation": "checks B4 is 7",
    "difficulty": "easy", "estimated_steps": 6,
    "solution": [{"action": "key", "text": "ctrl+Home"}, {"action": "wait", "duration": 0.6},
                 *[a for _ in range(3) for a in ({"action": "key", "text": "Down"},
                                                  {"action": "wait", "duration": 0.6})],
                 {"action": "key", "text": "Right"}, {"action": "wait", "duration": 0.6},
                 {"action": "type", "text": "=SUM(B2:B3)\n"}, {"action": "key", "text": "ctrl+s"},
                 {"action": "wait", "duration": 1.5}],
}  # fmt: skip


@pytest.mark.parametrize("raw", [MOUSEPAD, CALC], ids=["mousepad", "calc"])
async def test_tasks_written_as_the_knowledge_documents_say_are_accepted(
    validator: RuleValidator, raw: dict
) -> None:
    report = await validator.validate(raw)
    assert report.accepted, report.reasons
    assert (report.untouched_score, report.solved_score) == (0.0, 1.0)


async def test_with_postconfig_the_solution_is_played_on_a_second_fresh_desktop(
    validator: RuleValidator,
) -> None:
    raw = note_candidate()
    raw["evaluator"]["postconfig"] = [{"type": "execute", "parameters": {"command": ["true"]}}]
    before = validator.probe.stats()["sessions_opened"]
    report = await validator.validate(raw)
    assert report.accepted, report.reasons
    assert validator.probe.stats()["sessions_opened"] == before + 2
