"""`scalecua policy` subcommands: write the tiny default policy, check a policy end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.settings import integer, number

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the policy subcommands to the `scalecua` parser."""
    policy = subparsers.add_parser("policy", help="policy models: build and check")
    sub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)

    init = sub.add_parser(
        "init", help="write the tiny default Qwen2.5-VL policy as an HF model folder"
    )
    init.add_argument("--out", type=Path, required=True, help="folder to write")
    init.add_argument("--seed", type=integer(0), default=0, help="seed of the random weights")
    init.set_defaults(func=_init)

    check = sub.add_parser(
        "check",
        help="play a multi-turn episode and print the generate-vs-recompute logprob difference",
    )
    check.add_argument("policy", help="a model folder, 'tiny' or 'smollm2'")
    check.add_argument(
        "--turns", type=integer(1), default=5, help="episode length (one image per turn)"
    )
    check.add_argument("--max-tokens", type=integer(1), default=16, help="tokens sampled per turn")
    check.add_argument("--temperature", type=number(0), default=1.0)
    check.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    check.add_argument("--device", default="cpu")
    check.add_argument(
        "--tolerance",
        type=number(0),
        default=1e-5,
        help="fp32 bound on the difference (exit 1 above)",
    )
    check.add_argument(
        "--threads", type=integer(0), default=0, help="torch CPU threads (0: torch's default)"
    )
    check.set_defaults(func=_check)


def _init(args: argparse.Namespace) -> int:
    from runtime.policy.model import init_tiny_policy

    path = init_tiny_policy(args.out, seed=args.seed)
    print(json.dumps({"policy": str(path), "seed": args.seed}))
    return 0


def _check(args: argparse.Namespace) -> int:
    import torch

    from runtime.engines.transformers_engine import TransformersEngine
    from runtime.policy.check import check_policy

    if args.threads:
        torch.set_num_threads(args.threads)
    engine = TransformersEngine(args.policy, dtype=args.dtype, device=args.device)
    report = check_policy(
        engine,
        turns=args.turns,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        tolerance=args.tolerance,
    )
    print(json.dumps(report))
    return 1 if report["ok"] is False else 0
