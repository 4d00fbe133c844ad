"""`scalecua up`: the whole online-RL loop on one machine, on its embedded defaults."""

from __future__ import annotations

import argparse

from runtime.cli.rollout_commands import SMALLEST_IMAGE
from runtime.cli.settings import PORT, integer

__all__ = ["register"]

# The loop's size on a laptop: these override the services' paper-sized defaults so the
# default run ends in minutes on 2 cores. Every other knob comes from the services' tables.
_LAPTOP = {
    "batch": 2, "n": 4, "max_steps": 5, "max_tokens": 48, "image_max_side": 448, "in_flight": 1,
}  # fmt: skip


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua up` to the parser."""
    p = subparsers.add_parser(
        "up",
        help="run the whole online-RL loop locally: broker, desktops, rollout, judge, "
        "segmenter, sampler, trainer, archiver, dashboard",
        description=(
            "Start the embedded broker (unless SCALECUA_BOOTSTRAP names a cluster), import the "
            "built-in tasks, and run every service of the loop in this process: the sampler "
            "requests rollouts, the rollout worker plays them on real desktops with the policy, "
            "the judge scores them, the segmenter cuts them, the trainer takes GRPO steps and "
            "announces new weights the worker loads. Stops after --iterations trainer steps "
            "(or Ctrl-C) and prints a JSON summary. The loop's size comes from the options "
            "below; every other setting from the services' own tables ([rollout], [judge], "
            "[segment], [sample], [train] of the config file, or SCALECUA_<COMMAND>_<KEY>)."
        ),
    )
    p.add_argument(
        "--iterations", type=integer(1), default=3, help="trainer steps to run (default 3)"
    )
    p.add_argument(
        "--desktops", type=integer(1), default=2, help="desktops run side by side (default 2)"
    )
    p.add_argument("--policy", default="tiny", help="tiny | smollm2 | a model folder (tiny)")
    p.add_argument("--batch", type=integer(1), default=_LAPTOP["batch"],
                   help="B: tasks per batch and groups per trainer step (paper: 32)")  # fmt: skip
    p.add_argument(
        "--n", type=integer(1), default=_LAPTOP["n"], help="rollouts per task (paper: 8)"
    )
    p.add_argument("--max-steps", type=integer(1), default=_LAPTOP["max_steps"],
                   help="turn limit per rollout (paper: 50)")  # fmt: skip
    p.add_argument("--max-tokens", type=integer(1), default=_LAPTOP["max_tokens"],
                   help="tokens generated per turn")  # fmt: skip
    p.add_argument("--image-max-side", type=integer(SMALLEST_IMAGE), default=_LAPTOP["image_max_side"],
                   help="screenshots shrunk to fit this many pixels (1280 in `rollout`)")  # fmt: skip
    p.add_argument("--in-flight", type=integer(1), default=_LAPTOP["in_flight"],
                   help="unfinished batches at most (1: a step's groups finish together on "
                   "few desktops; the next batch still plays while the trainer steps)")  # fmt: skip
    p.add_argument("--tasks", nargs="*", default=None,
                   help="built-in task ids in the pool (default: all of them)")  # fmt: skip
    p.add_argument("--archive", default=None,
                   help="archive folder/URL (default $SCALECUA_HOME/archive)")  # fmt: skip
    p.add_argument("--checkpoints", default=None,
                   help="checkpoint root (default $SCALECUA_HOME/checkpoints/<run>)")  # fmt: skip
    p.add_argument("--dashboard-port", type=integer(*PORT), default=8080,
                   help="dashboard port on 127.0.0.1 (0: any free one; taken: any free one)")  # fmt: skip
    p.add_argument("--no-dashboard", action="store_true", help="do not serve the dashboard")
    p.add_argument("--trainer-nproc", type=integer(1), default=None,
                   help="ranks of the trainer's process group (default [train] nproc, 1)")  # fmt: skip
    p.add_argument("--bootstrap", default=None,
                   help="use this Kafka cluster instead of the embedded broker")  # fmt: skip
    p.add_argument(
        "--resume", nargs="?", const="latest", default=None, metavar="RUN",
        help="start from an archived run's state (default the newest with tasks): tasks, task-stats and "
        "the last policy update; the trainer continues that run's checkpoints",
    )  # fmt: skip
    p.set_defaults(func=_up)


def service_settings(args: argparse.Namespace) -> dict[str, argparse.Namespace]:
    """Each service's effective settings (config file, environment), sized by `up`'s options."""
    from runtime.cli import build_parser
    from runtime.cli.settings import apply_config, command_defaults, config_path, load_config

    parser = build_parser()
    apply_config(parser, load_config(config_path(getattr(args, "config", None)), parser))
    svc = {c: command_defaults(parser, c) for c in ("rollout", "judge", "segment", "sample",
                                                    "train")}  # fmt: skip
    svc["rollout"].policy = args.policy
    svc["rollout"].desktops = args.desktops
    svc["rollout"].max_tokens = args.max_tokens
    svc["rollout"].image_max_side = args.image_max_side
    svc["sample"].batch = args.batch
    svc["sample"].n = args.n
    svc["sample"].max_steps = args.max_steps
    svc["sample"].in_flight = args.in_flight
    svc["sample"].judge_version = svc["judge"].judge_version
    svc["train"].batch_groups = args.batch
    svc["train"].policy = args.policy
    svc["train"].judge_version = svc["judge"].judge_version
    if getattr(args, "trainer_nproc", None):
        svc["train"].nproc = args.trainer_nproc
    return svc


def _up(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from runtime.cli.bus_commands import _run
    from runtime.local_stack import UpConfig, run_up

    hf_logging.disable_progress_bar()  # one line per iteration, not a bar per weight load

    config = UpConfig(
        iterations=args.iterations, desktops=args.desktops, tasks=args.tasks,
        archive=args.archive, checkpoints=args.checkpoints, bootstrap=args.bootstrap,
        resume=args.resume, dashboard_port=None if args.no_dashboard else args.dashboard_port,
        services=service_settings(args),
    )  # fmt: skip
    return _run(run_up(config))
