"""`scalecua up`: the whole online-RL loop on one machine, on its embedded defaults."""

from __future__ import annotations

import argparse

from cli.rollout_commands import SMALLEST_IMAGE, add_desktops_kind
from cli.settings import PORT, integer, number

__all__ = ["register", "fill_profile", "service_settings"]

# What `up` runs by default, per policy. `smollm2` (the default) is the run that learns in
# about ten minutes on 2 cores: SmolLM2-135M-Instruct on the compact text view of four
# terminal tasks played every step (so each iteration's pass rate is over the same tasks),
# a short warm start through the log (SFT on scripted episodes), then GRPO on rollouts
# sampled at temperature 1.0, where the warm start is right often but not always and the
# groups carry signal (docs/learning.md has the measurements behind each choice). `tiny` is the fast plumbing
# check: a random-weight Qwen2.5-VL on screenshots of the built-in tasks, no warm start.
# Values set in the config file or the environment win over these; `up`'s own options
# win over both.
_PROFILES: dict[str, dict] = {
    "smollm2": {
        "up": {"iterations": 12, "desktops": 4, "batch": 4, "n": 4, "max_steps": 3,
               "max_tokens": 40, "image_max_side": 448, "in_flight": 1, "warm_steps": 4,
               "warm_episodes": 8, "warm_lr": 5e-5, "pool": 4,
               "families": ["rename_file", "delete_file", "append_line", "count_lines"]},
        "rollout": {"observe": "compact", "prompt": "compact", "temperature": 1.0},
        "train": {"lr": 2e-5, "kl_coef": 0.0, "keep_checkpoints": 3},
    },
    "tiny": {
        "up": {"iterations": 3, "desktops": 2, "batch": 2, "n": 4, "max_steps": 5,
               "max_tokens": 48, "image_max_side": 448, "in_flight": 1, "warm_steps": 0,
               "warm_episodes": 8, "warm_lr": 5e-5, "pool": 24, "families": None},
        "rollout": {},
        "train": {"keep_checkpoints": 3},
    },
}  # fmt: skip


def _profile(policy: str) -> dict:
    """The defaults for a policy: smollm2's for SmolLM2 and model folders, tiny's for tiny."""
    return _PROFILES["tiny" if policy == "tiny" else "smollm2"]


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
        "--iterations",
        type=integer(1),
        default=None,
        help="RL trainer steps to run (smollm2: 12; tiny: 3)",
    )
    p.add_argument(
        "--desktops",
        type=integer(1),
        default=None,
        help="desktops run side by side (smollm2: 4; tiny: 2)",
    )
    add_desktops_kind(p)
    p.add_argument(
        "--policy", default="smollm2",
        help="smollm2 (default: the run that learns) | tiny (a fast plumbing check) | a model "
        "folder; the policy picks the defaults of the options below (see docs/learning.md)",
    )  # fmt: skip
    p.add_argument("--batch", type=integer(1), default=None,
                   help="B: tasks per batch and groups per trainer step (paper: 32)")  # fmt: skip
    p.add_argument("--n", type=integer(1), default=None, help="rollouts per task (paper: 8)")
    p.add_argument("--max-steps", type=integer(1), default=None,
                   help="turn limit per rollout (paper: 50)")  # fmt: skip
    p.add_argument("--max-tokens", type=integer(1), default=None,
                   help="tokens generated per turn")  # fmt: skip
    p.add_argument("--image-max-side", type=integer(SMALLEST_IMAGE), default=None,
                   help="screenshots shrunk to fit this many pixels (1280 in `rollout`)")  # fmt: skip
    p.add_argument("--in-flight", type=integer(1), default=None,
                   help="unfinished batches at most (1: a step's groups finish together on "
                   "few desktops; the next batch still plays while the trainer steps)")  # fmt: skip
    p.add_argument("--tasks", nargs="*", default=None,
                   help="built-in task ids in the pool (tiny's default: all of them)")  # fmt: skip
    p.add_argument("--families", nargs="*", default=None,
                   help="the pool: train instances of these task families instead (smollm2's "
                   "default: four terminal families)")  # fmt: skip
    p.add_argument("--pool", type=integer(1), default=None,
                   help="how many task-family instances in the pool (smollm2: 4, one per family, played every step)")  # fmt: skip
    p.add_argument("--warm-steps", type=integer(0), default=None,
                   help="SFT steps on scripted episodes before RL (smollm2: 4; tiny: 0)")  # fmt: skip
    p.add_argument("--warm-episodes", type=integer(1), default=None,
                   help="scripted episodes per warm-start step (8)")  # fmt: skip
    p.add_argument("--warm-lr", type=number(above=0), default=None,
                   help="the warm start's SFT learning rate (5e-5)")  # fmt: skip
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
    p.add_argument("-v", "--verbose", action="store_true", dest="mirror_logs",
                   help="mirror every service's log to the console (they always go to files)")  # fmt: skip
    p.set_defaults(func=_up)


def fill_profile(args: argparse.Namespace) -> dict:
    """Fill `up`'s unset options from its policy's profile; return the profile."""
    profile = _profile(args.policy)
    for key, value in profile["up"].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return profile


def service_settings(args: argparse.Namespace) -> dict[str, argparse.Namespace]:
    """Each service's effective settings (config file, environment), sized by `up`'s options."""
    from cli import build_parser, settings

    profile = fill_profile(args)
    parser = build_parser()
    path = settings.config_path(getattr(args, "config", None))
    settings.apply_config(parser, settings.load_config(path, parser))
    commands = ("rollout", "judge", "segment", "sample", "train")
    svc = {c: settings.command_defaults(parser, c) for c in commands}
    for command in ("rollout", "train"):  # the profile where the file and environment are silent
        for key, value in profile[command].items():
            if not settings.configured(parser, command, key):
                setattr(svc[command], key, value)
    svc["rollout"].policy = _policy_folder(args.policy, svc["rollout"])
    svc["rollout"].desktops = args.desktops
    svc["rollout"].desktops_kind = args.desktops_kind or svc["rollout"].desktops_kind
    svc["rollout"].max_tokens = args.max_tokens
    svc["rollout"].image_max_side = args.image_max_side
    svc["sample"].batch = args.batch
    svc["sample"].n = args.n
    svc["sample"].max_steps = args.max_steps
    svc["sample"].in_flight = args.in_flight
    svc["sample"].judge_version = svc["judge"].judge_version
    svc["train"].batch_groups = args.batch
    svc["train"].policy = svc["rollout"].policy
    svc["train"].judge_version = svc["judge"].judge_version
    if getattr(args, "trainer_nproc", None):
        svc["train"].nproc = args.trainer_nproc
    return svc


def _policy_folder(policy: str, rollout: argparse.Namespace) -> str:
    """SmolLM2 as a folder whose card says how it is prompted and what it sees, so every
    checkpoint of the run carries it (and `scalecua eval` plays them the same way)."""
    if policy != "smollm2":
        return policy
    from cli.up.warm_start import policy_with_card
    from runtime.policy.model import cache_dir, smollm2_policy

    prompt, observe = rollout.prompt or "compact", rollout.observe or "compact"
    folder = cache_dir() / f"smollm2-{prompt}-{observe}"
    return str(policy_with_card(smollm2_policy(), folder, prompt, observe))


def _up(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from cli.bus_commands import _run
    from cli.service_console import service_console
    from cli.up.console import UpConsole
    from cli.up.local_stack import UpConfig, run_up

    hf_logging.disable_progress_bar()  # one line per iteration, not a bar per weight load
    verbose = bool(getattr(args, "verbose", False) or getattr(args, "mirror_logs", False))
    fill_profile(args)  # the iterations the console counts down come from the profile
    console = UpConsole(args.iterations, live=False if verbose else None)
    services = service_settings(args)
    config = UpConfig(
        iterations=args.iterations, desktops=args.desktops, tasks=args.tasks,
        families=None if args.tasks else args.families, pool=args.pool,
        warm_steps=0 if args.resume else args.warm_steps, warm_episodes=args.warm_episodes,
        warm_lr=args.warm_lr,
        archive=args.archive, checkpoints=args.checkpoints, bootstrap=args.bootstrap,
        resume=args.resume, dashboard_port=None if args.no_dashboard else args.dashboard_port,
        services=services,
    )  # fmt: skip
    # The services' lines go to their files; the console keeps the story.
    with service_console(console.say, verbose, main="up") as logs:
        return _run(run_up(config, console, logs))
