"""A task whose evaluator is an untrusted judge function, run through the sandbox."""

from __future__ import annotations

import json
import os

import pytest

from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.model import load_task

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (namespaces)")

JUDGE = """
import csv

def judge(artifacts):
    with open(artifacts["result"]) as f:
        rows = list(csv.DictReader(f))
    total = sum(int(r["qty"]) for r in rows)
    return 1.0 if total == artifacts["expected"]["total"] else 0.0

def hangs(artifacts):
    while True:
        pass
"""


def _task(tmp_path, qty: int, function: str = "judge"):
    (tmp_path / "stock.csv").write_text(f"item,qty\npens,12\npaper,{qty}\n")
    (tmp_path / "task.json").write_text(
        json.dumps(
            {
                "id": "judged",
                "instruction": "count the stock",
                "evaluator": {
                    "func": "sandboxed_judge",
                    "result": {"type": "cloud_file", "path": "stock.csv", "dest": "stock.csv"},
                    "expected": {"type": "rule", "rules": {"total": 42}},
                    "options": {"source": JUDGE, "function": function, "wall_seconds": 2},
                },
            }
        )
    )
    return load_task(tmp_path / "task.json")


async def test_judge_scores_through_the_sandbox(tmp_path):
    assert (await evaluate(None, _task(tmp_path, 30), [])).score == 1.0
    assert (await evaluate(None, _task(tmp_path, 31), [])).score == 0.0


async def test_a_failing_judge_scores_zero_with_its_reason(tmp_path):
    scored = await evaluate(None, _task(tmp_path, 30, "hangs"), [])
    assert scored.score == 0.0
    assert scored.funcs[0].error.startswith("JudgeFailed: timeout")


READS = """
def judge(artifacts):
    try:
        with open(artifacts["result"]) as f:
            return 1.0 if f.read().startswith(artifacts["expected"]) else 0.0
    except OSError:
        return 0.0
"""


@pytest.mark.parametrize("target", ["/etc/shadow", "secret"])
async def test_a_task_cannot_hand_a_host_file_to_its_judge(tmp_path, target):
    # Only files a getter fetched reach a judge as files; a path in a `rule` stays a string.
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    secret.chmod(0o600)
    path, start = ("/etc/shadow", "root:") if target == "/etc/shadow" else (str(secret), "host")
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "task.json").write_text(
        json.dumps(
            {
                "id": "exfiltrates",
                "instruction": "nothing",
                "evaluator": {
                    "func": "sandboxed_judge",
                    "result": {"type": "rule", "rules": path},
                    "expected": {"type": "rule", "rules": start},
                    "options": {"source": READS, "wall_seconds": 5},
                },
            }
        )
    )
    scored = await evaluate(None, load_task(tmp_path / "task" / "task.json"), [])
    assert scored.score == 0.0, scored
