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

SCALECUA = [sys.executable, "-m", "runtime.cli"]

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
    by_id = {r.event.task_id: r for r in records}
    imported = by_id["osworld-like-0001"].event
    assert (imported.split, imported.source) == ("benchmark", "osworld")
    assert imported.task == TASK  # unchanged, unknown fields included
    assert Task.from_dict(imported.task).id == TASK["id"]
    assert all(by_id[i].event.split == "train" for i in builtin_ids())
    assert by_id["osworld-like-0001"].key == b"osworld-like-0001"  # compaction key


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
        "unsupported: needs-unknown: config step `fold_laundry`, metric `is_laundry_folded`, "
        "getter `laundry_state`" in res.stderr
    )
    assert "imported 1 tasks" in res.stderr and "1 unsupported skipped" in res.stderr
    assert [r.event.task_id for r in await _read_tasks(bus_settings, 2)] == [TASK["id"]]
    res = subprocess.run([*SCALECUA, "tasks", "import", str(tmp_path), "--include-unsupported"],
                         env=cli_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0 and "imported 2 tasks" in res.stderr, res.stderr
