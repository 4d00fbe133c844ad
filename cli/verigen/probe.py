"""`scalecua verigen validate` and `probe`: the commands that use desktops through the
shared interaction probe directly."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

__all__ = ["serve_probe", "validate_main"]


async def validate_main(args: argparse.Namespace) -> int:
    """Run the rule validator on a candidate and print its verdict as one JSON line."""
    from producers.verigen.probe import Probe, ProbeError
    from producers.verigen.validator import RuleValidator
    from runtime.errors import TaskError

    def verdict(accepted: bool, reasons: list[str], **more: Any) -> int:
        print(json.dumps({"accepted": accepted, "reasons": reasons, **more}), flush=True)
        return 0 if accepted else 1

    try:
        raw = json.loads(args.candidate.read_text(encoding="utf-8"))
        solution = None
        if args.solution is not None:
            solution = json.loads(args.solution.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return verdict(False, [f"cannot read the input: {exc}"])
    validator = RuleValidator(None)
    _, static = validator.check_static(raw, solution)
    try:
        if static.reasons:  # rejected without a desktop
            report = await validator.validate(raw, solution)
        else:
            async with Probe.with_pool(1) as probe:
                report = await RuleValidator(probe).validate(raw, solution)
    except (ProbeError, TaskError) as exc:
        return verdict(False, [f"the candidate could not be run on a desktop: {exc}"])
    more = report.to_dict()
    del more["accepted"]
    return verdict(report.accepted, more.pop("reasons"), **more)


async def serve_probe(args: argparse.Namespace) -> int:
    """Serve a probe over `--desktops` desktops until SIGINT or SIGTERM; print its URL first."""
    import signal

    from producers.verigen.probe import Probe, ProbeServer

    async with (
        Probe.with_pool(args.desktops) as probe,
        ProbeServer(probe, token=args.token, port=args.port) as server,
    ):
        print(json.dumps({"url": server.url, "token": server.token,
                          "desktops": args.desktops}), flush=True)  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    return 0
