"""The rule validator's pure checks: every malformed or hostile kind is rejected with a reason,
without a desktop, and sound candidates pass them."""

from __future__ import annotations

from typing import Any

import pytest

from producers.verigen.candidate import Candidate, CandidateError, Validation, accepted_task
from producers.verigen.validator import RuleValidator
from tests.producers.verigen.scenarios import (
    builtin_metric_candidate,
    note_candidate,
    with_changes,
    with_judge,
)

SOUND = note_candidate()


def _static(raw: Any, solution: Any = None) -> tuple[list[str], dict[str, str]]:
    _, report = RuleValidator(None).check_static(raw, solution)
    return report.reasons, report.checks


@pytest.mark.parametrize("raw", [SOUND, builtin_metric_candidate()], ids=["judge", "metrics"])
def test_sound_candidates_pass_the_pure_checks(raw: dict) -> None:
    reasons, checks = _static(raw)
    assert reasons == []
    assert checks == {"schema": "pass", "vocabulary": "pass", "judge_source": "pass",
                      "solution": "pass"}  # fmt: skip


BROKEN: dict[str, tuple[Any, str, str]] = {
    # kind: (candidate, failed check, a phrase of the reason)
    "not an object": ([SOUND], "schema", "must be a JSON object"),
    "no instruction": (with_changes(SOUND, instruction=None), "schema", "instruction"),
    "empty instruction": (with_changes(SOUND, instruction="  "), "schema", "empty"),
    "no evaluator": (with_changes(SOUND, evaluator=None), "schema", "evaluator"),
    "unknown app": (with_changes(SOUND, app="gimp"), "schema", "`app`"),
    "bad difficulty": (with_changes(SOUND, difficulty="trivial"), "schema", "difficulty"),
    "too many steps": (with_changes(SOUND, estimated_steps=80), "schema", "estimated_steps"),
    "bool steps": (with_changes(SOUND, estimated_steps=True), "schema", "estimated_steps"),
    "solution not actions": (with_changes(SOUND, solution=["click"]), "schema", "solution"),
    "unknown setup step": (
        with_changes(SOUND, config=[{"type": "install_app", "parameters": {}}]),
        "vocabulary", "config step `install_app`",
    ),
    "setup step missing a parameter": (
        with_changes(SOUND, config=[{"type": "open", "parameters": {}}]),
        "vocabulary", "needs `path`",
    ),
    "unknown metric": (
        with_changes(SOUND, evaluator={"func": "compare_pdf", "result": {"type": "rule",
                                                                        "rules": {}}}),
        "vocabulary", "metric `compare_pdf`",
    ),
    "unknown getter": (
        with_changes(SOUND, evaluator={**SOUND["evaluator"], "result": {"type": "chrome_tab"}}),
        "vocabulary", "getter `chrome_tab`",
    ),
    "metric options that do not bind": (
        with_changes(builtin_metric_candidate(), evaluator={
            "func": "exact_match", "result": {"type": "vm_command_line", "command": "ls"}}),
        "vocabulary", "cannot be called",
    ),
    "reads a host file in setup": (
        with_changes(SOUND, config=[{"type": "upload_file", "parameters": {"files": [
            {"local_path": "/etc/shadow", "path": "/home/user/shadow"}]}}]),
        "vocabulary", "from the host",
    ),
    "file:// URL outside the home": (
        with_changes(SOUND, config=[{"type": "download", "parameters": {"files": [
            {"url": "file:///root/.ssh/id_rsa", "path": "/home/user/key"}]}}]),
        "vocabulary", "from the host",
    ),
    "dot-dot out of the home": (
        with_changes(SOUND, config=[{"type": "download", "parameters": {"files": [
            {"url": "file:///home/user/../../etc/passwd", "path": "/home/user/p"}]}}]),
        "vocabulary", "from the host",
    ),
    "fetches a URL": (
        with_changes(SOUND, config=[{"type": "download", "parameters": {"files": [
            {"url": "http://127.0.0.1:9092/", "path": "/home/user/x"}]}}]),
        "vocabulary", "fetches no URL",
    ),
    "cloud_file from the host": (
        with_changes(SOUND, evaluator={**SOUND["evaluator"], "expected": {
            "type": "cloud_file", "path": "/etc/passwd", "dest": "p"}}),
        "vocabulary", "from the host",
    ),
    "sleeps too long": (
        with_changes(SOUND, config=[{"type": "sleep", "parameters": {"seconds": 600}}]),
        "vocabulary", "sleeps",
    ),
    "judge does not compile": (with_judge("def judge(a) return 1"), "judge_source", "compile"),
    "judge function missing": (
        with_judge("def grade(a):\n    return 0.0\n"), "judge_source", "no top-level function",
    ),
    "judge is async": (
        with_judge("async def judge(a):\n    return 0.0\n"), "judge_source", "plain `def`",
    ),
    "judge takes no argument": (
        with_judge("def judge():\n    return 0.0\n"), "judge_source", "one argument",
    ),
    "judge source missing": (with_judge(""), "judge_source", "missing"),
    "judge asks for too much time": (
        with_judge("def judge(a):\n    return 0.0\n", wall_seconds=3600),
        "judge_source", "wall_seconds",
    ),
    "judge asks for too much memory": (
        with_judge("def judge(a):\n    return 0.0\n", memory_mb=65536),
        "judge_source", "memory_mb",
    ),
    "judge with unknown options": (
        with_judge("def judge(a):\n    return 0.0\n", network=True), "judge_source", "network",
    ),
    "invalid solution action": (
        with_changes(SOUND, solution=[{"action": "teleport"}]), "solution", "unknown action",
    ),
    "empty solution": (with_changes(SOUND, solution=[]), "solution", "empty"),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(BROKEN))
def test_each_broken_kind_is_rejected_with_a_reason(kind: str) -> None:
    raw, check, phrase = BROKEN[kind]
    reasons, checks = _static(raw)
    assert reasons, kind
    assert checks.get(check) == "fail", (checks, reasons)
    assert any(phrase in r for r in reasons), reasons


async def test_validate_without_a_desktop_rejects_before_needing_one() -> None:
    report = await RuleValidator(None).validate(with_judge("def judge(a) return"))
    assert not report.accepted and report.reasons and not report.executable
    assert report.checks["setup"] == "skip" and report.checks["untouched"] == "skip"


def test_a_separate_solution_replaces_the_candidates_own() -> None:
    reasons, _ = _static(SOUND, [{"action": "fly"}])
    assert any("unknown action" in r for r in reasons)


def test_the_candidate_round_trips_and_its_id_comes_from_its_content() -> None:
    candidate = Candidate.from_dict(SOUND)
    assert Candidate.from_dict(candidate.to_dict()) == candidate
    renamed = Candidate.from_dict(with_changes(SOUND, id="another-name"))
    assert renamed.content_id() == candidate.content_id()
    reworded = Candidate.from_dict(with_changes(SOUND, instruction="Write it."))
    assert reworded.content_id() != candidate.content_id()
    task = accepted_task(candidate, Validation(rule_pass=True, execution_pass=True,
                                               llm_verdict="accept", llm_score=9.0))  # fmt: skip
    assert task["id"] == candidate.content_id() and task["source"] == "verigen"
    assert task["validation"]["llm_score"] == 9.0 and task["solution"] == SOUND["solution"]


def test_every_schema_problem_is_named_at_once() -> None:
    with pytest.raises(CandidateError) as caught:
        Candidate.from_dict(with_changes(SOUND, app="x", difficulty="y", explanation=""))
    assert len(caught.value.reasons) == 3
