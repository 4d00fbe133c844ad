"""The overlap audit against a benchmark folder with a planted overlap of every kind and
tasks that come close without overlapping; the real MiniLM embeddings (loaded offline, once);
`scalecua verigen audit --filter` moving flagged tasks of the topic out of training."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli import main
from producers.task_import import publish_tasks
from producers.verigen.audit import audit, objective_similarity
from producers.verigen.embedding import default_embedder
from producers.verigen.sources import load_task_folder, read_tasks
from runtime.config import BusSettings
from tests.producers.verigen.scenarios import NOTE_JUDGE, note_candidate
from topics.events import TaskEvent


def _task(tid: str, instruction: str, evaluator: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"id": tid, "instruction": instruction, "config": [], "evaluator": evaluator,
            "related_apps": ["terminal"], **more}  # fmt: skip


RENAME = {"func": ["file_exists", "check_include_exclude"], "conj": "and",
          "result": [{"type": "vm_file", "path": "/home/user/final.txt", "dest": "final.txt"},
                     {"type": "vm_command_line", "command": "ls /home/user", "shell": True}],
          "expected": [None, {"type": "rule", "rules": {"include": ["final.txt"],
                                                        "exclude": ["draft.txt"]}}]}  # fmt: skip
COUNT = {"func": "compare_text_file",
         "result": {"type": "vm_file", "path": "/home/user/count.txt", "dest": "count.txt"},
         "expected": {"type": "rule", "rules": {"text": "42"}}}  # fmt: skip
BOLD = {"func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/inventory.xlsx",
                                            "dest": "inventory.xlsx"},
        "options": {"rules": [{"type": "check_cell", "coordinate": "A1", "props": {"bold": True}}]}}  # fmt: skip
BENCHMARK = {
    "terminal/rename.json": _task("rename", "Rename the file draft.txt in the home folder to final.txt.", RENAME),
    "terminal/groceries.json": {**note_candidate("groceries.txt", "buy milk"), "id": "groceries"},
    "calc/bold.json": _task("bold", "Make the header row of inventory.xlsx bold and save the file.", BOLD),
    "terminal/count.json": _task("count", "Count the lines of events.log in the home folder and write the number into count.txt.", COUNT),
}  # fmt: skip
# A judge that is the benchmark's, reformatted and commented: reuse all the same.
REUSED_JUDGE = "# checks the note\n" + NOTE_JUDGE.replace(
    "    if not path:", "    if not path:  # none"
)
RENAME_LS_A = copy.deepcopy(RENAME)
RENAME_LS_A["result"][1]["command"] = "ls -a /home/user"  # another check of the same objective
POOL = [
    # every check: the benchmark's count task copied under another id, with VeriGen metadata
    {**BENCHMARK["terminal/count.json"], "id": "copy", "app": "terminal", "explanation": "x",
     "validation": {"rule_pass": True}},
    # the instruction, retyped; an unrelated verifier
    _task("retyped", "make the HEADER row of inventory.xlsx bold, and save the file!",
          {"func": "file_exists", "result": {"type": "vm_file", "path": "/home/user/report.txt"}}),
    # the same objective reworded, checked by another command
    _task("reworded", "In your home folder, rename draft.txt so that it is called final.txt.",
          RENAME_LS_A),
    # another note task, judged by the benchmark's judge
    {**note_candidate("todo.txt", "call mom", judge=REUSED_JUDGE), "id": "same-judge"},
    # close but not the same: a count into another file, and the note task with another value
    _task("words", "Count the words of notes.txt in the home folder and write the number into words.txt.",
          {**COUNT, "result": {"type": "vm_file", "path": "/home/user/words.txt"}}),
    _task("other-note", "Create the file groceries.txt in the home folder containing exactly the line: buy bread",
          {"func": "compare_text_file", "result": {"type": "vm_file", "path": "/home/user/groceries.txt"},
           "expected": {"type": "rule", "rules": {"text": "buy bread"}}}),
]  # fmt: skip
EXPECTED = {
    "copy": {"full_json", "instruction", "near_duplicate", "judge_reuse"},
    "retyped": {"instruction"},
    "reworded": {"near_duplicate"},
    "same-judge": {"judge_reuse"},
}


@pytest.fixture(scope="module")
def offline_embedder() -> Iterator[None]:
    """Load the packaged model once, with every connection off this machine refused."""
    connect = socket.socket.connect

    def loopback_only(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and not str(address[0]).startswith(("127.", "::1")):
            raise OSError(f"the embedder tried the network: {address}")
        return connect(self, address)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", loopback_only)
        vectors = default_embedder().encode(["Rename draft.txt to final.txt.", "Bold the header."])
    assert vectors.shape == (2, 384)
    yield


@pytest.fixture
def benchmark_dir(tmp_path: Path) -> Path:
    root = tmp_path / "benchmark"
    for name, task in BENCHMARK.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(task))
    (root / "test_all.json").write_text(json.dumps({"terminal": ["rename"]}))  # an index
    return root


def test_each_planted_overlap_is_flagged_by_its_check_and_nothing_else(
    offline_embedder: None, benchmark_dir: Path
) -> None:
    benchmark, skipped = load_task_folder(benchmark_dir)
    assert len(benchmark) == 4 and skipped == [str(benchmark_dir / "test_all.json")]
    embedder = default_embedder()
    report = audit(
        POOL, benchmark,
        embedder.encode([t["instruction"] for t in POOL]),
        embedder.encode([t["instruction"] for t in benchmark]),
    )  # fmt: skip
    assert {t: set(f) for t, f in report.findings.items()} == EXPECTED
    matched = {
        t: {m["benchmark"] for ms in f.values() for m in ms} for t, f in report.findings.items()
    }
    assert matched == {"copy": {"terminal/count.json"}, "retyped": {"calc/bold.json"},
                       "reworded": {"terminal/rename.json"},
                       "same-judge": {"terminal/groceries.json"}}  # fmt: skip
    near = report.findings["reworded"]["near_duplicate"][0]["score"]
    assert 0.9 <= near < 1.0
    assert objective_similarity(RENAME, RENAME_LS_A) == 1.0
    counts = report.counts()
    assert {c: counts[c]["tasks"] for c in counts} == {
        "full_json": 1, "instruction": 2, "near_duplicate": 2, "judge_reuse": 2, "any": 4}  # fmt: skip
    assert counts["any"]["share"] == round(4 / 6, 4)
    table = report.table()
    assert "| full-JSON duplicate | 1 | 16.7% | 1 |" in table
    assert "| clean | 2 | 33.3% | | |" in table and "composite ≥ 0.90" in table
    assert report.to_dict()["flagged"] == sorted(EXPECTED)


async def _publish(settings: BusSettings) -> None:
    events = [TaskEvent(task_id=t["id"], task=t, source="verigen") for t in POOL]
    events.append(TaskEvent(task_id="held", task=POOL[0], source="osworld", split="benchmark"))
    await publish_tasks(settings, events)


def test_audit_filter_moves_flagged_tasks_of_the_topic_out_of_training(
    offline_embedder: None, benchmark_dir: Path, bus_settings: BusSettings,
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:  # fmt: skip
    asyncio.run(_publish(bus_settings))
    out = tmp_path / "report.json"
    code = main(["verigen", "audit", "--benchmark", str(benchmark_dir), "--filter",
                 "--bootstrap", bus_settings.bootstrap, "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report == json.loads(out.read_text())
    assert report["tasks"] == 6  # the train split only: `held` is no training task
    assert report["counts"]["any"]["tasks"] == 4 and report["filtered"] == sorted(EXPECTED)
    assert "| exact judge reuse | 2 |" in captured.err and "re-published" in captured.err
    tasks = asyncio.run(read_tasks(bus_settings))
    assert {t for t, e in tasks.items() if e.split == "train"} == {"words", "other-note"}
    moved = tasks["reworded"]
    assert moved.split == "benchmark" and moved.source == "verigen"
    assert moved.task["audit"] == {
        "checks": ["near_duplicate"],
        "benchmark": ["terminal/rename.json"],
    }


def test_scienceboard_tasks_are_in_the_benchmark_the_audit_reads(offline_embedder: None) -> None:
    """ScienceBoard's task JSON (no `evaluator`, no `id`) is audited in OSWorld's shape: a
    training task that copies one's instruction and checks is flagged."""
    folder = Path(__file__).resolve().parents[2] / "data" / "scienceboard"
    benchmark, skipped = load_task_folder(folder)
    assert len(benchmark) == len(list(folder.rglob("*.json"))) and skipped == []
    c06 = next(t for t in benchmark if t["_path"] == "VM/TeXstudio/C-06.json")
    assert c06["id"] == "C-06" and c06["evaluator"]["func"] == ["sb_compile"]
    copied = {k: v for k, v in copy.deepcopy(c06).items() if k != "_path"} | {"id": "copied"}
    embedder = default_embedder()
    pool = [copied, POOL[-1]]
    report = audit(
        pool, benchmark,
        embedder.encode([t["instruction"] for t in pool]),
        embedder.encode([t["instruction"] for t in benchmark]),
    )  # fmt: skip
    assert set(report.findings) == {"copied"}
    assert {"full_json", "instruction"} <= set(report.findings["copied"])
