"""VeriGen workers: one consumer group over `synthesis-requests`, and a run that feeds them.

Run by `scalecua verigen worker` (a worker) and `scalecua verigen run` (a run, hosting workers
itself unless told not to), both in cli/verigen_commands.py.

A worker runs many syntheses at once (each mostly waits for the model) and shares the
probe's desktops among them. It is a stateful processor: a request's offset stays
uncommitted (the low-watermark) until its candidate reached a final stage and its events
were handed to the runner, so a worker killed mid-synthesis loses no request — it is
redelivered and synthesised again under a new candidate id. Start more workers (any host
that reaches the broker, the model and the probe) to scale out.

A run (`scalecua verigen run`) writes N requests, optionally hosts workers itself, and
follows `synthesis` until every request is final; its summary comes from the events alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from producers.verigen.llm import LLMClient, LLMSettings
from producers.verigen.loop import FINAL_STAGES, LoopSettings, Synthesizer
from producers.verigen.probe import Probe, ProbeAPI, ProbeClient
from runtime.bus import EventProducer, Record
from runtime.config import BusSettings
from runtime.jobs import Job, JobBoard
from runtime.processor import Output, Processor
from runtime.runs import new_run_id
from runtime.service import ServiceRunner
from runtime.tables import TopicTable
from topics.events import Event, SynthesisEvent, SynthesisRequest

__all__ = [
    "ProbeSpec",
    "SynthesisWorker",
    "WorkerConfig",
    "follow_run",
    "make_requests",
    "open_probe",
    "publish_requests",
    "verigen_worker",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """How many syntheses a worker runs at once, and its loop settings."""

    concurrency: int = 16  # syntheses at once; each waits on the model most of the time
    group_id: str = "verigen"
    loop: LoopSettings = field(default_factory=LoopSettings)


@dataclass(frozen=True)
class ProbeSpec:
    """Where desktops come from: a pool of our own, or a probe server elsewhere."""

    desktops: int = 2  # an in-process probe over this many desktops...
    url: str | None = None  # ...unless a probe server is given
    token: str = ""


@contextlib.asynccontextmanager
async def open_probe(spec: ProbeSpec) -> AsyncIterator[ProbeAPI]:
    """An in-process probe over its own desktops, or a client of a probe server."""
    if spec.url:
        async with ProbeClient(spec.url, spec.token) as client:
            yield client
    else:
        async with Probe.with_pool(spec.desktops) as probe:
            yield probe


class SynthesisWorker(Processor):
    """Processor that synthesises each request; see the module doc."""

    topics = ["synthesis-requests"]
    dedup = True  # a redelivered copy of a request already synthesised is not redone

    def __init__(
        self, config: WorkerConfig, synthesizer: Synthesizer, worker_id: str | None = None
    ) -> None:
        self.config = config
        self.name = config.group_id
        self.synthesizer = synthesizer
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        synthesizer.worker_id = self.worker_id
        self._board: JobBoard[SynthesisRequest] = JobBoard()
        self._emit = self._board.emit
        self.outcomes: dict[str, int] = dict.fromkeys(FINAL_STAGES, 0)

    async def process(self, record: Record) -> list[Output]:
        """Queue a request; syntheses start in tick() as slots free up."""
        self._board.take(record)
        return []

    def wants(self) -> int:
        """How many more requests the worker takes now (0 pauses fetching)."""
        return max(0, 2 * self.config.concurrency - self._board.busy())

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """The oldest request of `tp` whose candidate is not final and handed over yet."""
        return self._board.low_watermark(tp)

    async def tick(self) -> list[Output]:
        """Start syntheses on free slots; hand over the events written since."""
        while self._board.queue and len(self._board.running) < self.config.concurrency:
            self._board.start(self._synthesize)
        return self._board.drain()

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: requests arrive as records."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Abandon requests of partitions moving elsewhere (their new owner redoes them)."""
        await self._board.abandon(partitions)
        return self._board.drain()

    async def close(self) -> list[Output]:
        """Abandon every synthesis on shutdown (their requests are redone after a restart)."""
        await self._board.abandon()
        return self._board.drain()

    def stats(self) -> dict[str, float]:
        """Running and queued syntheses, and outcomes so far (for /metrics)."""
        out = {"running": len(self._board.running), "queued": len(self._board.queue)}
        return out | {f"candidates_{k}": v for k, v in self.outcomes.items()}

    async def _synthesize(self, job: Job[SynthesisRequest]) -> None:
        try:
            outcome = await self.synthesizer.synthesize(job.request, self._emit)
            self.outcomes[outcome.stage] += 1
        except Exception as exc:  # a bug must not lose the request silently
            log.exception("synthesis of %s failed", job.request.request_id)
            self._emit("synthesis", SynthesisEvent(
                candidate_id=f"{job.request.request_id}@error", request_id=job.request.request_id,
                stage="failed", run_id=job.request.run_id, app=job.request.app, ok=False,
                final=True, reasons=[f"{type(exc).__name__}: {exc}"], worker_id=self.worker_id,
            ))  # fmt: skip
            self.outcomes["failed"] += 1


@contextlib.asynccontextmanager
async def verigen_worker(
    settings: BusSettings,
    config: WorkerConfig,
    llm: LLMSettings,
    probe: ProbeSpec,
    *,
    metrics_port: int | None = None,
) -> AsyncIterator[ServiceRunner]:
    """A worker's model client, probe and runner (unstarted): `await runner.run()`."""
    async with LLMClient(llm) as client, open_probe(probe) as desktops:
        worker = SynthesisWorker(config, Synthesizer(client, desktops, config.loop))
        yield ServiceRunner(worker, settings, metrics_port=metrics_port)


def make_requests(app: str, n: int, *, run_id: str | None = None, hints: list[str] | None = None,
                  **switches: Any) -> list[SynthesisRequest]:  # fmt: skip
    """N requests of one run for one app; hints cycle over the requests."""
    run_id = run_id or new_run_id()
    return [
        SynthesisRequest(
            request_id=f"{run_id}/{i}",
            run_id=run_id,
            app=app,
            hint=hints[i % len(hints)] if hints else "",
            **switches,
        )  # fmt: skip
        for i in range(n)
    ]


async def publish_requests(settings: BusSettings, requests: list[SynthesisRequest]) -> int:
    """Write requests and wait for the broker's acknowledgements."""
    async with EventProducer(settings) as producer:
        futures = [await producer.send("synthesis-requests", r) for r in requests]
        await producer.wait_acks(futures)
    return len(requests)


async def follow_run(
    settings: BusSettings,
    run_id: str,
    request_ids: set[str],
    *,
    on_event: Callable[[SynthesisEvent], None] | None = None,
    timeout_s: float | None = None,
) -> list[SynthesisEvent]:
    """Every `synthesis` event of the run, once each request has a final one (or the timeout)."""
    events: dict[str, SynthesisEvent] = {}
    finals: set[str] = set()
    done = asyncio.Event()

    def seen(event: Event) -> None:
        if not isinstance(event, SynthesisEvent) or event.run_id != run_id:
            return
        if event.dedup_id() in events:
            return
        events[event.dedup_id()] = event
        if on_event is not None:
            on_event(event)
        if event.final and event.request_id in request_ids:
            finals.add(event.request_id)
            if finals >= request_ids:
                done.set()

    table = TopicTable(settings, "synthesis", on_change=seen)
    await table.start()
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await done.wait()
    finally:
        await table.stop()
    return list(events.values())
