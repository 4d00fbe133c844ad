"""`scalecua verigen augment --from-log` end to end: rollouts of built-in tasks on a real broker,
the replay server as the model, real desktops validating every candidate; one decomposition
of a failed task and one composition of two solved ones accepted onto `tasks`, with their
provenance; the composed task scores 0.0 when only one of its objectives is met."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from producers.task_import import task_event
from producers.verigen.sources import read_tasks
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import load_builtin, reference_solution
from tests.producers.verigen.scenarios import verdict
from topics.events import Event, Reward, RolloutStep, TrajectoryComplete

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktops and the judge sandbox need root"),
]
SCALECUA = [sys.executable, "-m", "cli"]
FAILED = "terminal_project_scaffold"  # every rollout leaves the reference at `mkdir src`
SOLVED = ["terminal_create_empty_notes", "terminal_rename_draft"]  # cosine 0.50: one cluster
ALONE = "terminal_mkdir_projects"  # solved too, but like neither (cosine 0.34 and 0.20)
BENCHMARK = "terminal_sort_names"  # failed, but a benchmark task: never grown

SUBTASK = {
    "id": "proj-src",
    "instruction": "Create a folder proj in the home folder with one subfolder named src.",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "shell": True,
            "command": "cd /home/user/proj && find . -type d | sort",
        },
        "expected": {"type": "rule", "rules": {"expected": ".\n./src\n"}},
    },  # fmt: skip
    "related_apps": ["terminal"],
    "app": "terminal",
    "explanation": "The folders under ~/proj are listed and compared.",
    "difficulty": "easy",
    "estimated_steps": 4,
    "solution": [
        {"action": "key", "text": "ctrl+alt+t"},
        {"action": "wait", "duration": 2.0},
        {"action": "type", "text": "mkdir -p ~/proj/src\n"},
        {"action": "wait", "duration": 1.0},
    ],
}
COMPOSED = {
    "instruction": "In the home folder, create an empty file notes.txt inside the Documents "
    "folder, and rename the file draft.txt to final.txt.",
    "explanation": "Both objectives are verified; the task passes only when both are met.",
    "difficulty": "medium",
    "estimated_steps": 8,
}
RECORDS = [
    {"agent": "decomposer", "contains": [FAILED, "after reference actions 0..3"],
     "reply": json.dumps({"subgoal": "~/proj exists with its src folder", "task": SUBTASK})},
    {"agent": "composer", "contains": ["notes.txt", "draft.txt"], "reply": json.dumps(COMPOSED)},
    {"agent": "judger", "reply": verdict()},
]  # fmt: skip


def _rollout(task_id: str, n: int, actions: list[dict[str, Any]], score: float) -> list[Event]:
    trajectory = f"{task_id}/g/{n}@a"
    return [
        *(RolloutStep(trajectory_id=trajectory, step=i, task_id=task_id, action=a)
          for i, a in enumerate(actions)),
        TrajectoryComplete(trajectory_id=trajectory, status="done", num_steps=len(actions),
                           task_id=task_id),
        Reward(trajectory_id=trajectory, task_id=task_id, group_id=f"{task_id}/g", group_size=2,
               score=score, sample_index=n),
    ]  # fmt: skip


async def _seed_log(settings: BusSettings) -> None:
    """Tasks on `tasks`, and the rollouts a run of the loop would have left on the log."""
    wrong = [*reference_solution(FAILED)[:4], {"action": "type", "text": "mkdir scr\n"}]
    events: list[tuple[str, Event]] = []
    for tid in [FAILED, *SOLVED, ALONE]:
        events.append(("tasks", task_event(load_builtin(tid), source="builtin")))
    events.append(
        ("tasks", task_event(load_builtin(BENCHMARK), source="builtin", split="benchmark"))
    )
    for n in range(2):
        rollouts = _rollout(FAILED, n, wrong, 0.0) + _rollout(BENCHMARK, n, wrong[:1], 0.0)
        for tid in [*SOLVED, ALONE]:
            rollouts += _rollout(tid, n, reference_solution(tid), 1.0)
        events += [(_topic(e), e) for e in rollouts]
    async with EventProducer(settings) as producer:
        await producer.wait_acks([await producer.send(t, e) for t, e in events])


def _topic(event: Event) -> str:
    return {RolloutStep: "rollout-step", TrajectoryComplete: "trajectory-complete",
            Reward: "reward"}[type(event)]  # fmt: skip


@pytest.fixture
def replay_url(tmp_path: Path) -> Iterator[str]:
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"responses": RECORDS}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "producers.verigen.replay", str(records), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield json.loads(proc.stdout.readline())["base_url"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_augment_from_the_log_publishes_a_decomposition_and_a_composition(
    cli_env: dict[str, str], bus_settings: BusSettings, replay_url: str, tmp_path: Path
) -> None:
    asyncio.run(_seed_log(bus_settings))
    out = tmp_path / "accepted"
    run = subprocess.run(
        [*SCALECUA, "verigen", "augment", "--from-log", "--subtasks", "1",
         "--cluster-threshold", "0.4", "--llm-url", replay_url, "--model", "replay",
         "--workers", "2", "--desktops", "2", "--rounds", "1", "--no-checker",
         "--out", str(out), "--timeout", "300"],
        env=cli_env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    plan = summary["plan"]
    assert (plan["failed_tasks"], plan["solved_tasks"]) == (1, 3)  # the benchmark task is not
    assert (plan["decompose_seeds"], plan["compose_seeds"]) == (1, 1)
    assert plan["clusters"]["terminal"] == [sorted(SOLVED)]
    for kind in ("decompose", "compose"):
        assert (summary[kind]["candidates"], summary[kind]["accepted"]) == (1, 1), run.stderr
    tasks = asyncio.run(read_tasks(bus_settings))
    grown = {e.task["provenance"]["kind"]: e for e in tasks.values() if e.source == "verigen"}
    assert set(grown) == {"decompose", "compose"}
    sub = grown["decompose"].task
    assert sub["provenance"]["parents"] == [FAILED] and sub["provenance"]["through"] == 3
    assert sub["provenance"]["deviation_index"] == 3 and grown["decompose"].split == "train"
    assert sub["validation"]["solved_score"] == 1.0 and sub["validation"]["untouched_score"] == 0.0
    composed = grown["compose"].task
    assert sorted(composed["provenance"]["parents"]) == sorted(SOLVED)
    assert composed["evaluator"]["conj"] == "and" and len(composed["evaluator"]["func"]) == 3
    assert composed["validation"]["solved_score"] == 1.0
    assert composed["instruction"] == COMPOSED["instruction"]
    # all sub-judges must pass: the first objective alone scores 0.0
    path = tmp_path / "composed.json"
    path.write_text(json.dumps(composed))
    half = tmp_path / "half.json"
    half.write_text(json.dumps(composed["solution"][:4]))
    played = subprocess.run([*SCALECUA, "task", "run", str(path), "--actions", str(half)],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert played.returncode == 0, played.stderr[-2000:]
    assert json.loads(played.stdout)["score"] == 0.0
