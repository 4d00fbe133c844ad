"""`scalecua` subcommands for the event backbone: broker, topics, tail, produce, archive, replay."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys

from cli.settings import PORT, Kind, environment_value, integer, number
from runtime.addresses import listen_address, parse_address

__all__ = ["add_bootstrap", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the event-backbone subcommands to the `scalecua` parser."""
    for add in (_add_broker, _add_topics, _add_tail, _add_produce, _add_archive, _add_replay):
        add(subparsers)


def _listen_address(value: object, text: bool) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    address = listen_address(value)
    if ":" in address:  # see EmbeddedBroker: Tansu advertises IPv6 in a form clients cannot dial
        raise ValueError(value)
    return address


def _advertised_host(value: object, text: bool) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    address = parse_address(value)
    if address is None and _HOST_NAME.fullmatch(value):
        return value
    if address is not None and address.version == 4 and not address.is_unspecified:
        return str(address)
    raise ValueError(value)


_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
# Where the broker listens: one interface (docs/deploy.md, "Hosts apart"), never all of them.
_LISTEN = Kind("one IPv4 address of this host's interfaces (not 0.0.0.0)", _listen_address)
_ADVERTISE = Kind("a host name or IPv4 address, without a port", _advertised_host)


def _add_broker(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "broker", help="run the embedded Kafka-compatible broker (on 127.0.0.1 unless --listen)"
    )
    p.add_argument(
        "--port",
        type=integer(1, 65535),
        default=None,
        help="listen port (default: 9092, else a free one)",
    )
    p.add_argument(
        "--listen", type=_LISTEN, default="127.0.0.1", metavar="ADDRESS",
        help="the one address to listen on: 127.0.0.1 (default), or the address of the "
        "interface other hosts reach this one by (it has no authentication: a private network)",
    )  # fmt: skip
    p.add_argument(
        "--advertise", type=_ADVERTISE, default=None, metavar="HOST",
        help="the host name or address clients are told to connect to (default: --listen)",
    )  # fmt: skip
    _resume_args(p)
    p.set_defaults(func=_broker)


def _add_topics(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("topics", help="list or create the registry's topics")
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    t = tsub.add_parser("list", help="list registry topics and what the broker has")
    add_bootstrap(t)
    t.set_defaults(func=_topics_list)
    t = tsub.add_parser("create", help="create registry topics that do not exist yet")
    t.add_argument("names", nargs="*", help="topics to create (default: all)")
    t.add_argument(
        "--replication-factor", type=integer(1), default=None,
        help="replicas per partition (default: $SCALECUA_REPLICATION or 1; use 3 on a cluster)",
    )  # fmt: skip
    add_bootstrap(t)
    t.set_defaults(func=_topics_create)


def _add_tail(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tail", help="print a topic's events as JSON lines")
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    p.add_argument("--max", type=integer(1), default=None, help="stop after N records")
    p.add_argument(
        "--idle-exit",
        type=number(above=0),
        default=None,
        help="stop after S seconds with no record",
    )
    add_bootstrap(p)
    p.set_defaults(func=_tail)


def _add_produce(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "produce", help="validate JSON lines from stdin and write them as events"
    )
    p.add_argument("topic")
    p.add_argument("--example", action="store_true", help="print one valid example event and exit")
    p.add_argument(
        "--raw", action="store_true", help="write each stdin line as raw bytes, unvalidated"
    )
    add_bootstrap(p)
    p.set_defaults(func=_produce)


def _add_archive(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("archive", help="append every topic to Parquet files (the archiver)")
    p.add_argument("--dir", required=True, help="archive folder or URL (s3://bucket/prefix)")
    p.add_argument("--topics", nargs="*", default=None, help="topics to follow (default: all)")
    p.add_argument("--group", default="archiver", help="consumer group (scale out by running more)")
    p.add_argument("--max-rows", type=integer(1), default=5000, help="roll a file after N rows")
    p.add_argument(
        "--max-age", type=number(above=0), default=2.0, help="roll a file after S seconds"
    )
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    add_bootstrap(p)
    p.set_defaults(func=_archive)


def _add_replay(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="copy a topic range (live log or archive) to one Parquet file"
    )
    p.add_argument("topic")
    p.add_argument("--out", required=True, help="output .parquet file")
    p.add_argument(
        "--archive", default=None, help="read this archive folder/URL instead of the live log"
    )
    p.add_argument("--partitions", type=integer(0), nargs="*", default=None)
    p.add_argument("--start-offset", type=integer(0), default=0, help="first offset per partition")
    p.add_argument(
        "--end-offset", type=integer(0), default=None, help="stop before this offset per partition"
    )
    p.add_argument(
        "--since-ms", type=integer(0), default=None, help="only records at/after this timestamp"
    )
    p.add_argument(
        "--until-ms", type=integer(0), default=None, help="only records before this timestamp"
    )
    p.add_argument(
        "--run", default=None,
        help="only this run (log incarnation; `latest` = the newest); default: every run",
    )  # fmt: skip
    add_bootstrap(p)
    p.set_defaults(func=_replay)


def _resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resume", nargs="?", const="latest", default=None, metavar="RUN",
        help="re-seed the new log from an archived run (default the newest with tasks): tasks, "
        "task-stats and the last policy update",
    )  # fmt: skip
    p.add_argument(
        "--resume-archive", default=None, metavar="DIR",
        help="archive to resume from (default $SCALECUA_HOME/archive)",
    )  # fmt: skip


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    """Add `--bootstrap` (the broker a service command talks to) to a command."""
    p.add_argument(
        "--bootstrap",
        default=None,
        help="bootstrap servers (default: $SCALECUA_BOOTSTRAP or the embedded broker)",
    )


def _run(coro) -> int:  # noqa: ANN001 - a coroutine returning an exit code
    try:
        import uvloop
    except ImportError:
        return int(asyncio.run(coro) or 0)
    # Outside the try: an ImportError the command raises is its own, not a missing uvloop
    # (caught, it ran the spent coroutine again: "cannot reuse already awaited coroutine").
    return int(uvloop.run(coro) or 0)


def _broker(args: argparse.Namespace) -> int:
    from cli.bus_tools import run_broker

    return _run(run_broker(args.port, args.resume, args.resume_archive,
                           host=args.listen, advertise=args.advertise))  # fmt: skip


def _topics_list(args: argparse.Namespace) -> int:
    from cli.bus_tools import topics_list

    return _run(topics_list(args.bootstrap))


def _topics_create(args: argparse.Namespace) -> int:
    from cli.bus_tools import topics_create

    factor = args.replication_factor
    if factor is None:
        factor = environment_value("SCALECUA_REPLICATION", integer(1), 1)
    return _run(topics_create(args.bootstrap, args.names or None, factor))


def _tail(args: argparse.Namespace) -> int:
    from cli.bus_tools import tail

    return _run(tail(args.topic, args.bootstrap, args.from_beginning, args.max, args.idle_exit))


def _produce(args: argparse.Namespace) -> int:
    if args.example:
        from topics.codec import to_json
        from topics.examples import example_event

        sys.stdout.write(to_json(example_event(args.topic)).decode() + "\n")
        return 0
    from cli.bus_tools import produce

    return _run(produce(args.topic, args.bootstrap, sys.stdin.buffer, raw=args.raw))


def _archive(args: argparse.Namespace) -> int:
    from consumers.archiver.service import Archiver, ArchiverConfig
    from runtime.config import BusSettings
    from runtime.runs import run_resolver
    from runtime.service import ServiceRunner
    from topics.registry import topic, topic_names

    names = args.topics or topic_names()
    for name in names:
        topic(name)
    config = ArchiverConfig(
        root=args.dir, topics=tuple(names), max_rows=args.max_rows, max_age_s=args.max_age,
        group_id=args.group,
    )  # fmt: skip
    if "://" not in args.dir:
        os.makedirs(args.dir, exist_ok=True)
    settings = BusSettings.from_env(args.bootstrap)
    runner = ServiceRunner(
        Archiver(config, run_resolver(settings)),
        settings,
        metrics_interval_s=10,
        metrics_port=args.metrics_port,
    )
    print(f"archiving {len(names)} topics to {args.dir} (group {args.group})", file=sys.stderr)
    return _run(runner.run())


def _replay(args: argparse.Namespace) -> int:
    from cli.bus_tools import replay

    return _run(
        replay(
            args.topic, args.out, bootstrap=args.bootstrap, archive=args.archive,
            partitions=args.partitions, start_offset=args.start_offset, end_offset=args.end_offset,
            since_ms=args.since_ms, until_ms=args.until_ms, run=args.run,
        )
    )  # fmt: skip
