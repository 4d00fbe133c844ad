"""`scalecua verigen run` and `worker`: publish synthesis requests, host syntheses, and
follow `synthesis` until every request of a run is final."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli.verigen.options import llm_settings, probe_spec, switches, worker_config

__all__ = ["run_main", "serve_worker", "synthesize", "write_accepted"]


async def run_main(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    """Synthesise `--n` candidates for `--app`; fill `summary` with the run's figures."""
    from producers.verigen.service import make_requests
    from producers.verigen.summary import summarize
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)
    requests = make_requests(args.app, args.n, hints=args.hint, **switches(args))
    run_id = requests[0].run_id
    print(f"verigen run {run_id}: {args.n} {args.app} candidates, model {args.model}",
          file=sys.stderr)  # fmt: skip
    events, wall, missing = await synthesize(args, settings, requests)
    summary.update(run_id=run_id, app=args.app, model=args.model, **summarize(events, wall))
    return 0 if not missing else 1


async def synthesize(
    args: argparse.Namespace, settings: Any, requests: list[Any] | asyncio.Task
) -> tuple[list[Any], float, int]:
    """Publish requests, host --workers syntheses, follow `synthesis` until every request is
    final: (the run's events, wall seconds, requests left without a final stage). `requests`
    may still be in the making (a task): the workers' desktops start meanwhile."""
    from producers.verigen.service import follow_run, publish_requests, verigen_worker

    llm = llm_settings(args)
    started = time.monotonic()
    ids: set[str] = set()
    async with contextlib.AsyncExitStack() as stack:
        runner = None
        if args.workers > 0:
            runner = await stack.enter_async_context(
                verigen_worker(settings, worker_config(args), llm, probe_spec(args))
            )
            serving = asyncio.create_task(runner.run(install_signal_handlers=False))
        if isinstance(requests, asyncio.Task):
            requests = await requests
        if not requests:
            if runner is not None:
                runner.stop()
                await serving
            return [], time.monotonic() - started, 0
        ids.update(r.request_id for r in requests)
        follower = asyncio.create_task(
            follow_run(settings, requests[0].run_id, ids, on_event=_progress(ids),
                       timeout_s=args.timeout)
        )  # fmt: skip
        await publish_requests(settings, requests)
        if runner is not None:
            await _stop_when_followed(runner, serving, follower)
        events = await follower
    wall = time.monotonic() - started
    if args.out is not None:
        write_accepted(args.out, events)
    missing = len(ids - {e.request_id for e in events if e.final})
    if missing:
        print(f"{missing} requests had no final stage in time", file=sys.stderr)
    return events, wall, missing


def _progress(ids: set[str]) -> Callable[[Any], None]:
    """A callback printing one line per request of `ids` that reaches its final stage."""
    finals = 0

    def progress(event: Any) -> None:
        nonlocal finals
        if event.final and event.request_id in ids:
            finals += 1
            why = f" {event.task_id}" if event.task_id else f": {'; '.join(event.reasons)[:200]}"
            print(f"[{finals}/{len(ids)}] {event.request_id} {event.stage}{why}",
                  file=sys.stderr, flush=True)  # fmt: skip

    return progress


async def _stop_when_followed(runner: Any, serving: asyncio.Task, follower: asyncio.Task) -> None:
    """Wait for the run to be followed to its end, then stop the hosted worker.

    The worker stopping first (a halted service) is reported rather than waited on.
    """
    from runtime.errors import ServiceHalted

    await asyncio.wait({follower, serving}, return_when=asyncio.FIRST_COMPLETED)
    if serving.done():  # the worker stopped (a halted service): report, do not hang
        follower.cancel()
        serving.result()
        raise ServiceHalted("the run's worker stopped before every request was final")
    runner.stop()
    await serving


def write_accepted(out: Path, events: list[Any]) -> None:
    """Write each accepted task (and its solution, if any) as JSON files under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for event in events:
        if event.stage != "accepted" or not event.candidate:
            continue
        task = event.candidate
        (out / f"{task['id']}.json").write_text(json.dumps(task, indent=1, ensure_ascii=False))
        if task.get("solution"):
            (out / f"{task['id']}.solution.json").write_text(json.dumps(task["solution"], indent=1))


async def serve_worker(args: argparse.Namespace) -> int:
    """Be a member of the worker group until stopped."""
    from producers.verigen.service import verigen_worker
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)
    async with verigen_worker(
        settings, worker_config(args, args.group), llm_settings(args), probe_spec(args),
        metrics_port=args.metrics_port,
    ) as runner:  # fmt: skip
        print(f"verigen worker: {args.workers} syntheses at once, model {args.model}",
              file=sys.stderr)  # fmt: skip
        await runner.run()
    return 0
