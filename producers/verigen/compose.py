"""Composing solved tasks into harder ones (pure, no I/O): clusters and conjunctions.

**Clusters.** Solved tasks of one app are clustered by the cosine similarity of their
instruction embeddings, average linkage: the two closest clusters merge while their mean
similarity is at least the threshold. Within a cluster, groups of compatible tasks are
formed greedily, most similar pair first.

**Composition.** A group's task runs every parent's setup in order (a step they share runs
once) and is judged by the **conjunction** of every parent's verifier: every func of every
parent under `conj: "and"` (OSWorld's: 0 as soon as one sub-judge gives 0, 1.0 only when
every sub-judge gives 1.0), local `dest` names made unique; its solution is the parents'
solutions played one after another. Tasks that cannot be joined so (an `or` verifier, an
infeasible task, one judged on the agent's answer, files read from outside the desktop,
two judged on the same file) are refused with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from producers.verigen.candidate import APPS, DIFFICULTIES, MAX_STEPS
from runtime.errors import TaskError

__all__ = [
    "CompositionError",
    "cluster",
    "compose_candidate",
    "compose_conflicts",
    "compose_groups",
    "conjoin_evaluators",
    "cosine_matrix",
    "host_reads",
    "inline_uploads",
    "task_app",
]

_APP_OF = {"libreoffice_calc": "calc", "libreoffice_writer": "writer"}


# -- clustering ---------------------------------------------------------------------------
def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of row vectors."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = v / np.where(norms == 0, 1.0, norms)
    return unit @ unit.T


def cluster(similarity: np.ndarray, threshold: float) -> list[list[int]]:
    """Average-linkage clusters: merge the closest pair while its mean similarity >= threshold."""
    n = len(similarity)
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    sums = np.array(similarity, dtype=np.float64, copy=True)  # cluster-to-cluster sums
    active = np.ones(n, dtype=bool)
    while active.sum() > 1:
        sizes = np.array([len(members.get(i, [])) for i in range(n)], dtype=np.float64)
        mean = sums / np.maximum(np.outer(sizes, sizes), 1.0)
        mask = np.outer(active, active)
        np.fill_diagonal(mask, False)
        mean = np.where(mask, mean, -np.inf)
        a, b = np.unravel_index(int(np.argmax(mean)), mean.shape)
        if mean[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        sums[a, :] += sums[b, :]
        sums[:, a] += sums[:, b]
        members[a] += members.pop(b)
        active[b] = False
    return sorted((sorted(m) for m in members.values()), key=lambda m: (-len(m), m[0]))


def compose_groups(
    similarity: np.ndarray,
    clusters: list[list[int]],
    size: int,
    compatible: Callable[[list[int]], bool],
) -> list[list[int]]:
    """Disjoint groups of `size` compatible members per cluster, most similar first."""
    groups: list[list[int]] = []
    for members in clusters:
        free = set(members)
        pairs = sorted(
            ((similarity[a, b], a, b) for i, a in enumerate(members) for b in members[i + 1 :]),
            key=lambda p: (-p[0], p[1], p[2]),
        )
        for _, a, b in pairs:
            if a not in free or b not in free or not compatible([a, b]):
                continue
            group = [a, b]
            while len(group) < size:
                rest = sorted(
                    (m for m in free - set(group) if compatible([*group, m])),
                    key=lambda m: (-float(np.mean([similarity[m, g] for g in group])), m),
                )
                if not rest:
                    break
                group.append(rest[0])
            if len(group) == size:
                groups.append(group)
                free -= set(group)
    return groups


# -- composition --------------------------------------------------------------------------
class CompositionError(TaskError, ValueError):
    """Tasks that cannot be joined into one conjunctive task; the message says why."""


def task_app(task: Mapping[str, Any]) -> str | None:
    """The VeriGen app a task belongs to (its `app`, else its first related app), or None."""
    if task.get("app") in APPS:
        return str(task["app"])
    for related in task.get("related_apps") or []:
        app = _APP_OF.get(related, related)
        if app in APPS:
            return app
    return None


def _funcs(evaluator: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An evaluator as one record per func: func, result, expected, options."""
    func = evaluator.get("func")
    names = list(func) if isinstance(func, list) else [func]
    n = len(names)
    per = {
        key: (evaluator.get(key) if isinstance(func, list) else [evaluator.get(key)])
        for key in ("result", "expected", "options")
    }
    out = []
    for i, name in enumerate(names):
        record = {"func": name}
        for key, values in per.items():
            value = values[i] if isinstance(values, list) and len(values) == n else None
            if value is not None:
                record[key] = value
        out.append(record)
    return out


def _getters(spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return []
    return [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]


def host_reads(task: Mapping[str, Any]) -> list[str]:
    """What a task reads from outside the desktop (task-folder files, URLs); [] if none."""
    found = []
    steps = list(task.get("config") or []) + list(
        (task.get("evaluator") or {}).get("postconfig") or []
    )
    for step in steps:
        if step.get("type") in ("download", "upload_file"):
            found.append(f"setup step `{step['type']}`")
    for record in _funcs(task.get("evaluator") or {}):
        for spec in _getters(record.get("result")) + _getters(record.get("expected")):
            if spec.get("type") in ("cloud_file", "cache_file"):
                found.append(f"getter `{spec['type']}` {spec.get('path')}")
    return found


def _written_paths(task: Mapping[str, Any]) -> set[str]:
    """Files and folders a task's verifier reads from the desktop (its outputs)."""
    paths = set()
    for record in _funcs(task.get("evaluator") or {}):
        for spec in _getters(record.get("result")):
            for key in ("path",):
                value = spec.get(key)
                for p in value if isinstance(value, list) else [value]:
                    if isinstance(p, str):
                        paths.add(p.rstrip("/"))
    return paths


def compose_conflicts(parents: list[Mapping[str, Any]]) -> list[str]:
    """Why these tasks cannot be composed into one conjunctive task ([] when they can)."""
    problems = []
    apps = {task_app(p) for p in parents}
    if len(apps) != 1 or None in apps:
        problems.append(f"tasks of different or unknown apps: {sorted(map(str, apps))}")
    seen: dict[str, str] = {}
    for p in parents:
        tid = str(p.get("id"))
        evaluator = p.get("evaluator") or {}
        records = _funcs(evaluator)
        if any(r["func"] == "infeasible" for r in records):
            problems.append(f"{tid} is an infeasible task")
        if len(records) > 1 and evaluator.get("conj", "and") == "or":
            problems.append(f"{tid}'s verifier is an `or`: a conjunction would demand more")
        if any(
            s.get("type") == "agent_answer"
            for r in records
            for s in _getters(r.get("result")) + _getters(r.get("expected"))
        ):
            problems.append(f"{tid} is judged on the agent's answer, which an episode gives once")
        if not isinstance(p.get("solution"), list) or not p["solution"]:
            problems.append(f"{tid} has no solution to play")
        elif any(a.get("action") == "answer" for a in p["solution"]):
            problems.append(f"{tid}'s solution answers, which ends an episode")
        for read in host_reads(p):
            problems.append(f"{tid} reads from outside the desktop ({read})")
        for path in _written_paths(p):
            other = seen.get(path)
            if other is not None and other != tid:
                problems.append(f"{tid} and {other} are both judged on {path}")
            seen[path] = tid
    return problems


def _without_dest(spec: Any, prefix: str) -> Any:
    """A getter spec (or list) with its local `dest` file name made unique by `prefix`."""
    if isinstance(spec, list):
        return [_without_dest(s, prefix) for s in spec]
    if isinstance(spec, dict) and isinstance(spec.get("dest"), str):
        return {**spec, "dest": f"{prefix}{spec['dest']}"}
    return spec


def conjoin_evaluators(evaluators: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One OSWorld evaluator that passes only when every given evaluator passes (`conj: and`)."""
    funcs, results, expecteds, options, postconfig = [], [], [], [], []
    for i, evaluator in enumerate(evaluators):
        records = _funcs(evaluator)
        if len(records) > 1 and evaluator.get("conj", "and") == "or":
            raise CompositionError(f"evaluator {i} is an `or`: its conjunction would demand more")
        if any(r["func"] == "infeasible" for r in records):
            raise CompositionError(f"evaluator {i} is `infeasible`: it has no state to check")
        for r in records:
            funcs.append(r["func"])
            results.append(_without_dest(r.get("result"), f"p{i}-"))
            expecteds.append(_without_dest(r.get("expected"), f"p{i}-"))
            options.append(r.get("options") or {})
        postconfig += list(evaluator.get("postconfig") or [])
    if not funcs:
        raise CompositionError("nothing to conjoin")
    out: dict[str, Any] = {"func": funcs, "conj": "and", "result": results}
    if any(e is not None for e in expecteds):
        out["expected"] = expecteds
    if any(options):
        out["options"] = options
    if postconfig:
        out["postconfig"] = postconfig
    return out


def _solution(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A parent's solution without its closing done/fail (the composed one goes on)."""
    out = list(actions)
    while out and out[-1].get("action") in ("done", "fail"):
        out.pop()
    return out


def compose_candidate(
    parents: list[Mapping[str, Any]],
    *,
    instruction: str,
    explanation: str,
    difficulty: str,
    estimated_steps: int,
) -> dict[str, Any]:
    """The candidate of a composed task: every setup, the conjunction, the solutions in turn."""
    problems = compose_conflicts(parents)
    if problems:
        raise CompositionError("; ".join(problems))
    if difficulty not in DIFFICULTIES or not 1 <= estimated_steps <= MAX_STEPS:
        raise CompositionError("difficulty or estimated_steps out of range")
    config: list[dict[str, Any]] = []
    for p in parents:
        for step in p.get("config") or []:
            if step.get("type") == "sleep" or step not in config:  # a shared step runs once
                config.append(step)
    related: list[str] = []
    for p in parents:
        related += [a for a in p.get("related_apps") or [] if a not in related]
    ids = "+".join(str(p["id"]) for p in parents)
    return {
        "id": f"compose-{hashlib.sha256(ids.encode()).hexdigest()[:10]}",
        "instruction": instruction,
        "config": config,
        "evaluator": conjoin_evaluators([p["evaluator"] for p in parents]),
        "related_apps": related,
        "app": task_app(parents[0]),
        "explanation": explanation,
        "difficulty": difficulty,
        "estimated_steps": estimated_steps,
        "solution": [a for p in parents for a in _solution(p["solution"])],
    }


def inline_uploads(
    config: list[dict[str, Any]], files: Mapping[str, bytes]
) -> list[dict[str, Any]]:
    """Setup with every `upload_file` whose bytes are given turned into an `execute` writing them.

    A task from a folder becomes self-contained (a generated task has no folder); steps
    whose files are not all given are kept as they are.
    """
    out = []
    for step in config:
        entries = (step.get("parameters") or {}).get("files")
        if step.get("type") != "upload_file" or not isinstance(entries, list):
            out.append(step)
            continue
        if not all(isinstance(f, dict) and f.get("local_path") in files for f in entries):
            out.append(step)
            continue
        for f in entries:
            data = base64.b64encode(files[f["local_path"]]).decode()
            script = (
                "import base64, os; p = " + json.dumps(f["path"]) + "; "
                "os.makedirs(os.path.dirname(p) or '.', exist_ok=True); "
                "open(p, 'wb').write(base64.b64decode(" + json.dumps(data) + "))"
            )
            out.append({"type": "execute", "parameters": {"command": ["python3", "-c", script]}})
    return out
