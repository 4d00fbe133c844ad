"""Requests held uncommitted while long-running work on them (an episode, a synthesis) runs.

A processor whose work outlives `process` (which must return within the group's rebalance
timeout) takes each request record onto a `JobBoard`: queued, then running as an asyncio
task, then finished. The record's offset stays held — the processor's low-watermark — until
the work has ended and the events it wrote were handed to the runner (`drain`), so a worker
killed mid-job loses no request: it is redelivered and done again. Abandoned work (revoked
partitions, a shutdown) is cancelled and its request stays held for whoever reads it next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiokafka import TopicPartition

from runtime.bus import Record
from runtime.processor import Output
from topics.events import Event

__all__ = ["Job", "JobBoard"]

R = TypeVar("R", bound=Event)


@dataclass(eq=False)
class Job(Generic[R]):
    """One request record and the task working on it."""

    tp: TopicPartition
    offset: int
    request: R
    task: asyncio.Task | None = None


class JobBoard(Generic[R]):
    """Held request records, their queue and running tasks, and the events they wrote."""

    def __init__(self) -> None:
        self.queue: deque[Job[R]] = deque()
        self.running: set[Job[R]] = set()
        self._held: dict[TopicPartition, dict[int, Job[R]]] = {}
        self._outbox: list[Output] = []
        self._finished: list[Job[R]] = []

    def take(self, record: Record) -> Job[R]:
        """Hold a request record and queue its job."""
        job = Job(record.tp, record.offset, record.event)
        self._held.setdefault(record.tp, {})[record.offset] = job
        self.queue.append(job)
        return job

    def busy(self) -> int:
        """Return how many jobs are queued or running."""
        return len(self.queue) + len(self.running)

    def start(self, work: Callable[[Job[R]], Awaitable[None]]) -> Job[R]:
        """Run `work` on the oldest queued job as a task; the job finishes when it returns."""
        job = self.queue.popleft()
        job.task = asyncio.create_task(self._run(job, work))
        self.running.add(job)
        return job

    async def _run(self, job: Job[R], work: Callable[[Job[R]], Awaitable[None]]) -> None:
        try:
            await work(job)
        except asyncio.CancelledError:
            self.running.discard(job)  # abandoned: the request stays held, to be redone
            raise
        finally:
            if job in self.running:  # returned or raised: done with, whatever the outcome
                self.running.discard(job)
                self._finished.append(job)

    def emit(self, topic_name: str, event: Event) -> None:
        """Queue an event for the runner (handed over by the next `drain`)."""
        self._outbox.append(Output(topic_name, event))

    def drain(self) -> list[Output]:
        """Hand over queued events; release requests whose work finished before them."""
        out, self._outbox = self._outbox, []
        for job in self._finished:
            self._held.get(job.tp, {}).pop(job.offset, None)
        self._finished = []
        return out

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the oldest held request of `tp`, or None if none is held."""
        held = self._held.get(tp)
        return min(held) if held else None

    async def abandon(self, partitions: set[TopicPartition] | None = None) -> None:
        """Cancel the jobs of `partitions` (every job if None) and wait for them to stop.

        Revoked partitions are forgotten (their new owner reads the requests again); on a
        shutdown every request stays held, so the final commit stops before them.
        """
        tps = list(self._held) if partitions is None else [tp for tp in partitions]
        jobs = [j for tp in tps for j in self._held.get(tp, {}).values()]
        for job in jobs:
            if job in self.queue:
                self.queue.remove(job)
            if job.task is not None and not job.task.done():
                job.task.cancel()
        for job in jobs:
            if job.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await job.task
            self.running.discard(job)
        if partitions is not None:
            for tp in partitions:
                self._held.pop(tp, None)
