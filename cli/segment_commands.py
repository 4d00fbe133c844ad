"""`scalecua segment | resegment`: Visual Context Segmentation as a service, and offline."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from cli.bus_commands import add_bootstrap
from cli.settings import PORT, integer, number

if TYPE_CHECKING:
    from consumers.segmenter.service import SegmenterConfig

__all__ = ["register", "segmenter_config"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the segmenter commands to the `scalecua` parser."""
    p = subparsers.add_parser(
        "segment",
        help="the segmenter: rollout-step + trajectory-complete -> segment-ready",
        description=(
            "Join the `segmenter` group on rollout-step and trajectory-complete and cut every "
            "finished trajectory into training segments (Visual Context Segmentation)."
        ),
    )
    _segment_args(p)
    p.add_argument(
        "--idle-timeout", type=number(above=0), default=900.0,
        help="dead-letter an uncut trajectory after S seconds with no record of it (900; keep "
        "it well above the rollout's --generate-timeout)",
    )  # fmt: skip
    p.add_argument(
        "--missing-grace", type=number(above=0), default=60.0,
        help="dead-letter a finished trajectory whose steps are short after S seconds with "
        "nothing left to read before its completion (60)",
    )  # fmt: skip
    p.add_argument("--group", default="segmenter", help="consumer group (default segmenter)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    add_bootstrap(p)
    p.set_defaults(func=_segment)

    p = subparsers.add_parser(
        "resegment",
        help="cut recorded trajectories again in any mode and report items and tokens per item",
    )
    _segment_args(p)
    p.add_argument("--archive", default=None, help="read this archive instead of the live log")
    p.add_argument("--run", default=None, help="with --archive: only this run")
    add_bootstrap(p)
    p.set_defaults(func=_resegment)


def _segment_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode", default="vcs", choices=("vcs", "stepwise", "trajectory"),
        help="vcs (the paper's), stepwise (one item per turn) or trajectory (one item)",
    )  # fmt: skip
    p.add_argument(
        "--k", type=integer(1), default=5, help="observations kept in context (paper: 5)"
    )
    p.add_argument(
        "--delta", type=integer(1), default=5, help="observations dropped at once (paper: 5)"
    )
    p.add_argument(
        "--policy", default="tiny",
        help="whose tokenizer/processor rendered the rollouts (tiny | smollm2 | a model folder)",
    )  # fmt: skip


def segmenter_config(
    args: argparse.Namespace, k: int | None = None, delta: int | None = None
) -> SegmenterConfig:
    """The segmenter's config from its command's settings (`k`, `delta` override the window)."""
    from consumers.segmenter.service import SegmenterConfig

    return SegmenterConfig(
        mode=args.mode,
        k=args.k if k is None else k,
        delta=args.delta if delta is None else delta,
        idle_timeout_s=getattr(args, "idle_timeout", SegmenterConfig.idle_timeout_s),
        missing_grace_s=getattr(args, "missing_grace", SegmenterConfig.missing_grace_s),
        group_id=getattr(args, "group", "segmenter"),
    )


def _processor(policy: str):  # noqa: ANN202
    from runtime.policy.model import resolve_policy
    from runtime.policy.processor import load_processor

    return load_processor(resolve_policy(policy))


def _segment(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.segmenter.service import Segmenter
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings
    from runtime.service import ServiceRunner

    config = segmenter_config(args)
    segmenter = Segmenter(config, _processor(args.policy), open_blob_store())
    runner = ServiceRunner(
        segmenter, BusSettings.from_env(args.bootstrap), metrics_port=args.metrics_port
    )
    print(f"segmenter: {config.mode} (K={config.k}, delta={config.delta}), policy {args.policy}",
          file=sys.stderr)  # fmt: skip
    return _run(runner.run())


def _resegment(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.segmenter.resegment import load_trajectories, resegment, summarize
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings

    config = segmenter_config(args)
    processor = _processor(args.policy)
    settings = None if args.archive else BusSettings.from_env(args.bootstrap)
    summary: dict = {}

    async def main() -> int:
        runs = [args.run] if args.run else None
        trajectories = await load_trajectories(settings, args.archive, runs)
        segments = await resegment(trajectories, processor, open_blob_store(), config)
        summary.update(summarize(segments, config, len(trajectories)))
        return 0

    code = _run(main())
    print(json.dumps(summary))
    return code
