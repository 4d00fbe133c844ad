"""`scalecua verigen augment`: trajectory-guided synthesis, planned from the rollout log."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from cli.verigen.options import switches
from cli.verigen.synthesis import synthesize

__all__ = ["augment_main"]


async def augment_main(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    """Plan the seeds and, unless `--dry-run`, synthesise them; fill `summary` per kind."""
    from producers.verigen.summary import summarize
    from runtime.config import BusSettings

    settings = None
    if args.from_log or not args.dry_run:  # the log to read, or where requests and tasks go
        settings = BusSettings.from_env(args.bootstrap)
    planning = asyncio.create_task(_augment_plan(args, settings, summary))
    if args.dry_run:
        await planning
        return 0
    events, wall, missing = await synthesize(args, settings, planning)
    summary["model"] = args.model
    requests = planning.result()
    for kind in ("decompose", "compose"):
        ids = {r.request_id for r in requests if r.mode == kind}
        if ids:
            summary[kind] = summarize([e for e in events if e.request_id in ids], wall)
    summary["all"] = summarize(events, wall)
    return 0 if not missing else 1


async def _augment_plan(
    args: argparse.Namespace, settings: Any, summary: dict[str, Any]
) -> list[Any]:
    """Read the log, plan the seeds (embedding solved tasks' instructions), make requests."""
    from producers.verigen.augment import (
        AugmentSettings,
        Plan,
        plan_compose,
        plan_decompose,
        plan_requests,
        solved_by_app,
    )
    from producers.verigen.deviation import fold_rollouts
    from producers.verigen.sources import read_log, training_tasks
    from runtime.runs import new_run_id

    runs = [args.run] if args.run else None
    log = await read_log(None if args.archive else settings, archive=args.archive, runs=runs)
    outcomes = fold_rollouts(log.steps, log.completes, log.rewards)
    tasks = training_tasks(log.tasks)
    grow = AugmentSettings(
        failed_max_pass_rate=args.failed_below, solved_min_pass_rate=args.solved_from,
        min_rollouts=args.min_rollouts, subtasks=args.subtasks, compose_size=args.compose_size,
        cluster_threshold=args.cluster_threshold, coordinate_tolerance=args.tolerance,
        max_decompose=args.max_decompose, max_compose=args.max_compose,
    )  # fmt: skip
    plan = Plan()
    plan_decompose(outcomes, tasks, grow, plan)
    solved = solved_by_app(outcomes, tasks, grow, plan)
    if solved:
        from producers.verigen.embedding import default_embedder

        embedder = default_embedder()
        for app, ids in sorted(solved.items()):
            texts = [tasks[i]["instruction"] for i in ids]
            vectors = await asyncio.to_thread(embedder.encode, texts)
            plan_compose(app, ids, vectors, tasks, grow, plan)
    run_id = new_run_id()
    summary.update(run_id=run_id, read=log.counts(), tasks_with_rollouts=len(outcomes),
                   plan=plan.to_dict())  # fmt: skip
    print(f"verigen augment {run_id}: {len(outcomes)} tasks with rollouts; "
          f"{plan.failed_tasks} failed -> {len(plan.decompose)} decompose seeds, "
          f"{plan.solved_tasks} solved -> {len(plan.compose)} compose seeds",
          file=sys.stderr)  # fmt: skip
    return plan_requests(plan, run_id, **switches(args))
