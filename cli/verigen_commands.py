"""`scalecua verigen ...`: task synthesis with executable judges (VeriGen).

    scalecua verigen validate CANDIDATE.json [--solution ACTIONS.json]
    scalecua verigen run --app APP --n N --llm-url URL --model M   # requests + workers + summary
    scalecua verigen worker --llm-url URL --model M                # a member of the worker group
    scalecua verigen probe --desktops 4                            # the shared interaction probe
    scalecua verigen augment --from-log --llm-url URL --model M    # decompose/compose from rollouts
    scalecua verigen audit --benchmark DIR [--tasks DIR] [--filter] # overlap with a benchmark

Each subcommand is one `_add_*` parser function and one handler here; the option groups
(`_llm_args`, `_probe_args`, `_switch_args`) are shared. The handlers' bodies are in
cli/verigen/, so that `--help` imports nothing heavy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cli.bus_commands import add_bootstrap
from cli.settings import PORT, integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua verigen` and its subcommands."""
    verigen = subparsers.add_parser(
        "verigen", help="VeriGen: synthesise desktop tasks whose judges are proven on desktops"
    )
    sub = verigen.add_subparsers(dest="verigen_command", metavar="SUBCOMMAND")
    for add in (_add_validate, _add_run, _add_worker, _add_augment, _add_audit, _add_probe):
        add(sub)
    verigen.set_defaults(func=_help(verigen))


def _add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="run the rule validator on a candidate (prints one JSON line; exit 0 accepted, "
        "1 rejected)",
    )
    p.add_argument("candidate", type=Path, help="the candidate JSON (an OSWorld task + metadata)")
    p.add_argument("--solution", type=Path, help="a JSON list of actions that solves it")
    p.set_defaults(func=_validate)


def _add_run(sub: argparse._SubParsersAction) -> None:
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
    _synthesis_args(p)
    _switch_args(p)
    _llm_args(p)
    _probe_args(p)
    add_bootstrap(p)
    p.set_defaults(func=_run)


def _add_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="a VeriGen worker: synthesise synthesis-requests (scale out)")
    p.add_argument("--workers", type=integer(1), default=16, help="syntheses at once (default 16)")
    p.add_argument("--group", default="verigen", help="consumer group (default verigen)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    _llm_args(p)
    _probe_args(p)
    add_bootstrap(p)
    p.set_defaults(func=_worker)


def _add_augment(sub: argparse._SubParsersAction) -> None:
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
    _grow_args(p)
    _synthesis_args(p)
    _switch_args(p)
    _llm_args(p, required=False)
    _probe_args(p)
    add_bootstrap(p)
    p.set_defaults(func=_augment)


def _add_audit(sub: argparse._SubParsersAction) -> None:
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
    add_bootstrap(p)
    p.set_defaults(func=_audit)


def _add_probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="serve the shared interaction probe over HTTP on 127.0.0.1")
    p.add_argument("--desktops", type=integer(1), default=4, help="desktops to share (default 4)")
    p.add_argument("--port", type=integer(*PORT), default=0, help="port (default: a free one)")
    p.add_argument("--token", default=None, help="bearer token (default: a random one)")
    p.set_defaults(func=_probe)


def _help(parser: argparse.ArgumentParser):
    def show(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show


# -- option groups ------------------------------------------------------------------------
def _grow_args(p: argparse.ArgumentParser) -> None:
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


def _synthesis_args(p: argparse.ArgumentParser) -> None:
    """Where a run's syntheses happen, where accepted tasks also go, and how long to wait."""
    p.add_argument("--workers", type=integer(0), default=4,
                   help="syntheses at once in this process (default 4; 0: none here)")  # fmt: skip
    p.add_argument("--out", type=Path, help="also write each accepted task (and its solution) here")
    p.add_argument(
        "--timeout", type=number(above=0), default=None, help="give up after this many seconds"
    )


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


# -- handlers -----------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.probe import validate_main

    return run_async(validate_main(args))


def _run(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.synthesis import run_main

    summary: dict[str, Any] = {}
    code = run_async(run_main(args, summary))
    print(json.dumps(summary))
    return code


def _worker(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.synthesis import serve_worker

    return run_async(serve_worker(args))


def _augment(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.augment import augment_main

    if not args.dry_run and not (args.llm_url and args.model):
        print("augment needs --llm-url and --model (or --dry-run)", file=sys.stderr)
        return 2
    summary: dict[str, Any] = {}
    code = run_async(augment_main(args, summary))
    print(json.dumps(summary))
    return code


def _audit(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.audit import audit_main

    return run_async(audit_main(args))


def _probe(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run as run_async
    from cli.verigen.probe import serve_probe

    return run_async(serve_probe(args))
