"""`scalecua fleet`: simulated environments replaying recorded trajectories, for load tests."""

from __future__ import annotations

import argparse
import sys

from cli.bus_commands import add_bootstrap
from cli.settings import PORT, integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua fleet` to the parser."""
    p = subparsers.add_parser(
        "fleet",
        help="a load generator: N simulated environments answer rollout-requests with "
        "recorded trajectories",
        description=(
            "Join the rollout workers' group on rollout-requests and answer each request by "
            "replaying a recorded trajectory of its task from an archived run (new trajectory "
            "ids, the recorded screenshots and artifacts), one turn per think time in each of "
            "N simulated environments. Everything downstream is the real service: use it to "
            "size the judge, segmenter, sampler, archiver and broker for a fleet (bench/fleet.py "
            "runs it; docs/deploy.md, 'Sizing a cluster'). Its events carry the producer id "
            "fleet-replay:<host>:<pid>."
        ),
    )
    p.add_argument("--archive", default=None,
                   help="archive folder or URL holding the recorded run "
                        "(default $SCALECUA_HOME/archive)")  # fmt: skip
    p.add_argument("--run", default=None, help="the recorded run (default: the newest with any)")
    p.add_argument("--environments", type=integer(1), default=600,
                   help="environments playing at once (paper: 600)")  # fmt: skip
    p.add_argument("--turn-s", type=number(0), default=10.8,
                   help="seconds per turn of one environment (paper: 540 s / 50 turns)")  # fmt: skip
    p.add_argument("--jitter", type=number(0, 0.99), default=0.3,
                   help="each turn takes turn-s x [1 - jitter, 1 + jitter] (0.3)")  # fmt: skip
    p.add_argument("--compression", type=number(above=0), default=1.0,
                   help="time compression: turns come this many times faster (1)")  # fmt: skip
    p.add_argument("--seed", type=integer(0), default=0)
    p.add_argument("--group", default="rollout", help="consumer group (default rollout)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    add_bootstrap(p)
    p.set_defaults(func=_fleet)


def _fleet(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from producers.fleet.replay import Recordings, ThinkTime
    from producers.fleet.service import FleetConfig, FleetReplayer, load_recordings
    from runtime.config import BusSettings, home_dir
    from runtime.service import ServiceRunner

    archive = args.archive or str(home_dir() / "archive")
    recordings, run = load_recordings(archive, args.run)
    think = ThinkTime(turn_s=args.turn_s, jitter=args.jitter, compression=args.compression)
    config = FleetConfig(
        environments=args.environments, think=think, seed=args.seed, group_id=args.group
    )
    pool = Recordings(recordings)
    fleet = FleetReplayer(config, pool)
    print(
        f"fleet: {config.environments} environments replaying {len(pool)} trajectories of "
        f"{len(pool.tasks())} tasks from run {run} ({pool.steps_per_trajectory():.1f} turns "
        f"each), a turn every {think.mean_s:.3g} s: up to "
        f"{think.offered_steps_per_s(config.environments):.1f} rollout-steps/s",
        file=sys.stderr,
    )
    runner = ServiceRunner(
        fleet, BusSettings.from_env(args.bootstrap), metrics_port=args.metrics_port
    )
    return _run(runner.run())
