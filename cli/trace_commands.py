"""`scalecua trace`: follow one trajectory from its request to the weights trained on it.

    scalecua trace                                  # the newest trajectories, to pick one
    scalecua trace b00003-5e1f2a-rename_file/2@0c41   # its timeline (a request id works too)
    scalecua trace ID --json                        # the same for tools
    scalecua trace --summary                        # p50/p90/p99 of each stage gap per version
    scalecua trace --archive var/archive --run latest ID
    scalecua trace --otlp http://127.0.0.1:4318     # every trajectory as an OpenTelemetry trace
    scalecua trace --otlp http://127.0.0.1:4318 --follow   # ...of a live run, as they settle

Everything is read from the log (live, or an archived run) after the fact: no service
writes anything for it. runtime/trace/ builds the timelines.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

import orjson

from cli.bus_commands import _run, add_bootstrap
from cli.settings import integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the trace command to the `scalecua` parser."""
    p = subparsers.add_parser(
        "trace",
        help="follow a trajectory through the whole system: request, turns, reward, segments, "
        "the training step, the announcement, and the time between them",
        description=(
            "Build a trajectory's timeline from the log (live, or --archive): its request and "
            "why the sampler drew its task, each turn, the completion, the reward, the "
            "segments, the trainer's step that consumed its group (with its advantage) and the "
            "announcement of that version, with the time between each stage. Without a "
            "trajectory: the newest ones. --summary: percentiles of every stage gap per "
            "policy version."
        ),
    )
    p.add_argument(
        "trajectory", nargs="?", default=None,
        help="a trajectory id, a request id (its final attempt) or a prefix (a group: its rollouts)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--summary", action="store_true",
        help="p50/p90/p99 of each stage gap per policy version, over the whole run",
    )  # fmt: skip
    p.add_argument("--archive", default=None, help="read an archived run from this folder or URL")
    p.add_argument(
        "--run", default="latest",
        help="the run id, or latest (with --archive: which run; live: it must be the log's run)",
    )  # fmt: skip
    p.add_argument("--last", type=integer(1), default=20, help="trajectories listed without an id")
    p.add_argument(
        "--pool-factor", type=integer(1), default=3,
        help="the sampler's candidate pool is this many times its batch (its --pool-factor)",
    )  # fmt: skip
    p.add_argument(
        "--otlp", default=None, metavar="ENDPOINT",
        help="send the trajectories (the one named, else all) as OpenTelemetry traces to this "
        "OTLP/HTTP receiver (http://host:4318)",
    )  # fmt: skip
    p.add_argument(
        "--follow", action="store_true",
        help="with --otlp on the live log: keep exporting trajectories as they are announced "
        "(or end in an environment failure) until Ctrl-C, then the rest as they are",
    )  # fmt: skip
    p.add_argument(
        "--interval",
        type=number(above=0),
        default=10.0,
        help="with --follow: seconds between reads",
    )
    add_bootstrap(p)
    p.set_defaults(func=_trace)


async def _read(args: argparse.Namespace, group: str | None) -> Any:
    import asyncio

    from runtime.config import BusSettings
    from runtime.trace.reading import read_archived_log, read_live_log

    if args.archive:
        return await asyncio.to_thread(read_archived_log, args.archive, args.run, group)
    settings = BusSettings.from_env(args.bootstrap)
    log = await read_live_log(settings, group)
    if args.run not in (None, "", "latest", log.run_id):
        from runtime.errors import ConfigError

        raise ConfigError(f"the live log is run {log.run_id or '(unnamed)'}, not {args.run}")
    return log


def _print_json(value: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def _trace(args: argparse.Namespace) -> int:
    from runtime.errors import ConfigError
    from runtime.trace.summary import stage_summary
    from runtime.trace.text import listing_text, summary_text, timeline_text
    from runtime.trace.timeline import (
        LogIndex,
        build_timeline,
        build_timelines,
        group_named,
        resolve_trajectory,
        timeline_dict,
    )

    if args.summary and args.trajectory:
        raise ConfigError("--summary covers the whole run: give no trajectory with it")
    if args.follow:
        return _follow(args)
    group = None if args.summary or not args.trajectory else group_named(args.trajectory)
    log = _run_read(args, group)
    index = LogIndex(log, pool_factor=args.pool_factor)
    where = f"archive {args.archive}, run {log.run_id}" if args.archive else "the live log"
    if args.summary:
        timelines = build_timelines(index)
        rows = stage_summary(timelines)
        if args.json:
            _print_json({"run": log.run_id, "trajectories": len(timelines),
                         "gaps": [asdict(r) for r in rows]})  # fmt: skip
        else:
            sys.stdout.write(summary_text(rows, len(timelines), log.run_id))
        return 0
    if args.otlp:
        return _export(args, index, where)
    if args.trajectory is None:
        timelines = build_timelines(index)[-args.last :]
        if args.json:
            _print_json([timeline_dict(t) for t in timelines])
        else:
            sys.stdout.write(listing_text(timelines))
        return 0
    found = resolve_trajectory(index, args.trajectory)
    if not found:
        raise ConfigError(f"no trajectory {args.trajectory!r} in {where}")
    timelines = [t for t in (build_timeline(index, tid) for tid in found) if t is not None]
    if args.json:
        _print_json(timeline_dict(timelines[0]) if len(timelines) == 1 else
                    [timeline_dict(t) for t in timelines])  # fmt: skip
    elif len(timelines) == 1:
        sys.stdout.write(timeline_text(timelines[0]))
    else:
        sys.stdout.write(listing_text(timelines))
    return 0


def _run_read(args: argparse.Namespace, group: str | None) -> Any:
    result: list[Any] = []

    async def read() -> int:
        result.append(await _read(args, group))
        return 0

    _run(read())
    return result[0]


def _export(args: argparse.Namespace, index: Any, where: str) -> int:
    from runtime.errors import ConfigError
    from runtime.trace.otlp import export_timelines
    from runtime.trace.timeline import build_timeline, build_timelines, resolve_trajectory

    if args.trajectory is None:
        timelines = build_timelines(index)
    else:
        found = resolve_trajectory(index, args.trajectory)
        if not found:
            raise ConfigError(f"no trajectory {args.trajectory!r} in {where}")
        timelines = [t for t in (build_timeline(index, tid) for tid in found) if t is not None]
    report = export_timelines(timelines, args.otlp)
    print(f"trace: sent {report.traces} traces ({report.spans} spans) to {report.endpoint}",
          file=sys.stderr)  # fmt: skip
    return 0


def _follow(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from runtime.config import BusSettings
    from runtime.errors import ConfigError
    from runtime.trace.otlp import ExportReport, follow_live

    if not args.otlp or args.archive or args.trajectory or args.summary:
        raise ConfigError("--follow exports a live run: use it with --otlp, without --archive, "
                          "--summary or a trajectory")  # fmt: skip

    def progress(report: ExportReport) -> None:
        print(f"trace: sent {report.traces} traces ({report.spans} spans) to {report.endpoint}",
              file=sys.stderr, flush=True)  # fmt: skip

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        settings = BusSettings.from_env(args.bootstrap)
        total = await follow_live(settings, args.otlp, stop, args.interval, args.pool_factor,
                                  progress)  # fmt: skip
        print(f"trace: {total} traces in all", file=sys.stderr)
        return 0

    return _run(main())
