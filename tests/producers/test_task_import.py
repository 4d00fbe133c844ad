"""`scalecua tasks import`: OSWorld task files and the built-in pool onto the `tasks` topic."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import builtin_ids
from runtime.envs.tasks.model import Task

SCALECUA = [sys.executable, "-m", "cli"]

TASK = {
    "id": "osworld-like-0001",
    "snapshot": "libreoffice_calc",
    "instruction": "Write 42 in ~/answer.txt",
    "source": "test",
    "config": [{"type": "execute", "parameters": {"command": ["touch", "/home/user/answer.txt"]}}],
    "related_apps": ["terminal"],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_file", "path": "/home/user/answer.txt", "dest": "answer.txt"},
        "expected": {"type": "rule", "rules": {"match": "42"}},
    },
    "proxy": False,
}


async def _read_tasks(settings: BusSettings, n: int) -> list:
    out = []
    async with EventConsumer(settings, ["tasks"], group_id=None) as consumer:
        tps = await consumer.partitions_of("tasks")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            out.extend(await consumer.getmany(timeout_ms=200))
            if await consumer.at_end(tps):  # fewer than n on the topic: all of them
                break
    return out


async def test_import_files_and_builtin_pool(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    folder = tmp_path / "osworld" / "calc"
    folder.mkdir(parents=True)
    (folder / "t1.json").write_text(json.dumps(TASK))
    res = subprocess.run([*SCALECUA, "tasks", "import", str(tmp_path / "osworld"), "--split",
                          "benchmark", "--source", "osworld"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*SCALECUA, "tasks", "import", "--builtin"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    n = 1 + len(builtin_ids())
    records = await _read_tasks(bus_settings, n)
    assert len(records) == n
    by_key = {r.event.task_id: r for r in records}
    imported = by_key["calc/t1"].event  # a task from a file: `<folder>/<file name>`
    assert (imported.split, imported.source) == ("benchmark", "osworld")
    assert imported.task == TASK  # unchanged, unknown fields and id included
    assert Task.from_dict(imported.task).id == TASK["id"]
    assert all(by_key[i].event.split == "train" for i in builtin_ids())  # built in: by id
    assert by_key["calc/t1"].key == b"calc/t1"  # compaction key


def test_malformed_task_file_is_a_clean_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "x", "instruction": "no evaluator"}))
    res = subprocess.run([*SCALECUA, "tasks", "import", str(bad)],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 1
    assert "evaluator" in res.stderr and "Traceback" not in res.stderr


async def test_tasks_with_unimplemented_parts_are_flagged_and_skipped(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    unknown = {
        **TASK,
        "id": "needs-unknown",
        "config": [{"type": "fold_laundry", "parameters": {"baskets": ["x"]}}],
        "evaluator": {
            "func": ["is_laundry_folded", "exact_match"],
            "result": [{"type": "laundry_state"}, TASK["evaluator"]["result"]],
            "expected": [{"type": "rule", "rules": {}}, TASK["evaluator"]["expected"]],
        },
    }
    (tmp_path / "ok.json").write_text(json.dumps(TASK))
    (tmp_path / "unknown.json").write_text(json.dumps(unknown))
    res = subprocess.run([*SCALECUA, "tasks", "import", str(tmp_path)],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert (
        f"unsupported: {tmp_path.name}/unknown: config step `fold_laundry`, metric "
        "`is_laundry_folded`, getter `laundry_state`" in res.stderr
    )
    assert "imported 1 tasks" in res.stderr and "1 unsupported skipped" in res.stderr
    assert [r.event.task["id"] for r in await _read_tasks(bus_settings, 2)] == [TASK["id"]]
    res = subprocess.run([*SCALECUA, "tasks", "import", str(tmp_path), "--include-unsupported"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0 and "imported 2 tasks" in res.stderr, res.stderr


# -- ids: two OSWorld tasks that share an id stay two tasks ------------------------------------

OSWORLD = Path(__file__).resolve().parents[1] / "data" / "osworld"
SHARED = "06fe7178-4491-4589-810f-2e2bc9502122"  # a chrome task and a thunderbird task


async def test_tasks_sharing_an_id_keep_their_own_keys_and_are_found_by_key_or_unique_id(
    tmp_path: Path, bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    from consumers.rollout.service import resolve_task
    from producers.task_import import publish_tasks
    from runtime.tables import TopicTable
    from topics.events import TaskEvent

    chrome, thunderbird = (
        OSWORLD / "chrome" / f"{SHARED}.json",
        OSWORLD / "thunderbird" / f"{SHARED}.json",
    )
    # As OSWorld's test_all.json lists them: {"<domain>": ["<id>", ...]}.
    index = tmp_path / "test_shared.json"
    index.write_text(json.dumps({"chrome": [SHARED], "thunderbird": [SHARED]}))
    res = subprocess.run([*SCALECUA, "tasks", "import", str(OSWORLD), "--index", str(index),
                          "--source", "osworld", "--split", "benchmark", "--include-unsupported"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0 and "imported 2 tasks" in res.stderr, res.stderr
    # The same files named one by one get the same keys.
    again = subprocess.run([*SCALECUA, "tasks", "import", str(chrome), str(thunderbird),
                            "--source", "osworld", "--split", "benchmark",
                            "--include-unsupported"],
                           env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 0, again.stderr
    records = await _read_tasks(bus_settings, 4)
    by_key = {r.key: r.event for r in records}
    assert len(records) == 4
    assert set(by_key) == {f"chrome/{SHARED}".encode(), f"thunderbird/{SHARED}".encode()}
    assert by_key[f"chrome/{SHARED}".encode()].task == json.loads(chrome.read_text())
    assert by_key[f"thunderbird/{SHARED}".encode()].task == json.loads(thunderbird.read_text())
    # A task whose id no other task has is still found by that id.
    unique = {**TASK, "id": "only-one-of-me"}
    await publish_tasks(bus_settings, [TaskEvent(task_id="mine/only-one-of-me", task=unique)])

    def request(ref: str) -> subprocess.CompletedProcess:
        return subprocess.run([*SCALECUA, "request", ref, "--n", "1"], env=cli_env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    ambiguous = request(SHARED)
    assert ambiguous.returncode == 2, ambiguous.stderr
    assert f"2 tasks on `tasks` have the id {SHARED}" in ambiguous.stderr
    assert f"chrome/{SHARED}, thunderbird/{SHARED}" in ambiguous.stderr
    by_key_ok = request(f"thunderbird/{SHARED}")
    assert by_key_ok.returncode == 0, by_key_ok.stderr
    assert json.loads(by_key_ok.stdout)["task_id"] == f"thunderbird/{SHARED}"
    by_id_ok = request("only-one-of-me")
    assert json.loads(by_id_ok.stdout)["task_id"] == "mine/only-one-of-me"

    table = await TopicTable(bus_settings, "tasks").start()
    try:
        task, _ = resolve_task(f"chrome/{SHARED}", table)
        assert task.id == SHARED and "last tab I shut down" in task.instruction
        task, _ = resolve_task(f"thunderbird/{SHARED}", table)
        assert task.id == SHARED and "email" in task.instruction
        assert resolve_task(SHARED, table) is None  # which one? the worker does not guess
        assert resolve_task("only-one-of-me", table)[0].instruction == TASK["instruction"]
    finally:
        await table.stop()


def test_two_files_with_one_key_and_different_tasks_are_refused(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    for root, instruction in (("a", "first"), ("b", "second")):
        (tmp_path / root / "calc").mkdir(parents=True)
        task = {**TASK, "instruction": instruction}
        (tmp_path / root / "calc" / "t.json").write_text(json.dumps(task))
    res = subprocess.run([*SCALECUA, "tasks", "import", str(tmp_path / "a"), str(tmp_path / "b")],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 1 and "different tasks with the same key 'calc/t'" in res.stderr
