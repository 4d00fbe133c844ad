"""Evaluation in two halves: collect on the live desktop, score later from what was collected.

An episode's desktop is reset for the next episode as soon as this one ends, and the judge
runs elsewhere (and again, much later, when history is rejudged). So when an episode ends
the rollout worker runs the task's `postconfig` steps and every getter while the desktop is
alive, and stores what they returned in one manifest: files in the blob store, every other
value as JSON. `score_collected` runs the metrics from the manifest alone, with whatever
metric code is current, and follows OSWorld's rules (see evaluate.py).

The manifest (JSON):

    {"version": 1, "task_id": "...", "evaluator": {OSWorld's evaluator object},
     "decided": {"score": 1.0, "reason": "fail_on_infeasible"} or null,
     "funcs": [{"func": "compare_table", "result": V, "expected": V, "has_expected": true,
                "error": null}, ...]}

where V is the getter's value with every file it fetched replaced by
`{"$blob": "sha256:...", "name": "out.xlsx"}`. `error` holds what a getter raised on the
agent's output (the func then scores 0, as in OSWorld).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any, Protocol

import orjson

from runtime.envs.tasks.evaluate import (
    Evaluation,
    FuncScore,
    breaks_evaluation,
    decided_by_actions,
    run_metric,
    score_funcs,
)
from runtime.envs.tasks.getters import EvalContext, FetchedFile, get_state
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import Evaluator, Task
from runtime.envs.tasks.setup import run_steps
from runtime.errors import TaskError

__all__ = ["ArtifactStore", "MANIFEST_VERSION", "collect", "score_collected"]

MANIFEST_VERSION = 1


class ArtifactStore(Protocol):
    """Where collected files go: a content-addressed store (runtime.blobstore.BlobStore)."""

    async def aput(self, data: bytes) -> str:
        """Store bytes and return their reference."""
        ...

    async def aget(self, ref: str) -> bytes:
        """Return the bytes behind a reference."""
        ...


async def collect(
    controller: Any, task: Task, actions: list[dict[str, Any]], store: ArtifactStore
) -> dict[str, Any]:
    """Run postconfig and every getter on the live desktop; return the manifest.

    Raises TaskError for a malformed task and DesktopError for a broken desktop; a getter
    that fails on what the agent left behind is recorded in its func's `error`.
    """
    actions = list(actions)
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "task_id": task.id,
        "evaluator": task.evaluator.to_dict(),
        "decided": None,
        "funcs": [],
    }
    decided = decided_by_actions(task, actions)
    if decided is not None:
        manifest["decided"] = {"score": decided.score, "reason": decided.reason}
        return manifest
    ev = task.evaluator
    with tempfile.TemporaryDirectory(prefix="scalecua-collect-") as tmp:
        outputs = Path(tmp) / "postconfig"  # the steps' stdout/stderr files
        await run_steps(controller, ev.postconfig, task.base_dir, outputs)
        for i, name in enumerate(ev.funcs):
            cache = Path(tmp) / str(i)  # one folder per func: dest names may repeat
            cache.mkdir()
            ctx = EvalContext(controller, cache, task.base_dir, actions, outputs)
            entry: dict[str, Any] = {
                "func": name,
                "has_expected": ev.expecteds[i] is not None,
                "error": None,
            }
            try:
                result = await get_state(ctx, ev.results[i])
                expected = await get_state(ctx, ev.expecteds[i])
            except Exception as exc:  # a getter choking on the agent's output scores 0
                if breaks_evaluation(exc):
                    raise
                entry["error"] = f"{type(exc).__name__}: {exc}"
                result = expected = None
            roots = [cache, outputs] + ([task.base_dir] if task.base_dir else [])
            entry["result"] = await _store_files(result, roots, store)
            entry["expected"] = await _store_files(expected, roots, store)
            manifest["funcs"].append(entry)
    return manifest


async def _store_files(value: Any, roots: list[Path], store: ArtifactStore) -> Any:
    """Replace paths of fetched files (under `roots`) by blob references, recursively."""
    if isinstance(value, FetchedFile) and _is_file_under(value, roots):
        data = await asyncio.to_thread(Path(value).read_bytes)
        return {"$blob": await store.aput(data), "name": Path(value).name}
    if isinstance(value, list | tuple):
        return [await _store_files(v, roots, store) for v in value]
    if isinstance(value, dict):
        return {k: await _store_files(v, roots, store) for k, v in value.items()}
    return orjson.loads(orjson.dumps(value, default=str))  # JSON only, like the wire


def _is_file_under(value: str, roots: list[Path]) -> bool:
    try:
        path = Path(value).resolve()
    except (OSError, ValueError):
        return False
    return path.is_file() and any(path.is_relative_to(r.resolve()) for r in roots)


async def score_collected(manifest: dict[str, Any], store: ArtifactStore) -> Evaluation:
    """Score a manifest with the current metrics, by OSWorld's rules."""
    if manifest.get("version") != MANIFEST_VERSION:
        raise TaskError(f"unknown evaluation manifest version {manifest.get('version')!r}")
    decided = manifest.get("decided")
    if decided:
        funcs = []
        if decided["reason"] in ("fail_on_infeasible", "no_fail_on_infeasible"):
            funcs = [FuncScore("infeasible", float(decided["score"]))]
        return Evaluation(float(decided["score"]), decided["reason"], funcs)
    ev = Evaluator.from_dict(manifest["evaluator"], f"manifest of {manifest.get('task_id')}")
    entries = manifest["funcs"]
    with tempfile.TemporaryDirectory(prefix="scalecua-score-") as tmp:

        async def one(i: int) -> FuncScore:
            folder = Path(tmp) / str(i)
            folder.mkdir()
            return await _score_entry(entries[i], ev.options[i], folder, store)

        return await score_funcs(len(entries), ev.conj, one)


async def _score_entry(
    entry: dict[str, Any], options: dict[str, Any], folder: Path, store: ArtifactStore
) -> FuncScore:
    name = entry["func"]
    if name not in METRICS:
        raise TaskError(f"unknown metric {name!r}")
    if entry.get("error"):
        return FuncScore(name, 0.0, entry["error"])
    result = await _load_files(entry["result"], folder / "result", store)
    expected = await _load_files(entry["expected"], folder / "expected", store)
    return await run_metric(name, result, expected, bool(entry.get("has_expected")), options)


async def _load_files(value: Any, folder: Path, store: ArtifactStore) -> Any:
    """Turn blob references back into paths of local copies (same file names)."""
    if isinstance(value, dict) and set(value) == {"$blob", "name"}:
        data = await store.aget(value["$blob"])
        # A folder per file: two files of one value may share a name.
        target = folder / uuid.uuid4().hex[:8] / Path(value["name"]).name
        await asyncio.to_thread(_write, target, data)
        return FetchedFile(target)
    if isinstance(value, list):
        return [await _load_files(v, folder, store) for v in value]
    if isinstance(value, dict):
        return {k: await _load_files(v, folder, store) for k, v in value.items()}
    return value


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
