"""`scalecua eval --tasks DIR --index INDEX`: OSWorld's benchmark as one command, on real
desktops with real OSWorld task files (tests/data/osworld, unchanged) and the scripted policy
(which answers a task without a solution with FAIL: 1.0 on an infeasible task, else 0.0)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.envs.tasks.model import load_task

pytestmark = pytest.mark.desktop

OSWORLD = Path(__file__).resolve().parents[2] / "data" / "osworld"
TRASH = "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"  # downloads a poster from Google Drive
BLUETOOTH = "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"  # infeasible
SHARED = "06fe7178-4491-4589-810f-2e2bc9502122"  # the chrome one opens live web pages


def test_eval_plays_the_runnable_tasks_and_prints_osworlds_table(tmp_path: Path) -> None:
    index = tmp_path / "test_tiny.json"
    index.write_text(json.dumps({"os": [BLUETOOTH, TRASH], "chrome": [SHARED]}))
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home"),
           "SCALECUA_FILES": str(tmp_path / "files")}  # fmt: skip
    env.pop("SCALECUA_BOOTSTRAP", None)
    # The poster the Trash task downloads, seeded by hand (no network here).
    url = load_task(OSWORLD / "os" / f"{TRASH}.json").config[0]["parameters"]["files"][0]["url"]
    poster = tmp_path / "poster.webp"
    poster.write_bytes(b"RIFF\x1a\x00\x00\x00WEBPVP8L")
    subprocess.run([sys.executable, "-m", "cli", "tasks", "files", "add", url,
                    str(poster)], env=env, check=True, capture_output=True, timeout=60)  # fmt: skip
    out = tmp_path / "result.json"
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--tasks",
         str(OSWORLD), "--index", str(index), "--desktops", "2", "--max-steps", "3",
         "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(out.read_text())
    outcomes = {o["task_id"]: o for o in result["outcomes"]}
    assert set(outcomes) == {f"os/{BLUETOOTH}", f"os/{TRASH}"}  # chrome's needs the live web
    assert (outcomes[f"os/{BLUETOOTH}"]["score"], outcomes[f"os/{BLUETOOTH}"]["id"]) == (
        1.0,
        BLUETOOTH,
    )
    # Its setup downloaded the poster from the cache: an episode, not a setup error.
    assert (outcomes[f"os/{TRASH}"]["score"], outcomes[f"os/{TRASH}"]["status"]) == (0.0, "fail")

    table = result["benchmark"]
    os_row, chrome_row = table["by_domain"]["os"], table["by_domain"]["chrome"]
    assert {k: os_row[k] for k in ("tasks", "runnable", "played", "passed", "success")} == {
        "tasks": 2, "runnable": 2, "played": 2, "passed": 1, "success": 0.5,
    }  # fmt: skip
    assert (chrome_row["tasks"], chrome_row["runnable"], chrome_row["played"]) == (1, 0, 0)
    assert chrome_row["not_runnable"]["web"] == 1 and chrome_row["success"] is None
    overall = table["overall"]
    assert (overall["tasks"], overall["played"], overall["passed"]) == (3, 2, 1)
    assert overall["success_of_all"] == pytest.approx(1 / 3, abs=1e-4)
    assert table["categories"]["OS"]["success"] == 0.5 and "Daily" in table["categories"]
    (skipped,) = result["not_run"]
    assert skipped["task_id"] == f"chrome/{SHARED}"
    assert any(r["kind"] == "web" for r in skipped["reasons"])
    assert result["coverage"] == {"total": 3, "supported": result["coverage"]["supported"],
                                  "runnable": 2}  # fmt: skip
    printed = [line.split() for line in run.stderr.splitlines()]
    assert ["os", "2", "2", "2", "1", "50.0%", "50.0%"] in [p[:7] for p in printed]
    assert ["Overall", "3", "2", "2", "1", "50.0%", "33.3%"] in [p[:7] for p in printed]


def test_index_needs_a_folder_of_tasks(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--split",
         "heldout", "--index", str(tmp_path / "test_all.json")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "--index goes with --tasks DIR" in run.stderr, run.stderr


def test_eval_of_a_scienceboard_folder_prints_its_per_app_table(tmp_path: Path) -> None:
    """A folder of ScienceBoard's task JSON needs no index: its runnable tasks are played and
    its per-app table printed (the scripted policy says FAIL: the document still does not
    compile, the question is not answered)."""
    scienceboard = Path(__file__).resolve().parents[2] / "data" / "scienceboard" / "VM"
    folder = tmp_path / "VM"
    for name in ("TeXstudio/C-06", "TeXstudio/D-01", "KAlgebra/A-03"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(scienceboard / f"{name}.json", folder / f"{name}.json")
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path / "home")}
    env.pop("SCALECUA_BOOTSTRAP", None)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--policy", "scripted", "--tasks", str(folder),
         "--desktops", "2", "--max-steps", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["benchmark_name"] == "ScienceBoard"
    outcomes = {o["task_id"]: (o["id"], o["score"]) for o in result["outcomes"]}
    assert outcomes == {"TeXstudio/C-06": ("C-06", 0.0), "TeXstudio/D-01": ("D-01", 0.0)}
    table = result["benchmark"]
    assert set(table["categories"]) == {"Doc", "Algebra"}
    doc = table["categories"]["Doc"]
    assert (doc["tasks"], doc["runnable"], doc["played"], doc["passed"]) == (2, 2, 2, 0)
    assert (table["categories"]["Algebra"]["tasks"], table["categories"]["Algebra"]["played"]) == (
        1,
        0,
    )
    (skipped,) = result["not_run"]
    assert skipped["task_id"] == "KAlgebra/A-03"  # a 3D plot, which the stock app hides
    printed = [line.split()[:5] for line in run.stderr.splitlines()]
    assert ["Doc", "2", "2", "2", "0"] in printed and ["Overall", "3", "2", "2", "0"] in printed
