"""The rollout worker: a consumer group on `rollout-requests` playing many episodes at once.

Run by `scalecua rollout` (cli/rollout_commands.py); `scalecua up` and `scalecua eval` run one too.

Requests are queued as they arrive and played as desktops free up (one episode per desktop;
the engine batches their generation requests). The worker is a stateful processor: a
request's offset stays uncommitted (the low-watermark) until its episode has ended and its
events were handed to the runner, so a worker killed mid-episode loses no request — the
request is redelivered, and the new attempt gets a new trajectory id, leaving the partial
one superseded. The runner stops fetching while the queue is full (`wants`).

Setups: a task's setup starts its apps (LibreOffice, Chromium: seconds of CPU each), and a
worker starts every episode at once when it starts or after loading new weights between
episodes; at most `setups` setups run at once (default 4 per core), the others wait their
turn, so 64 Calc desktops on 2 cores no longer all time out waiting for their windows.

Faults: the desktop dying mid-episode retries the request once on a fresh desktop; a second
failure, an engine or blob-store outage, or an unknown task end the request as status
`error` with the reason (an environment failure: no score, dropped from its group).

Weights: the worker follows `policy-updates` (every replica reads it whole, outside the
group) and loads a newer version between episodes (`reload="episode"`: new episodes wait
until the running ones end) or between turns (`reload="turn"`); every step is stamped with
the version that generated it. A version is adopted only once its checkpoint is verified
(`runtime.policy.checkpoint`: a complete trainer checkpoint of exactly that version, under
the run's checkpoint root the worker is configured with, and on shared storage matching
the sha256 manifest the trainer wrote) and loaded, so versions only move forward along what
the trainer wrote. An update that fails either is refused: logged, dead-lettered with the
reason (error type "rejected") and skipped; the worker keeps its version, and tries the
next newest update it has seen. An update older than the version held is explained in a
warning (a trainer resumed from an older checkpoint, or another trainer on the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from consumers.rollout.episode import (
    EpisodeConfig,
    complete_with_error,
    error_result,
    run_episode,
)
from consumers.rollout.players import Player
from runtime.blobstore import BlobStore
from runtime.bus import EventConsumer, Record
from runtime.config import BusSettings, file_fetch_mode
from runtime.envs.desktop.pool import DesktopPool
from runtime.envs.tasks.builtin import POOL_DIR, builtin_ids, load_builtin, reference_solution
from runtime.envs.tasks.catalog import keys_with_id
from runtime.envs.tasks.model import Task
from runtime.errors import BrokerTimeout, ConfigError, DesktopError, StorageError
from runtime.jobs import Job, JobBoard
from runtime.policy.checkpoint import adoptable_checkpoint, default_checkpoint_root
from runtime.policy.observation import IMAGE_MODES, OBSERVE_MODES
from runtime.processor import Output, Processor
from runtime.service import ServiceRunner
from runtime.tables import TopicTable
from topics.events import PolicyUpdate, RolloutRequest, TaskEvent
from topics.registry import DEAD_LETTER

__all__ = [
    "RolloutConfig",
    "RolloutWorker",
    "PolicyFollower",
    "SETUPS_PER_CORE",
    "resolve_task",
    "rollout_service",
]

log = logging.getLogger(__name__)

SETUPS_PER_CORE = 4  # episode setups at once per core, unless RolloutConfig.setups says


@dataclass(frozen=True)
class RolloutConfig:
    """How many episodes a worker runs and how it takes new weights."""

    desktops: int = 2  # episodes at once (one desktop each)
    queued: int | None = None  # requests held beyond the running ones (default: desktops)
    reload: str = "episode"  # "episode": between episodes; "turn": as soon as announced
    retries: int = 1  # fresh-desktop retries of a request whose desktop died
    setups: int | None = None  # episode setups at once (None: SETUPS_PER_CORE per core)
    # The run's checkpoint root (a folder or URL): policy updates pointing anywhere else are
    # refused (None: $SCALECUA_CHECKPOINTS, else $SCALECUA_HOME/checkpoints, where trainers
    # write by default).
    checkpoints: str | None = None
    # Check the sha256 manifest the trainer wrote before loading (None: for a remote root,
    # i.e. shared storage, only; True also for a local folder on a shared filesystem).
    checkpoint_hashes: bool | None = None
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    group_id: str = "rollout"


def resolve_task(
    task_id: str, tasks: TopicTable | None
) -> tuple[Task, list[dict[str, Any]] | None] | None:
    """Return a task (from `tasks`, else the built-in pool) and its reference solution, if any.

    `task_id` is a key of `tasks` (an imported OSWorld task's is `<domain>/<id>`), a built-in
    id, or the JSON `id` of exactly one task on `tasks` (an id two tasks share finds none).
    """
    event = tasks.get(task_id) if tasks is not None else None
    builtin = task_id in _BUILTIN
    if event is None and not builtin and tasks is not None:
        keys = keys_with_id(((e.task_id, e.task) for e in tasks.values()
                             if isinstance(e, TaskEvent)), task_id)  # fmt: skip
        event = tasks.get(keys[0]) if len(keys) == 1 else None
    if isinstance(event, TaskEvent):
        base_dir = POOL_DIR if event.source == "builtin" and builtin else None
        task = Task.from_dict(event.task, base_dir=base_dir, where=task_id)
    elif builtin:
        task = load_builtin(task_id)
    else:
        return None
    solution = task.extra.get("solution")
    if not isinstance(solution, list):
        solution = reference_solution(task_id) if builtin else None
    return task, solution


_BUILTIN = set(builtin_ids())


class RolloutWorker(Processor):
    """Processor that plays rollout requests on a desktop pool; see the module doc."""

    topics = ["rollout-requests"]
    dedup = True  # a redelivered copy of a request already played is not played again

    def __init__(
        self,
        config: RolloutConfig,
        player: Player,
        pool: DesktopPool,
        blobs: BlobStore,
        tasks: TopicTable | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.config = config
        self.name = config.group_id
        self.player = player
        self.pool = pool
        self.blobs = blobs
        self.tasks = tasks
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.checkpoint_root = config.checkpoints or default_checkpoint_root()
        self._board: JobBoard[RolloutRequest] = JobBoard()
        self._setup_slots = asyncio.Semaphore(
            config.setups or SETUPS_PER_CORE * (os.cpu_count() or 1)
        )
        self._emit = self._board.emit
        # Announced versions newer than the player's, not yet tried, oldest first (with the
        # record each came in, for a dead letter if it is refused).
        self._offers: list[tuple[PolicyUpdate, Record | None]] = []
        self._reloading = False
        self.episodes = 0
        self.updates_adopted = 0
        self.updates_rejected = 0

    # -- the processor ------------------------------------------------------------------
    async def process(self, record: Record) -> list[Output]:
        """Queue a request; episodes start in tick() as desktops free up."""
        self._board.take(record)
        return []

    def wants(self) -> int:
        """How many more requests the worker can hold now (0 pauses fetching)."""
        capacity = self.config.desktops + (
            self.config.queued if self.config.queued is not None else self.config.desktops
        )
        return max(0, capacity - self._board.busy())

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the oldest request of `tp` not yet finished and handed to the runner."""
        return self._board.low_watermark(tp)

    async def tick(self) -> list[Output]:
        """Start episodes on free desktops, load announced weights, hand over events."""
        board = self._board
        # "turn": the follower loads as updates come; this only catches an offer that came
        # while it was busy loading another.
        if self._offers and (self.config.reload == "turn" or not board.running):
            await self._adopt()
        while board.queue and len(board.running) < self.config.desktops and not self._waiting():
            board.start(self._play)
        return board.drain()

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: requests arrive as records."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Abandon requests of partitions moving elsewhere (their new owner replays them)."""
        await self._board.abandon(partitions)
        return self._board.drain()

    async def close(self) -> list[Output]:
        """Abandon every episode on shutdown (their requests are replayed after a restart)."""
        await self._board.abandon()
        return self._board.drain()

    def stats(self) -> dict[str, float]:
        """The worker's policy version, episodes played, policy updates taken or refused, and
        its desktops' health (`desktops_healthy` 0 while replacements fail to start)."""
        return {
            "policy_version": self.player.policy_version,
            "episodes": self.episodes,
            "updates_adopted": self.updates_adopted,
            "updates_rejected": self.updates_rejected,
            **self.pool.stats(),
        }

    # -- weights ------------------------------------------------------------------------
    async def announce(self, update: PolicyUpdate, record: Record | None = None) -> None:
        """Take note of newer weights; load them now or between episodes (config.reload).

        `record` is where the update was read, for its dead letter if it is refused.
        """
        await self.announce_all([(update, record)])

    async def announce_all(self, offers: list[tuple[PolicyUpdate, Record | None]]) -> None:
        """Take note of several announcements at once (a catch-up): one load, the newest.

        Versions not newer than the player's are ignored (the trainer announces its newest
        again after a restart).
        """
        current = self.player.policy_version
        for update, _ in offers:
            if update.policy_version < current:
                log.warning("policy version %d from %r ignored: the worker holds version %d, a "
                            "newer one (a trainer resumed from an older checkpoint, or another "
                            "trainer on this log?); versions only move forward",
                            update.policy_version, update.checkpoint_uri, current)  # fmt: skip
        self._offers += [o for o in offers if o[0].policy_version > current]
        self._offers.sort(key=lambda offer: offer[0].policy_version)  # stable: arrival order
        if self._offers and self.config.reload == "turn":
            await self._adopt()
        # "episode": tick() loads it once no episode is running (new ones wait till then).

    def _waiting(self) -> bool:
        return self._reloading or (bool(self._offers) and self.config.reload == "episode")

    async def _adopt(self) -> None:
        """Load the newest offered version whose checkpoint verifies and loads; refuse the
        ones that do not (newest first) and forget what is then no newer than the player."""
        if self._reloading:
            return  # already loading: tick and the follower both call this
        self._reloading = True
        try:
            while self._offers:
                update, record = self._offers.pop()
                if update.policy_version <= self.player.policy_version:
                    continue
                try:
                    log.info("loading policy version %d from %s", update.policy_version,
                             update.checkpoint_uri)  # fmt: skip
                    await self._load_verified(update)
                except Exception as exc:  # a bad announcement must not stop the worker
                    self._refuse(update, record, f"{type(exc).__name__}: {exc}")
                    continue
                self.updates_adopted += 1
                break
            current = self.player.policy_version
            self._offers = [o for o in self._offers if o[0].policy_version > current]
        finally:
            self._reloading = False

    async def _load_verified(self, update: PolicyUpdate) -> None:
        """Load an update's weights from its checkpoint once verified as the run's trainer's."""
        stack = contextlib.ExitStack()
        try:
            checkpoint = adoptable_checkpoint(
                update.checkpoint_uri, update.policy_version, self.checkpoint_root,
                hashes=self.config.checkpoint_hashes,
            )  # fmt: skip
            folder = await asyncio.to_thread(stack.enter_context, checkpoint)
            await self.player.load_weights(folder, update.policy_version)
        finally:
            await asyncio.to_thread(stack.close)  # a remote checkpoint's verified copy

    def _refuse(self, update: PolicyUpdate, record: Record | None, reason: str) -> None:
        """Report a policy update that is not adopted: a log line and a dead letter."""
        self.updates_rejected += 1
        why = (
            f"policy version {update.policy_version} from {update.checkpoint_uri!r} refused: "
            f"{reason}; the worker keeps version {self.player.policy_version}"
        )
        log.error("%s", why)
        if record is not None:
            self._emit(DEAD_LETTER, record.dead_letter("rejected", why, self.name))

    # -- episodes -----------------------------------------------------------------------
    async def _play(self, job: Job[RolloutRequest]) -> None:
        request = job.request
        try:
            await self._play_request(request)
        except Exception as exc:  # a bug must not lose the request silently
            log.exception("episode of %s failed", request.trajectory())
            result = error_result(_trajectory_id(request, 0), f"{type(exc).__name__}: {exc}")
            complete_with_error(self._emit, request, result, attempt=0, worker_id=self.worker_id)
        self.episodes += 1

    async def _play_request(self, request: RolloutRequest) -> None:
        found = resolve_task(request.task_id, self.tasks)
        if found is None:
            result = error_result(_trajectory_id(request, 0), f"unknown task {request.task_id!r}")
            complete_with_error(self._emit, request, result, attempt=0, worker_id=self.worker_id)
            return
        task, solution = found
        failure: Exception | None = None
        for attempt in range(self.config.retries + 1):
            trajectory_id = _trajectory_id(request, attempt)
            try:
                async with self.pool.acquire() as desktop, desktop.controller() as controller:
                    await run_episode(
                        controller, request, task, self.player, self.blobs, self._emit,
                        trajectory_id=trajectory_id, attempt=attempt, config=self.config.episode,
                        worker_id=self.worker_id, solution=solution, setup_slots=self._setup_slots,
                    )  # fmt: skip
                return
            except DesktopError as exc:
                failure = exc
                log.warning("desktop failed during %s (attempt %d): %s", trajectory_id,
                            attempt, exc)  # fmt: skip
            except StorageError as exc:
                result = error_result(trajectory_id, f"blob store unavailable: {exc}")
                complete_with_error(
                    self._emit, request, result, attempt=attempt, worker_id=self.worker_id
                )
                return
        result = error_result(
            trajectory_id, f"the desktop failed on {self.config.retries + 1} attempts: {failure}"
        )
        complete_with_error(self._emit, request, result, attempt=attempt, worker_id=self.worker_id)


def _trajectory_id(request: RolloutRequest, attempt: int) -> str:
    # A fresh token per attempt: a retry, a redelivery or a replay never reuses an id.
    return f"{request.trajectory()}@{attempt}{uuid.uuid4().hex[:7]}"


class PolicyFollower:
    """Reads `policy-updates` whole (outside any group) and passes newer versions on."""

    def __init__(self, settings: BusSettings, worker: RolloutWorker) -> None:
        self.settings = settings
        self.worker = worker
        self._consumer: EventConsumer | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> PolicyFollower:
        """Catch up (loading the newest announced version), then follow in the background."""
        self._consumer = EventConsumer(self.settings, ["policy-updates"], group_id=None)
        await self._consumer.start()
        # Every announcement is offered, not only the newest: when the newest is refused,
        # the one before it is the version to play.
        seen: list[Record] = []
        try:
            async for batch in self._consumer.catch_up("policy-updates", timeout_s=30.0):
                seen += [r for r in batch if isinstance(r.event, PolicyUpdate)]
        except BrokerTimeout as exc:  # follow anyway: a later announcement still reaches us
            log.warning("policy-updates: %s; following from here", exc)
        await self.worker.announce_all([(record.event, record) for record in seen])
        self._task = asyncio.create_task(self._follow())
        return self

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _follow(self) -> None:
        while True:
            try:
                for record in await self._consumer.getmany(timeout_ms=500):
                    if isinstance(record.event, PolicyUpdate):
                        await self.worker.announce(record.event, record)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep following through a broker hiccup
                log.warning("following policy-updates failed: %s", exc)
                await asyncio.sleep(1.0)


@contextlib.asynccontextmanager
async def rollout_service(
    settings: BusSettings,
    config: RolloutConfig,
    player: Player,
    blobs: BlobStore,
    *,
    metrics_port: int | None = None,
) -> AsyncIterator[ServiceRunner]:
    """Set up a worker (desktops, task table, policy follower) and yield its runner, unstarted.

    async with rollout_service(settings, config, player, blobs) as runner:
        await runner.run()
    """
    if config.episode.observe in IMAGE_MODES and (
        player.processor is not None and not player.processor.is_multimodal
    ):
        raise ConfigError(
            "this policy is text-only: observe with --observe a11y or compact (the "
            "accessibility tree and terminal as text)"
        )
    if config.episode.observe not in OBSERVE_MODES:
        raise ConfigError(f"unknown observe mode {config.episode.observe!r}: {OBSERVE_MODES}")
    file_fetch_mode()  # a bad $SCALECUA_FILES_FETCH stops the worker before any setup needs it
    tasks = await TopicTable(settings, "tasks").start()
    try:
        async with DesktopPool(config.desktops) as pool:
            worker = RolloutWorker(config, player, pool, blobs, tasks)
            follower = await PolicyFollower(settings, worker).start()
            try:
                yield ServiceRunner(worker, settings, metrics_port=metrics_port)
            finally:
                await follower.stop()
    finally:
        await tasks.stop()
        await player.close()
