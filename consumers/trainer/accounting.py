"""What the trainer keeps account of: the counters its group plans move, the step in flight,
the metrics a step reports and the metadata its checkpoint carries.

Pure bookkeeping, no I/O; consumers/trainer/service.py runs the steps.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import astuple, dataclass, field, fields
from typing import Any

from aiokafka import TopicPartition

from consumers.trainer.backends import MicroBatch
from consumers.trainer.batching import GroupPlan, GroupState, summarize
from consumers.trainer.grpo import finish_stats
from consumers.trainer.shared_prefix import batch_cost

__all__ = ["PlanCounts", "StepJob", "step_metrics", "checkpoint_metadata", "restart_point",
           "rounded"]  # fmt: skip


@dataclass
class PlanCounts:
    """What planned groups came to: the counters one group's plan moves, as one record.

    Added when a group is planned, taken away as a whole when its step gives it back to be
    planned again, so the counters never drift apart.
    """

    groups_trained: int = 0
    groups_without_samples: int = 0  # nothing to train: all failed, stale, below threshold
    groups_all_equal: int = 0
    rollouts_env_failed: int = 0
    rollouts_unsampled: int = 0  # grpo: scripted rollouts (no logprobs) leave their group
    rollouts_stale_dropped: int = 0
    rollouts_stale_downweighted: int = 0
    rollouts_below_threshold: int = 0  # sft: their reward did not pass

    @classmethod
    def of(cls, plan: GroupPlan, trained: bool) -> PlanCounts:
        """Return what one group's plan counts, trained in a step or without samples."""
        return cls(
            groups_trained=int(trained),
            groups_without_samples=int(not trained),
            groups_all_equal=int(plan.all_equal),
            rollouts_env_failed=plan.env_failures,
            rollouts_unsampled=plan.unsampled,
            rollouts_stale_dropped=plan.stale_dropped,
            rollouts_stale_downweighted=plan.stale_downweighted,
            rollouts_below_threshold=plan.below_threshold,
        )

    def __add__(self, other: PlanCounts) -> PlanCounts:
        return PlanCounts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: PlanCounts) -> PlanCounts:
        return PlanCounts(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def as_dict(self) -> dict[str, int]:
        """Return the counters by name, as the trainer's stats show them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(eq=False)
class StepJob:
    """One optimisation step in flight."""

    version: int  # the version this step produces
    groups: list[GroupState]
    plans: list[GroupPlan]
    batches: list[MicroBatch]
    tokens: int
    restart: dict[str, dict]
    counts: PlanCounts = field(default_factory=PlanCounts)  # what its groups' plans counted
    started: float = field(default_factory=time.monotonic)
    metrics: dict[str, float] = field(default_factory=dict)
    trained: bool = False
    uri: str | None = None
    error: BaseException | None = None
    task: asyncio.Task | None = None


def step_metrics(job: StepJob, result: dict[str, Any]) -> dict[str, float]:
    """Return what a step reports: its loss statistics (`result` of the backend's step) and
    what its groups, plans and micro-batches came to."""
    metrics = finish_stats(result["parts"])
    advantages = [a for p in job.plans for a in p.advantages]
    lags = [float(lag) for p in job.plans for lag in p.lags]
    scores = [s for p in job.plans for s in p.scores]
    metrics.update(
        step=float(job.version),
        policy_version=float(job.version),
        grad_norm=result["grad_norm"],
        groups=float(len(job.groups)),
        rollouts=float(sum(p.rollouts for p in job.plans)),
        segments=float(sum(len(b.samples) for b in job.batches)),
        micro_batches=float(result["micro_batches"]),
        groups_all_equal=float(sum(p.all_equal for p in job.plans)),
        env_failures=float(sum(p.env_failures for p in job.plans)),
        stale_dropped=float(sum(p.stale_dropped for p in job.plans)),
        stale_downweighted=float(sum(p.stale_downweighted for p in job.plans)),
        forward_backward_s=result["forward_backward_s"],
        optimizer_s=result["optimizer_s"],
        # Tokens in the step's segments, and what the passes computed (padding in,
        # shared prefixes once): their ratio is what prefix sharing saves.
        sequence_tokens=float(sum(len(s.ids) for b in job.batches for s in b.samples)),
        computed_tokens=float(sum(batch_cost(b) for b in job.batches)),
        **summarize(advantages, "adv"),
        **summarize(lags, "lag"),
        **summarize(scores, "reward"),
    )
    if scores:  # a pass is a full score, as the judge and evaluation count it
        metrics["pass_rate"] = sum(s >= 1.0 for s in scores) / len(scores)
    return metrics


def checkpoint_metadata(
    job: StepJob,
    *,
    base_policy: str,
    objective: str,
    judge_version: str,
    run_id: str | None,
    backend: str,
    config: dict[str, Any],
) -> dict[str, Any]:
    """Return the metadata a step's checkpoint carries: what it trained and where a restart
    resumes (restart_point reads that back)."""
    restart = job.restart
    return {
        "format": 1,
        "policy_version": job.version,
        "step": job.version,
        "base_policy": base_policy,
        "objective": objective,
        "judge_version": judge_version,
        "run_id": run_id,
        "backend": backend,
        "groups": sorted(g.group_id for g in job.groups),
        "trajectories": sorted(
            t.trajectory_id
            for g in job.groups
            for t in g.members()
            if any(s.trajectory_id == t.trajectory_id for p in job.plans for s in p.samples)
        ),  # fmt: skip
        "restart": {
            "floors": {_tp_key(tp): o for tp, o in restart["floors"].items()},
            "finished": {
                g: {_tp_key(tp): o for tp, o in last.items()}
                for g, last in restart["finished"].items()
            },
        },
        "metrics": job.metrics,
        "config": config,
        "created_ms": int(time.time() * 1000),
    }


def restart_point(
    restart: dict[str, Any], same_run: bool
) -> tuple[dict[TopicPartition, int], dict[str, dict[TopicPartition, int]]]:
    """Return a checkpoint's restart point: the floors (offsets of this log run only, so
    none from another run) and the finished groups' newest offsets."""
    floors = {_tp(k): v for k, v in restart.get("floors", {}).items()} if same_run else {}
    finished = {
        g: {_tp(k): o for k, o in last.items()} for g, last in restart.get("finished", {}).items()
    }
    return floors, finished


def rounded(metrics: dict[str, float]) -> dict[str, float | str]:
    """Floats to 6 decimals; NaN and infinities as text (JSON has no such numbers)."""
    return {
        k: (v if not isinstance(v, float) else round(v, 6) if math.isfinite(v) else str(v))
        for k, v in metrics.items()
    }


def _tp_key(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"


def _tp(key: str) -> TopicPartition:
    topic_name, partition = key.rsplit("/", 1)
    return TopicPartition(topic_name, int(partition))
