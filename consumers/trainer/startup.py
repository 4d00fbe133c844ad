"""Starting a trainer service: its role on the log, its process group, its newest checkpoint
and its runner (the trainer itself is consumers/trainer/service.py).

    async with trainer_service(settings, TrainerConfig(batch_groups=2)) as runner:
        await runner.run()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

from consumers.trainer.backends import TrainerBackend, make_backend
from consumers.trainer.checkpoints import CheckpointStore, default_checkpoint_root
from consumers.trainer.ranks import RankGroup, RankSpec, torchrun_rank
from consumers.trainer.service import Trainer, TrainerConfig
from runtime.blobstore import BlobStore, open_blob_store
from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.errors import ConfigError
from runtime.leader import RoleLease
from runtime.service import ServiceRunner
from topics.events import PolicyUpdate

__all__ = ["trainer_service", "newest_announced"]


async def newest_announced(settings: BusSettings, timeout_s: float = 30.0) -> int:
    """The highest policy version on `policy-updates` (0 if none), read to the end."""
    newest = 0
    async with EventConsumer(settings, ["policy-updates"], group_id=None) as consumer:
        async for batch in consumer.catch_up("policy-updates", timeout_s=timeout_s):
            for record in batch:
                if isinstance(record.event, PolicyUpdate):
                    newest = max(newest, record.event.policy_version)
    return newest


@contextlib.asynccontextmanager
async def trainer_service(
    settings: BusSettings,
    config: TrainerConfig,
    *,
    backend_options: dict[str, Any] | None = None,
    blobs: BlobStore | None = None,
    metrics_port: int | None = None,
    metrics_interval_s: float = 30.0,
    nproc: int = 1,
    rank_threads: int = 0,
) -> AsyncIterator[ServiceRunner]:
    """Load the trainer (newest checkpoint or base policy) and yield its runner, unstarted.

    With `nproc` > 1 this process is rank 0 of a process group it starts (ranks 1..nproc-1
    as child processes, each with `rank_threads` torch threads); under torchrun it is rank
    0 of torchrun's group. The group ends when the context does.

    One trainer writes per consumer group: a second one on the same log and group is refused
    (ConfigError naming the one that is active) before it loads anything.

    async with trainer_service(settings, TrainerConfig(batch_groups=2)) as runner:
        await runner.run()
    """
    from runtime.runs import ensure_run

    run_id = (await ensure_run(settings)).run_id
    root = config.checkpoints or default_checkpoint_root()
    options = dict(backend_options or {})
    if config.grpo.entropy_coef != 0.0:
        options.setdefault("entropy_grad", True)
    blobs = blobs or open_blob_store()
    group: RankGroup | None = None
    launched = torchrun_rank()
    lease = await _single_writer(settings, config.group_id, root)
    try:
        if nproc > 1 or (launched is not None and launched[1] > 1):
            spec = RankSpec(config.backend, options, blobs=blobs.url, threads=rank_threads)
            if launched is not None:
                group = await asyncio.to_thread(RankGroup.join, spec, config.rank_deadline)
            else:
                # here: the ranks die with this thread
                group = RankGroup.spawn(nproc, spec, config.rank_deadline)
                await asyncio.to_thread(group.connect)
            backend: TrainerBackend = await asyncio.to_thread(group.backend)
        else:
            backend = make_backend(config.backend, **options)
        store = CheckpointStore(root)
        trainer = Trainer(config, backend, blobs, store, run_id)
        trainer.role_lost = lease.lost
        await asyncio.to_thread(trainer.load)
        if trainer.version > 0 and await newest_announced(settings) >= trainer.version:
            trainer.announced()  # only a crash before the announcement's ack needs it again
        runner = ServiceRunner(
            trainer, settings, group_id=config.group_id, metrics_port=metrics_port,
            metrics_interval_s=metrics_interval_s,
        )  # fmt: skip
        trainer.on_done = runner.stop
        yield runner
    finally:
        try:
            if group is not None:
                await asyncio.to_thread(group.close)
        finally:
            await lease.release()


async def _single_writer(settings: BusSettings, group_id: str, root: str) -> RoleLease:
    """Hold the trainer's role for `group_id` on this log, or refuse naming who holds it.

    Two trainers in one consumer group would split its partitions, and every group would
    expire half-read on both; the role is elected on the log as the sampler's is
    (runtime/leader.py), and a trainer that is not elected does not start.
    """
    who = f"{socket.gethostname()} pid {os.getpid()}, checkpoints in {root}"
    lease = await RoleLease(settings, group_id, who=who).join()
    if not lease.held:
        await lease.release()
        raise ConfigError(
            f"another trainer of group {group_id!r} is active on this log: {lease.holder}. One "
            "trainer writes per group (it owns the optimizer and the checkpoints): stop it "
            "first, or start this one with another --group and its own --checkpoints"
        )
    return lease
