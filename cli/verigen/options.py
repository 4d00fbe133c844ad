"""The settings the `scalecua verigen` flags stand for: the model endpoint, the workers, the
probe and the loop's ablation switches."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["llm_settings", "probe_spec", "switches", "worker_config"]


def llm_settings(args: argparse.Namespace) -> Any:
    """The LLMSettings of `--llm-url`, `--model` and the rest of the model group."""
    from producers.verigen.llm import LLMSettings

    return LLMSettings.from_env(
        args.llm_url, args.model, max_concurrency=args.llm_concurrency, timeout_s=args.llm_timeout,
        max_tokens=args.max_tokens, temperature=args.temperature,
        price_input_per_m=args.price_input, price_output_per_m=args.price_output,
    )  # fmt: skip


def worker_config(args: argparse.Namespace, group: str = "verigen") -> Any:
    """The WorkerConfig of `--workers` and the loop's limits, in consumer group `group`."""
    from producers.verigen.loop import LoopSettings
    from producers.verigen.service import WorkerConfig

    loop = LoopSettings(
        judge_min_score=args.judge_min_score, checker_max_turns=args.checker_turns,
        parse_retries=args.parse_retries, observation_ttl_s=args.observation_ttl,
    )  # fmt: skip
    return WorkerConfig(concurrency=max(1, args.workers), group_id=group, loop=loop)


def probe_spec(args: argparse.Namespace) -> Any:
    """The ProbeSpec of the desktops group: an in-process probe, or a probe server's URL."""
    from producers.verigen.service import ProbeSpec

    token = args.probe_token or os.environ.get("SCALECUA_PROBE_TOKEN", "")
    return ProbeSpec(desktops=args.desktops, url=args.probe_url, token=token)


def switches(args: argparse.Namespace) -> dict[str, Any]:
    """The loop's ablation switches, as synthesis requests carry them."""
    return {
        "max_rounds": max(1, args.rounds),
        "use_validator": not args.no_validator,
        "use_judger": not args.no_judger,
        "use_fixer": not args.no_fixer,
        "use_checker": not args.no_checker,
    }
