"""Real OSWorld tasks in tests: their JSON as OSWorld ships it (tests/data/osworld), and the
files they fetch by URL seeded into the file cache first, as `scalecua tasks files add URL
FILE` seeds them on a machine that cannot download them.

    task = seeded_task("libreoffice_calc/1334ca3e-...", {"Sheet.xlsx": data})
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.envs.tasks.files import open_file_cache
from runtime.envs.tasks.model import Task, load_task

__all__ = ["DATA", "fetched_files", "osworld_json", "seeded_task"]

DATA = Path(__file__).resolve().parent / "data" / "osworld"


def osworld_json(name: str) -> dict[str, Any]:
    """The task `<domain>/<id>` as OSWorld ships it."""
    return json.loads((DATA / f"{name}.json").read_text())


def fetched_files(task: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(URL, name it lands as) for every file a task fetches: its download steps (the path's
    file name) and its cloud_file getters (their `dest`), each URL once, in order."""
    evaluator = task.get("evaluator", {})
    steps = [*task.get("config", []), *evaluator.get("postconfig", [])]
    found = [
        (f["url"], Path(f["path"]).name)
        for step in steps if step.get("type") == "download"
        for f in step["parameters"]["files"]
    ]  # fmt: skip
    for key in ("result", "expected"):
        specs = evaluator.get(key) or []
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, dict) and spec.get("type") == "cloud_file":
                paths, dests = spec["path"], spec.get("dest")
                if isinstance(paths, list):
                    found += list(zip(paths, dests, strict=True))
                else:
                    found.append((paths, dests or Path(paths).name))
    return list({url: (url, name) for url, name in found}.values())


def seeded_task(name: str, files: Mapping[str, bytes | Path]) -> Task:
    """OSWorld's task `<domain>/<id>`, unchanged, with each file it fetches seeded first.

    `files` names each file by its URL or by the name it lands as; every file the task
    fetches must be given (others in it are ignored: one set of files may serve many tasks).
    """
    task = load_task(DATA / f"{name}.json")
    cache = open_file_cache()
    for url, landed in fetched_files(osworld_json(name)):
        key = url if url in files else landed
        assert key in files, f"{name} fetches {url} (as {landed}): the test must make it"
        data = files[key]
        cache.put(url, data.read_bytes() if isinstance(data, Path) else data)
    return task
