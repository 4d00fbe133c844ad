"""The composition root: the `scalecua` command line, the one place that wires services together.

One entry point, one module of subcommands per area; `up/` runs the whole loop in one
process, `evaluation/` plays a policy on a log of its own. Nothing imports this package
but its entry points (`scalecua`, `python -m cli`, `python -m runtime.cli`), tests and bench.

Each area module exposes `register(subparsers)`, adds its commands with a handler in
`func`, and imports heavy dependencies (torch, desktops) only inside its handlers so that
`scalecua --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from cli.settings import (
    apply_config,
    bind_settings,
    check_parsed,
    config_path,
    load_config,
)
from runtime.errors import ScaleCUAError, SettingError

__all__ = ["build_parser", "entry", "main"]

_AREAS = (
    "cli.bus_commands",
    "cli.desktop_commands",
    "cli.task_commands",
    "cli.policy_commands",
    "cli.rollout_commands",
    "cli.train_commands",
    "cli.segment_commands",
    "cli.sample_commands",
    "cli.up_commands",
    "cli.eval_commands",
    "cli.dashboard_commands",
    "cli.trace_commands",
    "cli.fleet_commands",
    "cli.verigen_commands",
    "cli.settings.show",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser with every area's subcommands."""
    parser = argparse.ArgumentParser(
        prog="scalecua",
        description="Online RL for computer-use agents on a Kafka log.",
    )
    parser.add_argument("--version", action="version", version=f"scalecua {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--config", default=None, metavar="FILE",
        help="TOML settings (default: $SCALECUA_CONFIG, else ./scalecua.toml if present)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _AREAS:
        importlib.import_module(name).register(sub)
    bind_settings(parser)
    return parser


def entry() -> int:
    """The `scalecua` program: `main` in a process whose heap keeps to what it uses."""
    from runtime.process_memory import few_malloc_arenas

    few_malloc_arenas()
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `scalecua` command line and return its exit code."""
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    try:  # every setting is checked (file, environment, command line) before anything runs
        apply_config(parser, load_config(config_path(known.config), parser))
        args = parser.parse_args(argv)
        check_parsed(parser, args)
    except ScaleCUAError as exc:
        print(f"scalecua: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # aiokafka logs every connection attempt and subscription change at INFO/ERROR.
    logging.getLogger("aiokafka").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SettingError as exc:  # a setting only a running command can check (a task id)
        print(f"scalecua: error: {exc}", file=sys.stderr)
        return 2
    except ScaleCUAError as exc:
        print(f"scalecua: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scalecua")
    except PackageNotFoundError:
        return "0+unknown"
