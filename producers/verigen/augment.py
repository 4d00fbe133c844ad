"""Trajectory-guided synthesis, the plan (pure, no I/O): from rollouts to seeds.

Events, task JSON and embedding vectors in; seeds out, one `SynthesisRequest` each
(`mode: decompose | compose`). Failed tasks (pass rate at or below `failed_max_pass_rate`)
get one decompose seed per intermediate sub-goal nearest their deviation point
(deviation.py); solved ones (at or above `solved_min_pass_rate`) are clustered per app and
grouped into compose seeds (compose.py). Only the tasks given are grown: the caller passes
the `split: train` tasks (a benchmark's rollouts must never seed training tasks).
`sources.py` reads the log and the tasks, `embedding.py` embeds instructions, and the loop
turns each seed into a candidate through the decomposer or the composer (agents.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from producers.verigen.compose import (
    cluster,
    compose_conflicts,
    compose_groups,
    cosine_matrix,
    task_app,
)
from producers.verigen.deviation import DeviationPoint, TaskOutcome, deviation_point, subgoal_ends
from topics.events import SynthesisRequest

__all__ = [
    "AugmentSettings",
    "Plan",
    "compose_seed",
    "decompose_seeds",
    "plan_compose",
    "plan_decompose",
    "plan_requests",
    "solved_by_app",
]


@dataclass(frozen=True)
class AugmentSettings:
    """Which tasks are grown, and how."""

    failed_max_pass_rate: float = 0.25  # a task at or below this pass rate is decomposed
    solved_min_pass_rate: float = 0.75  # a task at or above it may be composed
    min_rollouts: int = 2  # scored rollouts a task needs before it is judged either way
    subtasks: int = 2  # decompose seeds (sub-goals) per failed task
    compose_size: int = 2  # parents per composed task
    cluster_threshold: float = 0.5  # average cosine similarity to merge two clusters
    coordinate_tolerance: float = 30.0  # grid units (of 1000) within which two points match
    max_decompose: int = 50  # failed tasks decomposed per run, lowest pass rate first
    max_compose: int = 50  # composed tasks per run


def decompose_seeds(
    task: dict[str, Any], outcome: TaskOutcome, point: DeviationPoint, subtasks: int
) -> list[dict[str, Any]]:
    """One decompose seed per intermediate sub-goal of a failed task."""
    ends = subgoal_ends(len(point.reference), point.index, subtasks)
    return [
        {
            "kind": "decompose",
            "parents": [outcome.task_id],
            "parent": task,
            "pass_rate": round(outcome.pass_rate, 4),
            "rollouts": len(outcome.rollouts),
            "reference": point.reference,
            "deviation": point.to_dict(),
            "subgoal": {"index": i, "of": len(ends), "through": end},
        }
        for i, end in enumerate(ends)
    ]


def compose_seed(parents: list[dict[str, Any]], similarity: float) -> dict[str, Any]:
    """The compose seed of one group (each parent with its `solution`)."""
    return {
        "kind": "compose",
        "parents": [p["id"] for p in parents],
        "tasks": parents,
        "similarity": round(similarity, 4),
    }


@dataclass
class Plan:
    """What a log yields: seeds per kind, and why other tasks gave none."""

    decompose: list[dict[str, Any]] = field(default_factory=list)
    compose: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> reason
    failed_tasks: int = 0
    solved_tasks: int = 0
    clusters: dict[str, list[list[str]]] = field(default_factory=dict)  # app -> task ids

    def to_dict(self) -> dict[str, Any]:
        """Counts and reasons (the seeds themselves travel in the requests)."""
        return {
            "failed_tasks": self.failed_tasks,
            "solved_tasks": self.solved_tasks,
            "decompose_seeds": len(self.decompose),
            "compose_seeds": len(self.compose),
            "clusters": self.clusters,
            "skipped": dict(sorted(self.skipped.items())),
        }


def plan_decompose(
    outcomes: Mapping[str, TaskOutcome],
    tasks: Mapping[str, dict[str, Any]],
    settings: AugmentSettings,
    plan: Plan,
) -> None:
    """Add decompose seeds for the failed training tasks (`tasks`: id -> JSON with solution)."""
    failed = [
        o
        for o in outcomes.values()
        if o.task_id in tasks
        and len(o.rollouts) >= settings.min_rollouts
        and o.pass_rate <= settings.failed_max_pass_rate
    ]
    plan.failed_tasks = len(failed)
    for outcome in sorted(failed, key=lambda o: (o.pass_rate, o.task_id))[: settings.max_decompose]:
        task = tasks[outcome.task_id]
        if task_app(task) is None:
            plan.skipped[outcome.task_id] = "no VeriGen app writes tasks for it"
            continue
        point = deviation_point(outcome, task.get("solution"), settings.coordinate_tolerance)
        if point is None:
            plan.skipped[outcome.task_id] = (
                "no reference (no solution, no successful rollout) or no failed rollout with "
                "all its steps in the log"
            )
            continue
        seeds = decompose_seeds(task, outcome, point, settings.subtasks)
        if not seeds:
            plan.skipped[outcome.task_id] = "its reference has one action: no intermediate sub-goal"
        plan.decompose += seeds


def solved_by_app(
    outcomes: Mapping[str, TaskOutcome],
    tasks: Mapping[str, dict[str, Any]],
    settings: AugmentSettings,
    plan: Plan,
) -> dict[str, list[str]]:
    """The solved training tasks that could be composed, per app (the ones to embed)."""
    solved = [
        o.task_id
        for o in outcomes.values()
        if o.task_id in tasks
        and len(o.rollouts) >= settings.min_rollouts
        and o.pass_rate >= settings.solved_min_pass_rate
    ]
    plan.solved_tasks = len(solved)
    by_app: dict[str, list[str]] = {}
    for task_id in solved:
        task = tasks[task_id]
        problems = compose_conflicts([task])
        if problems:
            plan.skipped[task_id] = f"not composable: {problems[0]}"
            continue
        by_app.setdefault(str(task_app(task)), []).append(task_id)
    return {app: ids for app, ids in by_app.items() if len(ids) >= 2}


def plan_compose(
    app: str,
    task_ids: list[str],
    vectors: np.ndarray,
    tasks: Mapping[str, dict[str, Any]],
    settings: AugmentSettings,
    plan: Plan,
) -> None:
    """Add compose seeds for one app's solved tasks, given their instruction embeddings."""
    similarity = cosine_matrix(vectors)
    clusters = cluster(similarity, settings.cluster_threshold)
    plan.clusters[app] = [[task_ids[i] for i in c] for c in clusters if len(c) > 1]

    def compatible(group: list[int]) -> bool:
        return not compose_conflicts([tasks[task_ids[i]] for i in group])

    for group in compose_groups(similarity, clusters, settings.compose_size, compatible):
        if len(plan.compose) >= settings.max_compose:
            return
        pairs = [similarity[a, b] for i, a in enumerate(group) for b in group[i + 1 :]]
        parents = [tasks[task_ids[i]] for i in group]
        plan.compose.append(compose_seed(parents, float(np.mean(pairs))))


def plan_requests(plan: Plan, run_id: str, **switches: Any) -> list[SynthesisRequest]:
    """One synthesis request per seed (decompose first), ids `<run>/<kind>-<n>`."""
    requests = []
    for kind, seeds in (("decompose", plan.decompose), ("compose", plan.compose)):
        for i, seed in enumerate(seeds):
            parent = seed["parent"] if kind == "decompose" else seed["tasks"][0]
            requests.append(
                SynthesisRequest(
                    request_id=f"{run_id}/{kind}-{i}",
                    run_id=run_id,
                    app=str(task_app(parent)),
                    mode=kind,
                    seed=seed,
                    **switches,
                )  # fmt: skip
            )
    return requests
