"""`scalecua sample`: the Frontier Sampling sampler as a service."""

from __future__ import annotations

import argparse
import sys

from cli.settings import PORT, integer, number, require

__all__ = ["register", "sampler_config"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua sample` to the parser."""
    p = subparsers.add_parser(
        "sample",
        help="the sampler: rewards -> task-stats (EMA pass rates) and the next rollout requests",
        description=(
            "The sampler folds each finished group into its task's EMA pass rate (task-stats), "
            "exactly once across restarts, and writes batches of rollout requests chosen by "
            "Frontier Sampling, a bounded number of batches ahead of the trainer. One sampler "
            "acts per training run: start another and it waits as a standby, taking over when "
            "the active one dies or stops."
        ),
    )
    p.add_argument("--strategy", default="frontier",
                   choices=("frontier", "uniform", "dapo", "curriculum"))  # fmt: skip
    p.add_argument("--batch", type=integer(1), default=32, help="B: tasks per batch (paper: 32)")
    p.add_argument("--n", type=integer(1), default=8, help="rollouts per task (paper: 8)")
    p.add_argument("--max-steps", type=integer(1), default=50, help="turn limit per rollout (50)")
    p.add_argument("--mu", type=number(0, 1), default=0.5, help="frontier pass rate (0.5)")
    p.add_argument("--sigma", type=number(above=0), default=0.25, help="frontier width (0.25)")
    p.add_argument(
        "--gamma", type=number(0, 1), default=0.2, help="share drawn outside the pool (0.2)"
    )
    p.add_argument("--alpha", type=number(above=0, high=1), default=0.2, help="EMA rate (0.2)")
    p.add_argument(
        "--p-min", type=number(0, 1), default=0.0, help="drop tasks below after first pass"
    )
    p.add_argument(
        "--p-max", type=number(0, 1), default=1.0, help="drop tasks above after first pass"
    )
    p.add_argument(
        "--threshold", type=number(above=0, high=1), default=1.0, help="score counted as a success"
    )
    p.add_argument("--in-flight", type=integer(1), default=2, help="unfinished batches at most (2)")
    p.add_argument("--ahead", type=integer(1), default=2, help="batches beyond the trainer (2)")
    p.add_argument(
        "--max-batches",
        type=integer(0),
        default=None,
        help="stop requesting after N (0: fold rewards only, request nothing)",
    )
    p.add_argument("--refill-unusable", action="store_true",
                   help="groups with all rewards equal (or none scored) do not count as ahead: "
                        "pair with the trainer's --skip-equal-groups")  # fmt: skip
    p.add_argument("--no-initial-pass", action="store_true",
                   help="do not give every unseen task one group first")  # fmt: skip
    p.add_argument("--judge-version", default="osworld-metrics-v1")
    p.add_argument("--seed", type=integer(0), default=0)
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    p.add_argument("--bootstrap", default=None,
                   help="bootstrap servers (default: $SCALECUA_BOOTSTRAP or the embedded broker)")  # fmt: skip
    require(p, ("p_min", "p_max"), lambda lo, hi: lo <= hi, "p_min must not exceed p_max")
    p.set_defaults(func=_sample)


def sampler_config(args: argparse.Namespace):  # noqa: ANN201 - SamplerConfig
    """Build a SamplerConfig from parsed arguments."""
    from consumers.sampler.frontier import FrontierConfig
    from consumers.sampler.service import SamplerConfig

    frontier = FrontierConfig(
        mu=args.mu, sigma=args.sigma, gamma=args.gamma, alpha=args.alpha, p_min=args.p_min,
        p_max=args.p_max, threshold=args.threshold, strategy=args.strategy,
    )  # fmt: skip
    return SamplerConfig(
        frontier=frontier, batch_tasks=args.batch, group_size=args.n, max_steps=args.max_steps,
        max_in_flight=args.in_flight, max_ahead=args.ahead, max_batches=args.max_batches,
        initial_pass=not args.no_initial_pass, judge_version=args.judge_version, seed=args.seed,
        refill_unusable=args.refill_unusable,
    )  # fmt: skip


def _sample(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.sampler.service import sampler_service
    from runtime.config import BusSettings

    config = sampler_config(args)
    settings = BusSettings.from_env(args.bootstrap)

    async def main() -> int:
        async with sampler_service(settings, config, metrics_port=args.metrics_port) as runner:
            print(f"sampler: {config.frontier.strategy}, B={config.batch_tasks}, "
                  f"n={config.group_size}", file=sys.stderr)  # fmt: skip
            await runner.run()
        return 0

    return _run(main())
