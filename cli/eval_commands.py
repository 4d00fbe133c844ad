"""`scalecua eval`: a policy's pass rate on held-out task instances or any folder of tasks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.rollout_commands import add_desktops_kind
from cli.settings import integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua eval` to the parser."""
    p = subparsers.add_parser(
        "eval",
        help="play tasks once each, greedily (or sampled, for pass@k), and print the pass "
        "rate with its 95%% interval",
        description=(
            "Play every task once with the policy at temperature 0 through the rollout worker "
            "and the judge on a log of its own (an embedded broker: evaluation episodes never reach a training run's segmenter or trainer), and print one "
            "JSON document: the pass rate, its Wilson 95%% interval, and per-family rates. "
            "Tasks are generated instances of the task families (--split) or a folder of "
            "OSWorld task JSON (--tasks; with --index, OSWorld's benchmark: its runnable tasks, "
            "and a per-domain table on stderr) or of ScienceBoard's (--tasks tasks/VM: its "
            "runnable tasks, and its per-app table on stderr). With --samples N and a --temperature, each task is "
            "played N times as one group, and pass@k (k = 1, 2, 4, ... N) is reported too."
        ),
    )
    p.add_argument("--policy", required=True, help="tiny | smollm2 | a model (checkpoint) folder")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--split", choices=("heldout", "train"), help="task-family instances")
    source.add_argument(
        "--tasks", type=Path, help="a folder (or file) of OSWorld or ScienceBoard task JSON"
    )
    p.add_argument(
        "--index", type=Path, default=None,
        help="with --tasks DIR: an OSWorld index (test_all.json) of DIR/<domain>/<id>.json; "
        "plays the tasks runnable here (`scalecua tasks coverage`) and prints OSWorld's "
        "per-domain table",
    )  # fmt: skip
    p.add_argument("--n", type=integer(1), default=60, help="--split: instances (default 60)")
    p.add_argument("--families", nargs="*", default=None, help="--split: only these families")
    p.add_argument(
        "--desktops", type=integer(1), default=2, help="desktops side by side (default 2)"
    )
    add_desktops_kind(p)
    p.add_argument(
        "--max-steps", type=integer(1), default=5, help="turn limit per episode (default 5)"
    )
    p.add_argument("--max-tokens", type=integer(1), default=96, help="tokens per turn (default 96)")
    p.add_argument("--observe", default=None, choices=("screenshot", "a11y", "both", "compact"),
                   help="default: the policy card's, else a11y for text-only policies and "
                   "screenshot for the others")  # fmt: skip
    p.add_argument(
        "--samples",
        type=integer(1),
        default=1,
        help="rollouts per task, for pass@k (default 1; > 1 needs --temperature)",
    )
    p.add_argument(
        "--temperature",
        type=number(0),
        default=0.0,
        help="sampling temperature (default 0: greedy)",
    )
    p.add_argument(
        "--threshold", type=number(above=0, high=1), default=1.0, help="a score >= this passes"
    )
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    p.set_defaults(func=_eval)


def _tasks(args: argparse.Namespace) -> tuple[list, object, list[str]]:
    """The task events, a task -> family function and the held-out family names."""
    from producers.task_import import file_task_events

    if args.tasks is not None:
        if not args.tasks.exists():
            from runtime.errors import ConfigError

            raise ConfigError(f"no tasks at {args.tasks}")
        events = file_task_events([args.tasks], source="eval", split="benchmark")
        apps = {e.task_id: (e.task.get("related_apps") or ["tasks"])[0] for e in events}
        return events, lambda task_id: apps.get(task_id, "tasks"), []
    from runtime.envs.tasks import families

    generated = families.generate(args.split, args.n, args.families)
    events = families.task_events(generated)
    return events, families.family_of, list(families.HELDOUT_FAMILIES)


def _scienceboard_tasks(folder: Path) -> list | None:
    """The task files of a folder (or file) of ScienceBoard's tasks; None for OSWorld's."""
    from runtime.envs.tasks.catalog import read_task_folder

    entries = read_task_folder(folder)
    tasks = [e.task for e in entries if e.task is not None]
    return entries if tasks and all(t.native is not None for t in tasks) else None


def _benchmark(args: argparse.Namespace, entries: list | None) -> tuple[list, object, dict]:
    """A benchmark's runnable tasks as events, key -> domain, and its coverage report (an
    OSWorld folder with its --index, or a ScienceBoard folder's `entries`, all its tasks)."""
    from producers.task_import import task_event
    from runtime.envs.tasks.catalog import read_index, read_task_folder
    from runtime.envs.tasks.coverage import assess, summarize
    from runtime.envs.tasks.files import open_file_cache
    from runtime.errors import ConfigError

    if entries is None:
        entries = read_task_folder(args.tasks, read_index(args.index) if args.index else None)
    cache = open_file_cache()
    verdicts = {v.key: v for v in (assess(e, is_cached=cache.has) for e in entries)}
    coverage = summarize(verdicts.values())
    events = [task_event(e.task, source="eval", split="benchmark", key=e.key)
              for e in entries if e.task is not None and verdicts[e.key].runnable]  # fmt: skip
    if not events:
        raise ConfigError(
            f"none of the {coverage['total']} tasks is runnable here; `scalecua tasks coverage "
            f"{args.tasks}{f' --index {args.index}' if args.index else ''}` says why"
        )
    domains = {e.key: e.domain for e in entries}
    return events, lambda key: domains.get(key, "tasks"), coverage


def _eval(args: argparse.Namespace) -> int:
    from runtime.envs.desktop.pool import use_desktops_kind
    from runtime.errors import SettingError

    use_desktops_kind(args.desktops_kind)
    if args.index is not None and args.tasks is None:
        raise SettingError(f"[eval] index = {args.index}: --index goes with --tasks DIR")
    from transformers.utils import logging as hf_logging

    from cli.bus_commands import _run
    from cli.evaluation.benchmark import render_benchmark
    from cli.evaluation.run import EvalConfig, evaluate_policy
    from cli.evaluation.stats import summarize_outcomes
    from cli.service_console import service_console
    from runtime.errors import ConfigError
    from runtime.service_logs import ServiceLogs

    hf_logging.disable_progress_bar()
    coverage = None
    found = (
        _scienceboard_tasks(args.tasks) if args.tasks is not None and args.tasks.exists() else None
    )
    scienceboard = found is not None
    if args.index is None and not scienceboard:
        events, family_of, held = _tasks(args)
    else:
        events, family_of, coverage = _benchmark(args, found if args.index is None else None)
        held = []
    if not events:
        raise ConfigError("no tasks to evaluate")
    # the task JSON's own id; a ScienceBoard task has none but its file's name, its key's end
    ids = {e.task_id: e.task.get("id") or e.task_id.rsplit("/", 1)[-1] for e in events}
    config = EvalConfig(
        policy=args.policy, desktops=args.desktops, max_steps=args.max_steps,
        max_tokens=args.max_tokens, observe=args.observe, samples=args.samples,
        temperature=args.temperature,
    )  # fmt: skip

    def say(msg: str) -> None:
        print(f"[scalecua eval] {msg}", file=sys.stderr, flush=True)

    async def main(logs: ServiceLogs) -> int:
        outcomes = await evaluate_policy(config, events, family_of, progress=say, logs=logs)
        summary = {
            "policy": args.policy,
            "source": str(args.tasks) if args.tasks is not None else f"split:{args.split}",
            **summarize_outcomes(outcomes, args.threshold, held),
            **_benchmark_results(args, coverage, outcomes, scienceboard),
            "outcomes": [
                {
                    "task_id": o.task_id,
                    "id": ids.get(o.task_id, o.task_id),  # the task JSON's own id
                    "family": o.family,
                    "score": o.score,
                    "sample": o.sample,
                    "status": o.status,
                    "reason": o.reason,
                }
                for o in sorted(outcomes, key=lambda o: (o.task_id, o.sample))
            ],
        }
        if coverage is not None:
            print(render_benchmark(summary["benchmark"]), file=sys.stderr, flush=True)
        text = json.dumps(summary)
        if args.json is not None:
            args.json.write_text(text + "\n")
        print(text, flush=True)
        return 0

    # As `up`: the judge's and the worker's lines go to their files, warnings to the console.
    with service_console(say, bool(args.verbose), main="eval") as logs:
        return _run(main(logs))


def _benchmark_results(
    args: argparse.Namespace, coverage: dict | None, outcomes: list, scienceboard: bool
) -> dict:
    """The benchmark's table and the tasks that did not run, for a benchmark evaluation."""
    from cli.evaluation.benchmark import CATEGORIES, SCIENCEBOARD_CATEGORIES, benchmark_table

    if coverage is None:
        return {}
    categories = SCIENCEBOARD_CATEGORIES if scienceboard else CATEGORIES
    return {
        **({"benchmark_name": "ScienceBoard"} if scienceboard else {"index": str(args.index)}),
        "benchmark": benchmark_table(coverage, outcomes, args.threshold, categories),
        "coverage": {k: coverage[k] for k in ("total", "supported", "runnable")},
        "not_run": [
            {"task_id": t["key"], "domain": t["domain"], "reasons": t["reasons"]}
            for t in coverage["tasks"]
            if not t["runnable"]
        ],
    }
