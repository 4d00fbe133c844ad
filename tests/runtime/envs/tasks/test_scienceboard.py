"""ScienceBoard's task JSON (tests/data/scienceboard, unchanged) read as OSWorld-shaped tasks:
keys, the steps and checks it maps to, the checks' semantics, and coverage's verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.envs.tasks.catalog import read_task_folder
from runtime.envs.tasks.coverage import assess
from runtime.envs.tasks.getters.scienceboard import stop_of
from runtime.envs.tasks.metrics import METRICS, UNAVAILABLE_METRICS
from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.scienceboard import is_scienceboard
from runtime.envs.tasks.support import unsupported_parts
from runtime.errors import TaskError

SB = Path(__file__).resolve().parents[3] / "data" / "scienceboard"
TEX = SB / "VM" / "TeXstudio"
# TeXstudio tasks that need only TeXstudio and TeX (C-05 opens VS Code too, which is here)
TEX_ONLY = ["B-01", "C-02", "C-03", "C-04", "C-05", "C-06", "D-01", "D-02"]


def _raw(name: str) -> dict:
    return json.loads((SB / f"{name}.json").read_text())


def test_every_task_loads_under_its_app_key_and_keeps_its_json():
    entries = read_task_folder(SB)
    assert all(e.task is not None for e in entries), [e.error for e in entries if e.error]
    keys = {e.key for e in entries}
    assert len(keys) == len(entries) == len(list(SB.rglob("*.json")))
    assert {"TeXstudio/C-06", "KAlgebra/A-01", "ChimeraX/A-01", "ChimeraX.dual/A-01",
            "Lean.raw/A-01"} <= keys  # fmt: skip
    for entry in entries:
        raw = json.loads(entry.path.read_text())
        assert is_scienceboard(raw)
        assert entry.task.to_dict() == raw  # the log carries the JSON as ScienceBoard wrote it
        assert entry.task.id == entry.path.stem
        again = Task.from_dict(entry.task.to_dict(), where=entry.key)  # as a rollout reads it
        assert again.evaluator == entry.task.evaluator and again.id == entry.task.id


def test_touch_launch_and_wait_become_setup_steps():
    task = load_task(TEX / "C-02.json")
    assert [s["type"] for s in task.config] == ["sb_touch", "launch", "sleep"]
    assert task.config[1]["parameters"] == {
        "command": "texstudio /home/user/atelier/main.tex",
        "shell": True,
    }
    assert task.config[2]["parameters"] == {"seconds": 2.5}
    assert task.related_apps == ["texstudio"]
    assert unsupported_parts(task) == []


def test_file_check_expects_the_touched_text_with_source_replaced():
    raw = _raw("VM/TeXstudio/C-02")
    task = load_task(TEX / "C-02.json")
    assert task.evaluator.funcs == ["sb_file", "sb_compile"]
    assert task.evaluator.conj == "and"
    written = raw["initialize"][0]["text"]
    expected = task.evaluator.expecteds[0]["rules"]["text"]
    assert expected == written.replace(r"\Pi x: M. B", r"\Pi x: A. B") != written
    assert task.evaluator.results[0] == {
        "type": "vm_file",
        "path": "/home/user/atelier/main.tex",
        "dest": "main.tex",
    }
    assert task.evaluator.results[1]["bibtex"] is False
    assert load_task(TEX / "B-01.json").evaluator.results[1]["bibtex"] is True  # refs.bib


def test_the_port_placeholder_and_the_apps_launched_deep_in_a_command():
    kalgebra = load_task(TEX / "A-04.json")
    assert "«PORTLIKE»" not in json.dumps(kalgebra.config)
    assert kalgebra.related_apps == ["texstudio", "kalgebra"]
    assert load_task(TEX / "B-03.json").related_apps == ["texstudio", "grass"]  # inside bash -ic
    assert load_task(TEX / "B-02.json").related_apps == ["texstudio", "celestia"]
    assert load_task(TEX / "C-05.json").related_apps == ["texstudio", "vs_code"]


def test_sb_file_reads_as_scienceboard_does(tmp_path):
    path = tmp_path / "main.tex"
    path.write_bytes(b"a\r\nb\n")
    assert METRICS["sb_file"](str(path), {"text": "a\nb\n"}) == 1.0  # text mode: \r\n is \n
    assert METRICS["sb_file"](str(path), {"text": "a\nb"}) == 0.0  # the whole text, exactly
    assert METRICS["sb_file"](None, {"text": ""}) == 0.0
    path.write_bytes(b"\xff\xfe")
    assert METRICS["sb_file"](str(path), {"text": ""}) == 0.0
    path.write_text("\\cite{de2015lean}")
    assert METRICS["sb_include"](str(path), {"pattern": r"\\cite\{de2015\w+\}"}) == 1.0
    assert METRICS["sb_include"](str(path), {"pattern": "nope"}) == 0.0
    assert METRICS["sb_compile"]({"pass": True}) == 1.0
    assert METRICS["sb_compile"]({"pass": False, "log": "! Undefined"}) == 0.0


def test_stop_is_the_first_terminal_action_and_ans_splits_at_blanks():
    assert stop_of([]) == {"value": "TIMEOUT", "args": []}
    played = [
        {"action": "click", "x": 1, "y": 2},
        {"action": "answer", "text": " Vigili del Fuoco"},
    ]
    assert stop_of(played) == {"value": "ANS", "args": ["Vigili", "del", "Fuoco"]}
    assert stop_of([{"action": "fail"}, {"action": "done"}]) == {"value": "FAIL", "args": []}
    rule = load_task(TEX / "D-01.json").evaluator.expecteds[0]["rules"]
    assert rule == {"value": "ANS", "args": ["13"]}
    sb_stop = METRICS["sb_stop"]
    assert sb_stop(stop_of([{"action": "answer", "text": "13"}]), rule) == 1.0
    assert sb_stop(stop_of([{"action": "answer", "text": "13 "}]), rule) == 1.0
    assert sb_stop(stop_of([{"action": "answer", "text": "14"}]), rule) == 0.0
    assert sb_stop(stop_of([{"action": "done"}]), rule) == 0.0
    assert sb_stop(stop_of([{"action": "done"}]), {"value": "DONE", "args": []}) == 1.0


def test_malformed_tasks_are_task_errors_naming_the_field(tmp_path):
    raw = _raw("VM/TeXstudio/C-02")
    cases = [
        ({k: v for k, v in raw.items() if k != "evaluate"}, "needs `evaluate`"),
        ({**raw, "sort": "Cloud"}, "`sort` must be one of"),
        ({**raw, "evaluate": []}, "`evaluate` is empty"),
        ({**raw, "initialize": raw["initialize"][1:]}, "no `touch` step writes"),
        ({**raw, "evaluate": [{"type": "stop", "value": "MAYBE"}]}, "DONE, FAIL, ANS"),
        (
            {
                **raw,
                "initialize": [*raw["initialize"], {"func": "launch", "wait": -1, "command": "x"}],
            },
            "`wait`",
        ),
    ]
    for i, (bad, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(TaskError, match=message):
            load_task(path)


def test_coverage_runs_texstudio_tasks_and_says_why_not_for_the_rest():
    apps_here = {"texstudio", "vs_code", "os"}
    verdicts = {
        e.key: assess(
            e,
            is_cached=lambda url: False,
            app_missing=lambda app: None if app.name in apps_here else f"{app.name} is missing",
        )
        for e in read_task_folder(SB)
    }
    runnable = sorted(k for k, v in verdicts.items() if v.runnable)
    assert runnable == [f"TeXstudio/{t}" for t in TEX_ONLY]
    web = verdicts["TeXstudio/B-04"]
    assert web.supported and [r.kind for r in web.reasons] == ["web"]
    assert "scholar.google.com" in web.reasons[0].detail
    chimerax = verdicts["TeXstudio/A-01"]
    assert not chimerax.supported
    details = " | ".join(r.detail for r in chimerax.reasons)
    assert "sb_chimerax_open" in details and "chimerax is missing" in details
    surface = verdicts["KAlgebra/A-03"]  # a 3D plot: the stock app does not show it
    reasons = " | ".join(r.detail for r in surface.reasons)
    assert "sb_kalgebra_eqn3d" in reasons and UNAVAILABLE_METRICS["sb_kalgebra_eqn3d"] in reasons
    assert "sb_kalgebra_var" not in UNAVAILABLE_METRICS


def test_an_apps_own_steps_and_checks_are_named_by_the_app():
    kalgebra = load_task(SB / "VM" / "KAlgebra" / "A-02.json")
    assert [s["type"] for s in kalgebra.config] == ["launch", "sleep", "sb_kalgebra_tab"]
    assert kalgebra.evaluator.funcs == ["sb_kalgebra_eqn"]
    chimerax = load_task(SB / "VM" / "ChimeraX" / "A-01.json")
    assert chimerax.config[-1]["type"] == "sb_chimerax_clear_log"
    assert load_task(TEX / "A-01.json").config[-1]["type"] == "sb_chimerax_turn"


async def test_a_fail_ending_is_checked_by_the_task_not_scored_0_at_once():
    from runtime.envs.tasks.evaluate import decided_by_actions

    task = load_task(TEX / "C-06.json")
    assert decided_by_actions(task, [{"action": "fail"}]) is None


def test_the_vm_images_grass_data_makes_a_task_not_runnable_even_with_grass_here():
    verdicts = {
        e.key: assess(e, is_cached=lambda url: False, app_missing=lambda app: None)
        for e in read_task_folder(SB)
    }
    for key in ("TeXstudio/B-03", "GrassGIS/A-01"):
        files = [r for r in verdicts[key].reasons if r.kind == "file"]
        assert len(files) == 1 and "natural_earth_dataset" in files[0].detail, key
    assert verdicts["TeXstudio/B-03"].supported and not verdicts["TeXstudio/B-03"].runnable
