"""`scalecua tasks list` and `scalecua task run` on a task the pool has never seen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.envs.tasks.builtin import builtin_ids

UNSEEN = Path(__file__).parent / "unseen"
SCALECUA = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())"]


def _scalecua(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*SCALECUA, *args], capture_output=True, text=True, timeout=timeout)


def test_tasks_list_prints_builtin_ids():
    done = _scalecua("tasks", "list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == builtin_ids()


@pytest.mark.desktop
@pytest.mark.parametrize(
    ("actions", "score"),
    [("correct_actions.json", 1.0), ("wrong_actions.json", 0.0), (None, 0.0)],
    ids=["correct", "wrong", "none"],
)
def test_task_run_scores_an_unseen_task(actions, score, tmp_path):
    args = ["task", "run", str(UNSEEN / "stock_task.json")]
    if actions:
        args += ["--actions", str(UNSEEN / actions), "--screenshots", str(tmp_path)]
    done = _scalecua(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["score"] == score, result
    assert result["task_id"] == "unseen-stock-csv"
    assert result["steps"] == (8 if actions else 0)
    assert result["step_errors"] == []
    if actions:
        assert (tmp_path / "000_setup.png").is_file() and (tmp_path / "008_wait.png").is_file()


def test_task_run_reports_bad_input_cleanly(tmp_path):
    (tmp_path / "broken.json").write_text('{"id": "x"}')
    done = _scalecua("task", "run", str(tmp_path / "broken.json"))
    assert done.returncode == 1
    assert "missing required field" in done.stderr and "Traceback" not in done.stderr
    done = _scalecua("task", "run", "no-such-builtin")
    assert done.returncode == 1 and "no built-in task" in done.stderr


@pytest.mark.desktop
def test_tasks_check_verifies_builtin_tasks():
    done = _scalecua("tasks", "check", "terminal_write_greeting", "--desktops", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["sound"] and (result["untouched"], result["solved"]) == (0.0, 1.0)
    missing = _scalecua("tasks", "check", "no-such-task")
    assert missing.returncode == 1 and "no built-in task" in missing.stderr
