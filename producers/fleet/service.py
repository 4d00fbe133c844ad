"""The fleet replayer: many simulated environments answering rollout requests from recordings.

Run by `scalecua fleet` (cli/fleet_commands.py) and `bench/fleet.py`. It joins the
rollout workers' consumer group on `rollout-requests` exactly as a rollout worker does and
answers each request by replaying a recorded trajectory of the same task
(`producers/fleet/replay.py`): one `rollout-step` per recorded turn, paced by a think time
per turn, then the `trajectory-complete` with the recorded artifacts. Its events name it
in their producer id (`fleet-replay:<host>:<pid>`). Everything downstream — judge,
segmenter, sampler, archiver, dashboard, trainer — is the real service, so a fleet of
thousands of environments can be offered to the log without a desktop.

Recordings come from an archived run (`load_recordings`): its steps and completions, with
the screenshots and texts they reference already in the blob store the downstream services
read. Delivery is the rollout worker's: a request stays held (the low-watermark) until its
replay has ended and its events were handed to the runner; a redelivered request is played
again under a new trajectory id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from producers.fleet.replay import (
    Recording,
    Recordings,
    ThinkTime,
    assemble,
    new_trajectory_id,
    replay_complete,
    replay_step,
)
from runtime.archive.layout import table_to_events
from runtime.archive.store import ArchiveStore
from runtime.bus import Record
from runtime.errors import ConfigError
from runtime.jobs import Job, JobBoard
from runtime.processor import Output, Processor
from runtime.replay import read_archive
from topics.events import RolloutRequest, RolloutStep, TrajectoryComplete

__all__ = ["FleetConfig", "FleetReplayer", "load_recordings", "fleet_producer_id"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetConfig:
    """How many environments the fleet simulates and how fast they play."""

    environments: int = 600  # episodes at once (the paper's concurrent environments)
    queued: int | None = None  # requests held beyond the running ones (default: environments)
    think: ThinkTime = field(default_factory=ThinkTime)
    seed: int = 0
    group_id: str = "rollout"  # the rollout workers' group: requests are shared with them


def fleet_producer_id() -> str:
    """Return the producer id the fleet's events carry: `fleet-replay:<host>:<pid>`."""
    return f"fleet-replay:{socket.gethostname()}:{os.getpid()}"


def load_recordings(archive: str, run: str | None = None) -> tuple[list[Recording], str]:
    """Read the whole trajectories of an archived run (default: the newest with any).

    Returns the recordings and the run id; raises ConfigError when there are none.
    """
    store = ArchiveStore(archive)
    runs = [r for r in store.runs("trajectory-complete")] if run is None else [run]
    for candidate in reversed(runs):
        steps = table_to_events(
            RolloutStep, read_archive(archive, "rollout-step", runs=[candidate])
        )
        completions = table_to_events(
            TrajectoryComplete, read_archive(archive, "trajectory-complete", runs=[candidate])
        )
        recordings, left = assemble(steps, completions)  # type: ignore[arg-type]
        if recordings:
            log.info("%d recordings from run %s (left out: %s)", len(recordings), candidate, left)
            return recordings, candidate
    where = f"run {run}" if run else "any run"
    raise ConfigError(f"no whole trajectory to replay in {archive} ({where})")


class FleetReplayer(Processor):
    """Processor that answers rollout requests by replaying recordings; see the module doc."""

    topics = ["rollout-requests"]
    dedup = True  # a redelivered copy of a request already played is not played again

    def __init__(self, config: FleetConfig, recordings: Recordings) -> None:
        if config.environments < 1:
            raise ConfigError(f"a fleet needs at least one environment, not {config.environments}")
        self.config = config
        self.name = config.group_id
        self.recordings = recordings
        self.producer = fleet_producer_id()
        self.worker_id = self.producer
        self._rng = random.Random(config.seed)
        self._board: JobBoard[RolloutRequest] = JobBoard()
        self.episodes = 0
        self.steps = 0
        self.unknown_tasks = 0

    async def process(self, record: Record) -> list[Output]:
        """Queue a request; replays start in tick() as environments free up."""
        self._board.take(record)
        return []

    def wants(self) -> int:
        """How many more requests the fleet can hold now (0 pauses fetching)."""
        queued = self.config.queued if self.config.queued is not None else self.config.environments
        return max(0, self.config.environments + queued - self._board.busy())

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the oldest request of `tp` not yet replayed and handed to the runner."""
        return self._board.low_watermark(tp)

    async def tick(self) -> list[Output]:
        """Start replays on free environments and hand over the events written since."""
        board = self._board
        while board.queue and len(board.running) < self.config.environments:
            board.start(self._play)
        return board.drain()

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: requests arrive as records."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Abandon the requests of partitions moving elsewhere (their new owner replays them)."""
        await self._board.abandon(partitions)
        return self._board.drain()

    async def close(self) -> list[Output]:
        """Abandon every replay on shutdown (their requests are replayed after a restart)."""
        await self._board.abandon()
        return self._board.drain()

    def stats(self) -> dict[str, float]:
        """Environments busy, replays and steps written, requests of tasks with no recording."""
        return {
            "environments_busy": len(self._board.running),
            "requests_queued": len(self._board.queue),
            "episodes": self.episodes,
            "steps_written": self.steps,
            "unknown_tasks": self.unknown_tasks,
            "offered_steps_per_s": self.config.think.offered_steps_per_s(len(self._board.running)),
        }

    async def _play(self, job: Job[RolloutRequest]) -> None:
        request = job.request
        trajectory_id = new_trajectory_id(request)
        recording = self.recordings.pick(request.task_id)
        if recording is None:
            self.unknown_tasks += 1
            self._board.emit("trajectory-complete", self._unplayable(request, trajectory_id))
            return
        started = time.monotonic()
        for step in recording.steps:
            await asyncio.sleep(self.config.think.draw(self._rng))
            event = replay_step(step, request, trajectory_id, self.worker_id, self.producer)
            self._board.emit("rollout-step", event)
            self.steps += 1
        self._board.emit("trajectory-complete", replay_complete(
            recording, request, trajectory_id, self.worker_id, self.producer,
            seconds=time.monotonic() - started,
        ))  # fmt: skip
        self.episodes += 1

    def _unplayable(self, request: RolloutRequest, trajectory_id: str) -> TrajectoryComplete:
        # An environment failure (no score, dropped from its group), as a worker reports an
        # unknown task: the request is answered and the stream goes on.
        return TrajectoryComplete(
            trajectory_id=trajectory_id, status="error", num_steps=0, task_id=request.task_id,
            group_id=request.group_id, group_size=request.group_size,
            sample_index=request.sample_index, request_id=request.trajectory(),
            max_steps=request.max_steps, policy_version=request.policy_version,
            policy_version_last=request.policy_version, worker_id=self.worker_id,
            error=f"the fleet has no recording of task {request.task_id!r}",
            producer_id=self.producer,
        )  # fmt: skip
