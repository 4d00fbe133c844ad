"""`scalecua eval --tasks DIR` on real desktops: the rollout worker plays, the judge scores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.envs.tasks.builtin import POOL_DIR, reference_solution

pytestmark = pytest.mark.desktop


def _task_folder(tmp_path: Path, solved: tuple[str, ...], unsolved: tuple[str, ...]) -> Path:
    """A folder of copies of pool tasks, the `solved` ones carrying their reference solution."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    # Renamed so the scripted policy cannot find the pool's solution by id: a task carrying
    # its solution passes (the scripted policy plays it), one without fails.
    for task_id in solved + unsolved:
        task = json.loads((POOL_DIR / f"{task_id}.json").read_text())
        task["id"] = f"copy-{task_id}"
        if task_id in solved:
            task["solution"] = reference_solution(task_id)
        (folder / f"{task_id}.json").write_text(json.dumps(task))
    return folder


def _env(tmp_path: Path) -> dict[str, str]:
    """The environment of an eval subprocess with a home of its own."""
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home")}
    env.pop("SCALECUA_BOOTSTRAP", None)
    return env


def test_eval_scores_a_folder_of_tasks_with_an_interval_and_per_app_rates(tmp_path: Path) -> None:
    folder = _task_folder(tmp_path, solved=("terminal_write_json_config", "terminal_mkdir_projects"),
                          unsolved=("terminal_create_empty_notes",))  # fmt: skip
    env = _env(tmp_path)
    out = tmp_path / "result.json"
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--tasks",
         str(folder), "--desktops", "2", "--max-steps", "15", "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(out.read_text())
    assert result["n"] == 3 and result["passed"] == 2 and result["unscored"] == 0, (
        result,
        run.stderr[-3000:],
    )
    assert result["pass_rate"] == pytest.approx(2 / 3, abs=1e-4)
    low, high = result["ci95"]
    assert 0.0 < low < 2 / 3 < high < 1.0
    assert result["families"]["terminal"]["n"] == 3
    # Keyed as on `tasks`, `<folder>/<file name>`, with the task's own id beside the key.
    statuses = {o["task_id"]: (o["id"], o["score"], o["status"]) for o in result["outcomes"]}
    assert statuses["tasks/terminal_create_empty_notes"] == (
        "copy-terminal_create_empty_notes", 0.0, "fail",
    )  # fmt: skip
    # As `up`: the services' INFO lines (metrics, starts) go to their files, not the console.
    assert not [line for line in run.stderr.splitlines() if " INFO " in line], run.stderr[-2000:]
    (logs,) = (tmp_path / "home" / "evals").glob("*/logs")
    assert f"{logs}/<service>.log" in run.stderr
    assert " INFO " in (logs / "judge.log").read_text()
    assert (logs / "rollout.log").stat().st_size > 0


def test_eval_without_tasks_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "tiny", "--tasks",
         str(tmp_path / "nothing-here")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1 and "no tasks at" in run.stderr


def test_eval_on_held_out_family_instances_reports_held_out_families_apart(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--split",
         "heldout", "--n", "4", "--families", "copy_file", "echo_to_file", "--max-steps", "6"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    # The scripted policy plays each instance's reference solution: all pass.
    assert (result["n"], result["passed"]) == (4, 4), result
    assert set(result["families"]) == {"copy_file", "echo_to_file"}
    assert result["heldout_families"]["n"] == 2 and result["seen_families"]["n"] == 2


def test_sampled_eval_plays_each_task_as_a_group_and_reports_pass_at_k(tmp_path: Path) -> None:
    folder = _task_folder(tmp_path, solved=("terminal_mkdir_projects",),
                          unsolved=("terminal_create_empty_notes",))  # fmt: skip
    env = _env(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--tasks",
         str(folder), "--desktops", "2", "--max-steps", "15", "--samples", "3",
         "--temperature", "0.8"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "3 samples each at temperature 0.8" in run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["n"] == 6 and result["tasks"] == 2 and result["passed"] == 3, result
    assert result["pass_at_k"] == {"1": 0.5, "2": 0.5, "3": 0.5}
    samples = sorted((o["task_id"], o["sample"]) for o in result["outcomes"])
    assert samples == [(f"tasks/{p.stem}", i) for p in sorted(folder.iterdir()) for i in range(3)]


def test_samples_without_a_temperature_are_refused(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--split",
         "heldout", "--n", "2", "--samples", "4"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1 and "give a temperature > 0" in run.stderr, run.stderr[-2000:]
