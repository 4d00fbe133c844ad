"""`scalecua verigen ...`: task synthesis with executable judges (VeriGen).

    scalecua verigen validate CANDIDATE.json [--solution ACTIONS.json]
    scalecua verigen run --app APP --n N --llm-url URL --model M   # requests + workers + summary
    scalecua verigen worker --llm-url URL --model M                # a member of the worker group
    scalecua verigen probe --desktops 4                            # the shared interaction probe
    scalecua verigen augment --from-log --llm-url URL --model M    # decompose/compose from rollouts
    scalecua verigen audit --benchmark DIR [--tasks DIR] [--filter] # overlap with a benchmark

Each subcommand is one `add_parser` in `register` and one handler; the option groups
(`_llm_args`, `_probe_args`, `_switch_args`) are shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from cli.settings import PORT, integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua verigen` and its subcommands."""
    verigen = subparsers.add_parser(
        "verigen", help="VeriGen: synthesise desktop tasks whose judges are proven on desktops"
    )
    sub = verigen.add_subparsers(dest="verigen_command", metavar="SUBCOMMAND")

    p = sub.add_parser(
        "validate",
        help="run the rule validator on a candidate (prints one JSON line; exit 0 accepted, "
        "1 rejected)",
    )
    p.add_argument("candidate", type=Path, help="the candidate JSON (an OSWorld task + metadata)")
    p.add_argument("--solution", type=Path, help="a JSON list of actions that solves it")
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "run",
        help="synthesise N candidates for an app and print the run's summary",
        description=(
            "Writes N synthesis-requests, runs --workers syntheses at once in this process "
            "(0: leave them to `scalecua verigen worker`s), follows `synthesis` until every "
            "request is final and prints the run's summary as JSON. Accepted tasks go to "
            "`tasks` (and to --out)."
        ),
    )
    p.add_argument("--app", required=True, choices=("terminal", "mousepad", "calc", "writer"))
    p.add_argument("--n", type=integer(1), default=1, help="candidates to synthesise (default 1)")
    p.add_argument("--hint", action="append", default=None,
                   help="a theme for the proposer (repeat: they cycle over the requests)")  # fmt: skip
    p.add_argument("--workers", type=integer(0), default=4,
                   help="syntheses at once in this process (default 4; 0: none here)")  # fmt: skip
    p.add_argument("--out", type=Path, help="also write each accepted task (and its solution) here")
    p.add_argument(
        "--timeout", type=number(above=0), default=None, help="give up after this many seconds"
    )
    _switch_args(p)
    _llm_args(p)
    _probe_args(p)
    _bootstrap(p)
    p.set_defaults(func=_run)

    p = sub.add_parser("worker", help="a VeriGen worker: synthesise synthesis-requests (scale out)")
    p.add_argument("--workers", type=integer(1), default=16, help="syntheses at once (default 16)")
    p.add_argument("--group", default="verigen", help="consumer group (default verigen)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    _llm_args(p)
    _probe_args(p)
    _bootstrap(p)
    p.set_defaults(func=_worker)

    p = sub.add_parser(
        "augment",
        help="trajectory-guided synthesis: easier sub-tasks of failed tasks, harder compositions "
        "of solved ones, from the rollout log",
        description=(
            "Reads rollouts (rollout-step, trajectory-complete, reward) and tasks from the log or "
            "an archive; for failed train tasks finds where the rollouts leave the reference and "
            "asks the decomposer for easier tasks targeting intermediate sub-goals; clusters solved "
            "train tasks of an app by instruction embedding and asks the composer to join a group "
            "into one task judged by the conjunction of their verifiers. Every candidate goes "
            "through the synthesis loop; accepted ones go to `tasks` with their provenance."
        ),
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--from-log", action="store_true", help="read the live log")
    where.add_argument("--archive", default=None, help="read this archive's Parquet instead")
    p.add_argument("--run", default=None, help="with --archive: only this run (or `latest`)")
    g = p.add_argument_group("what to grow")
    g.add_argument("--failed-below", type=number(0, 1), default=0.25,
                   help="decompose train tasks at or below this pass rate (default 0.25)")  # fmt: skip
    g.add_argument("--solved-from", type=number(0, 1), default=0.75,
                   help="compose train tasks at or above this pass rate (default 0.75)")  # fmt: skip
    g.add_argument(
        "--min-rollouts", type=integer(1), default=2, help="rollouts a task needs (default 2)"
    )
    g.add_argument(
        "--subtasks", type=integer(1), default=2, help="sub-goals per failed task (default 2)"
    )
    g.add_argument(
        "--compose-size", type=integer(2), default=2, help="tasks per composition (default 2)"
    )
    g.add_argument("--cluster-threshold", type=number(-1, 1), default=0.5,
                   help="average cosine similarity that joins two clusters (default 0.5)")  # fmt: skip
    g.add_argument("--tolerance", type=number(0, 1000), default=30.0,
                   help="grid units (of 1000) within which two clicks match (default 30)")  # fmt: skip
    g.add_argument("--max-decompose", type=integer(0), default=50, help="failed tasks at most")
    g.add_argument("--max-compose", type=integer(0), default=50, help="compositions at most")
    g.add_argument("--dry-run", action="store_true",
                   help="print the plan (seeds per kind, skipped tasks) and synthesise nothing")  # fmt: skip
    p.add_argument("--workers", type=integer(0), default=4,
                   help="syntheses at once in this process (default 4; 0: none here)")  # fmt: skip
    p.add_argument("--out", type=Path, help="also write each accepted task (and its solution) here")
    p.add_argument(
        "--timeout", type=number(above=0), default=None, help="give up after this many seconds"
    )
    _switch_args(p)
    _llm_args(p, required=False)
    _probe_args(p)
    _bootstrap(p)
    p.set_defaults(func=_augment)

    p = sub.add_parser(
        "audit",
        help="overlap audit of training tasks against a benchmark pool (report table + JSON)",
        description=(
            "Compares training tasks (the `tasks` topic's train split, or --tasks DIR) with a "
            "folder of OSWorld task JSON: full-JSON duplicates, normalised-instruction "
            "duplicates, objective near-duplicates (composite similarity >= --threshold) and "
            "exact judge reuse. Prints the report table on stderr and the JSON on stdout; "
            "--filter re-publishes flagged tasks under split `benchmark` (never trained on)."
        ),
    )
    p.add_argument("--benchmark", required=True, type=Path, help="a folder of OSWorld task JSON")
    p.add_argument("--tasks", type=Path, default=None,
                   help="audit this folder of task JSON (default: the tasks topic's train split)")  # fmt: skip
    p.add_argument("--threshold", type=number(0, 1), default=0.90,
                   help="composite similarity of an objective near-duplicate (default 0.90)")  # fmt: skip
    p.add_argument("--filter", action="store_true",
                   help="re-publish flagged tasks of the topic under split `benchmark`")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    _bootstrap(p)
    p.set_defaults(func=_audit)

    p = sub.add_parser("probe", help="serve the shared interaction probe over HTTP on 127.0.0.1")
    p.add_argument("--desktops", type=integer(1), default=4, help="desktops to share (default 4)")
    p.add_argument("--port", type=integer(*PORT), default=0, help="port (default: a free one)")
    p.add_argument("--token", default=None, help="bearer token (default: a random one)")
    p.set_defaults(func=_probe)
    verigen.set_defaults(func=_help(verigen))


def _help(parser: argparse.ArgumentParser):
    def show(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show


def _bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", default=None,
                   help="bootstrap servers (default: $SCALECUA_BOOTSTRAP or the embedded broker)")  # fmt: skip


def _switch_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("loop (the paper's ablation switches)")
    g.add_argument(
        "--rounds", type=integer(1), default=3, help="validate/judge/check rounds (default 3)"
    )
    g.add_argument("--no-validator", action="store_true", help="skip the rule validator")
    g.add_argument("--no-judger", action="store_true", help="skip the LLM judger")
    g.add_argument("--no-fixer", action="store_true", help="do not repair rejected candidates")
    g.add_argument("--no-checker", action="store_true", help="skip the checker agent")


def _llm_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("model (any OpenAI-compatible chat endpoint)")
    g.add_argument("--llm-url", required=required, help="base URL ending in /v1")
    g.add_argument("--model", required=required, help="the served model name")
    g.add_argument(
        "--llm-concurrency", type=integer(1), default=16, help="calls in flight (default 16)"
    )
    g.add_argument("--llm-timeout", type=number(above=0), default=120.0, help="seconds per call")
    g.add_argument(
        "--max-tokens", type=integer(1), default=2048, help="tokens per reply (default 2048)"
    )
    g.add_argument("--temperature", type=number(0), default=0.7)
    g.add_argument("--price-input", type=number(0), default=0.0,
                   help="USD per 1M prompt tokens (default 0: a local server)")  # fmt: skip
    g.add_argument(
        "--price-output", type=number(0), default=0.0, help="USD per 1M completion tokens"
    )
    g.add_argument(
        "--judge-min-score", type=number(0, 10), default=6.0, help="judger score to accept"
    )
    g.add_argument("--checker-turns", type=integer(1), default=15, help="checker actions at most")
    g.add_argument(
        "--parse-retries", type=integer(0), default=2, help="re-asks after a malformed reply"
    )
    g.add_argument("--observation-ttl", type=number(0), default=0.0,
                   help="reuse an app's starting-state look this many seconds (default 0: live)")  # fmt: skip


def _probe_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("desktops")
    g.add_argument("--desktops", type=integer(1), default=2, help="an in-process probe's desktops")
    g.add_argument("--probe-url", default=None, help="use this probe server instead")
    g.add_argument("--probe-token", default=None, help="its token (default $SCALECUA_PROBE_TOKEN)")


def _llm_settings(args: argparse.Namespace) -> Any:
    from producers.verigen.llm import LLMSettings

    return LLMSettings.from_env(
        args.llm_url, args.model, max_concurrency=args.llm_concurrency, timeout_s=args.llm_timeout,
        max_tokens=args.max_tokens, temperature=args.temperature,
        price_input_per_m=args.price_input, price_output_per_m=args.price_output,
    )  # fmt: skip


def _worker_config(args: argparse.Namespace, group: str = "verigen") -> Any:
    from producers.verigen.loop import LoopSettings
    from producers.verigen.service import WorkerConfig

    loop = LoopSettings(
        judge_min_score=args.judge_min_score, checker_max_turns=args.checker_turns,
        parse_retries=args.parse_retries, observation_ttl_s=args.observation_ttl,
    )  # fmt: skip
    return WorkerConfig(concurrency=max(1, args.workers), group_id=group, loop=loop)


def _probe_spec(args: argparse.Namespace) -> Any:
    import os

    from producers.verigen.service import ProbeSpec

    token = args.probe_token or os.environ.get("SCALECUA_PROBE_TOKEN", "")
    return ProbeSpec(desktops=args.desktops, url=args.probe_url, token=token)


def _validate(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run

    return _run(_validate_main(args))


async def _validate_main(args: argparse.Namespace) -> int:
    from producers.verigen.probe import Probe, ProbeError
    from producers.verigen.validator import RuleValidator
    from runtime.errors import TaskError

    def verdict(accepted: bool, reasons: list[str], **more: Any) -> int:
        print(json.dumps({"accepted": accepted, "reasons": reasons, **more}), flush=True)
        return 0 if accepted else 1

    try:
        raw = json.loads(args.candidate.read_text(encoding="utf-8"))
        solution = None
        if args.solution is not None:
            solution = json.loads(args.solution.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return verdict(False, [f"cannot read the input: {exc}"])
    validator = RuleValidator(None)
    _, static = validator.check_static(raw, solution)
    try:
        if static.reasons:  # rejected without a desktop
            report = await validator.validate(raw, solution)
        else:
            async with Probe.with_pool(1) as probe:
                report = await RuleValidator(probe).validate(raw, solution)
    except (ProbeError, TaskError) as exc:
        return verdict(False, [f"the candidate could not be run on a desktop: {exc}"])
    more = report.to_dict()
    del more["accepted"]
    return verdict(report.accepted, more.pop("reasons"), **more)


def _switches(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_rounds": max(1, args.rounds),
        "use_validator": not args.no_validator,
        "use_judger": not args.no_judger,
        "use_fixer": not args.no_fixer,
        "use_checker": not args.no_checker,
    }


def _run(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async

    summary: dict[str, Any] = {}
    code = run_async(_run_main(args, summary))
    print(json.dumps(summary))
    return code


async def _run_main(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    from producers.verigen.service import make_requests
    from producers.verigen.summary import summarize
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)
    requests = make_requests(args.app, args.n, hints=args.hint, **_switches(args))
    run_id = requests[0].run_id
    print(f"verigen run {run_id}: {args.n} {args.app} candidates, model {args.model}",
          file=sys.stderr)  # fmt: skip
    events, wall, missing = await _synthesize(args, settings, requests)
    summary.update(run_id=run_id, app=args.app, model=args.model, **summarize(events, wall))
    return 0 if not missing else 1


async def _synthesize(
    args: argparse.Namespace, settings: Any, requests: list[Any] | asyncio.Task
) -> tuple[list[Any], float, int]:
    """Publish requests, host --workers syntheses, follow `synthesis` until every request is
    final: (the run's events, wall seconds, requests left without a final stage). `requests`
    may still be in the making (a task): the workers' desktops start meanwhile."""
    import contextlib

    from producers.verigen.service import follow_run, publish_requests, verigen_worker
    from runtime.errors import ServiceHalted

    llm = _llm_settings(args)
    started = time.monotonic()
    finals = 0
    ids: set[str] = set()

    def progress(event: Any) -> None:
        nonlocal finals
        if event.final and event.request_id in ids:
            finals += 1
            why = f" {event.task_id}" if event.task_id else f": {'; '.join(event.reasons)[:200]}"
            print(f"[{finals}/{len(ids)}] {event.request_id} {event.stage}{why}",
                  file=sys.stderr, flush=True)  # fmt: skip

    async with contextlib.AsyncExitStack() as stack:
        runner = None
        if args.workers > 0:
            runner = await stack.enter_async_context(
                verigen_worker(settings, _worker_config(args), llm, _probe_spec(args))
            )
            serving = asyncio.create_task(runner.run(install_signal_handlers=False))
        if isinstance(requests, asyncio.Task):
            requests = await requests
        if not requests:
            if runner is not None:
                runner.stop()
                await serving
            return [], time.monotonic() - started, 0
        ids.update(r.request_id for r in requests)
        follower = asyncio.create_task(
            follow_run(settings, requests[0].run_id, ids, on_event=progress,
                       timeout_s=args.timeout)
        )  # fmt: skip
        await publish_requests(settings, requests)
        if runner is not None:
            await asyncio.wait({follower, serving}, return_when=asyncio.FIRST_COMPLETED)
            if serving.done():  # the worker stopped (a halted service): report, do not hang
                follower.cancel()
                serving.result()
                raise ServiceHalted("the run's worker stopped before every request was final")
            runner.stop()
            await serving
        events = await follower
    wall = time.monotonic() - started
    if args.out is not None:
        _write_out(args.out, events)
    missing = len(ids - {e.request_id for e in events if e.final})
    if missing:
        print(f"{missing} requests had no final stage in time", file=sys.stderr)
    return events, wall, missing


def _augment(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async

    if not args.dry_run and not (args.llm_url and args.model):
        print("augment needs --llm-url and --model (or --dry-run)", file=sys.stderr)
        return 2
    summary: dict[str, Any] = {}
    code = run_async(_augment_main(args, summary))
    print(json.dumps(summary))
    return code


async def _augment_main(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    from producers.verigen.summary import summarize
    from runtime.config import BusSettings

    settings = None
    if args.from_log or not args.dry_run:  # the log to read, or where requests and tasks go
        settings = BusSettings.from_env(args.bootstrap)
    planning = asyncio.create_task(_augment_plan(args, settings, summary))
    if args.dry_run:
        await planning
        return 0
    events, wall, missing = await _synthesize(args, settings, planning)
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
    return plan_requests(plan, run_id, **_switches(args))


def _audit(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async

    return run_async(_audit_main(args))


async def _audit_main(args: argparse.Namespace) -> int:
    from producers.verigen.audit import AuditSettings, audit
    from producers.verigen.embedding import default_embedder
    from producers.verigen.sources import (
        load_task_folder,
        publish_benchmark_split,
        read_tasks,
    )
    from runtime.config import BusSettings

    benchmark, skipped = load_task_folder(args.benchmark)
    topic: dict[str, Any] = {}
    if args.tasks is None or args.filter:
        settings = BusSettings.from_env(args.bootstrap)
        topic = {k: e for k, e in (await read_tasks(settings)).items() if e.split == "train"}
    if args.tasks is not None:
        pool, _ = load_task_folder(args.tasks)
    else:
        pool = [{**e.task, "id": k} for k, e in sorted(topic.items())]
    print(f"verigen audit: {len(pool)} training tasks against {len(benchmark)} benchmark tasks "
          f"({len(skipped)} files that are no task skipped)", file=sys.stderr)  # fmt: skip
    texts = [str(t.get("instruction", "")) for t in pool + benchmark]
    vectors = await asyncio.to_thread(default_embedder().encode, texts)
    report = audit(pool, benchmark, vectors[: len(pool)], vectors[len(pool) :],
                   AuditSettings(near_threshold=args.threshold))  # fmt: skip
    out = report.to_dict() | {"benchmark_dir": str(args.benchmark), "skipped_files": skipped}
    if args.filter:
        flagged = report.flagged()
        events = [topic[t] for t in flagged if t in topic]
        records = {
            t: {"checks": sorted(report.findings[t]),
                "benchmark": sorted({m["benchmark"] for ms in report.findings[t].values()
                                     for m in ms})}
            for t in flagged
        }  # fmt: skip
        await publish_benchmark_split(settings, events, records)
        out["filtered"] = sorted(e.task_id for e in events)
        out["not_on_topic"] = sorted(set(flagged) - set(topic))
    print(report.table(), file=sys.stderr)
    if args.filter:
        print(f"filtered: {len(out['filtered'])} tasks re-published under split `benchmark`",
              file=sys.stderr)  # fmt: skip
    text = json.dumps(out)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


def _write_out(out: Path, events: list[Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for event in events:
        if event.stage != "accepted" or not event.candidate:
            continue
        task = event.candidate
        (out / f"{task['id']}.json").write_text(json.dumps(task, indent=1, ensure_ascii=False))
        if task.get("solution"):
            (out / f"{task['id']}.solution.json").write_text(json.dumps(task["solution"], indent=1))


def _worker(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from producers.verigen.service import verigen_worker
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)

    async def main() -> int:
        async with verigen_worker(
            settings, _worker_config(args, args.group), _llm_settings(args), _probe_spec(args),
            metrics_port=args.metrics_port,
        ) as runner:  # fmt: skip
            print(f"verigen worker: {args.workers} syntheses at once, model {args.model}",
                  file=sys.stderr)  # fmt: skip
            await runner.run()
        return 0

    return run_async(main())


def _probe(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from producers.verigen.probe import Probe, ProbeServer

    async def main() -> int:
        async with (
            Probe.with_pool(args.desktops) as probe,
            ProbeServer(probe, token=args.token, port=args.port) as server,
        ):
            print(json.dumps({"url": server.url, "token": server.token,
                              "desktops": args.desktops}), flush=True)  # fmt: skip
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            import signal

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        return 0

    return run_async(main())
