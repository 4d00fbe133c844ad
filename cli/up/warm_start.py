"""A warm start through the log: scripted episodes, judged and segmented, then SFT steps.

The rollout worker plays requested tasks with the scripted policy (their reference
solutions, rendered with the policy's own tokenizer and prompt), the judge scores them, the
segmenter cuts them and a trainer takes supervised steps on the successes. It uses the
loop's topics and services and leaves its checkpoints where the RL trainer will resume: the
RL trainer then continues the same checkpoint lineage (its next version follows the last
SFT one) and skips every warm-start record by the restart point those checkpoints carry.

    result = await warm_start(settings, plan, start=start_runner, stop=stop_runner)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.bus import EventConsumer, TopicPartition
from runtime.config import BusSettings

__all__ = [
    "WarmStartPlan",
    "WarmStartResult",
    "warm_start",
    "commit_group_at_end",
    "StartRunner",
    "StopRunner",
    "policy_with_card",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartPlan:
    """How much to warm up, on what, with which policy."""

    policy: str  # the policy folder RL trains (its tokenizer renders the scripted turns)
    checkpoints: str  # the trainer's checkpoint root, shared with the RL trainer
    task_ids: list[str]  # tasks the scripted policy plays, in turn
    steps: int = 2  # SFT steps
    episodes_per_step: int = 8  # scripted episodes (groups of one) per step
    desktops: int = 2
    max_steps: int = 5  # turns per episode
    observe: str = "compact"
    context: tuple[int, int] = (5, 5)
    lr: float = 2e-5
    micro_batch_tokens: int = 8192
    timeout_s: float = 900.0  # give up waiting for the steps after this long
    backend_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class WarmStartResult:
    """What the warm start did."""

    steps: int  # SFT steps taken
    episodes: int  # scripted episodes requested
    seconds: float
    checkpoint: str | None  # the last SFT checkpoint (None if no step was taken)


StartRunner = Callable[[str, Any], None]
StopRunner = Callable[[str], Awaitable[None]]


async def warm_start(
    settings: BusSettings,
    plan: WarmStartPlan,
    blobs: Any,
    *,
    start: StartRunner,
    stop: StopRunner,
    trainer_group: str = "trainer",
) -> WarmStartResult:
    """Play scripted episodes and take SFT steps on them; the judge and segmenter must run.

    `start(name, runner)` runs a service runner in the caller's stack, `stop(name)` stops it:
    the caller owns every service's lifetime (and its logs).
    """
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player
    from consumers.rollout.service import RolloutConfig, rollout_service
    from consumers.trainer.batching import PlanConfig
    from consumers.trainer.grpo import GRPOConfig
    from consumers.trainer.service import TrainerConfig
    from consumers.trainer.startup import trainer_service
    from producers.rollout_requests import publish_requests
    from runtime.service_logs import as_service
    from topics.events import RolloutRequest

    started = time.monotonic()
    wanted = plan.steps * plan.episodes_per_step
    sft = TrainerConfig(
        policy=plan.policy, checkpoints=plan.checkpoints, batch_groups=plan.episodes_per_step,
        max_steps=plan.steps, micro_batch_tokens=plan.micro_batch_tokens, keep_states=0,
        group_id=trainer_group, plan=PlanConfig(objective="sft", sft_threshold=1.0),
        grpo=GRPOConfig(kl_coef=0.0),
    )  # fmt: skip
    options = {**plan.backend_options, "lr": plan.lr}
    async with contextlib.AsyncExitStack() as stack:
        with as_service("warm-trainer"):
            trainer = await stack.enter_async_context(
                trainer_service(
                    settings, sft, backend_options=options, blobs=blobs, metrics_interval_s=600
                )  # fmt: skip
            )
        done_before = trainer.processor.steps
        start("warm-trainer", trainer)
        scripted = build_player("scripted", tokenizer=plan.policy, context_window=plan.context)
        config = RolloutConfig(desktops=plan.desktops, episode=EpisodeConfig(observe=plan.observe),
                               checkpoints=plan.checkpoints)  # fmt: skip
        with as_service("warm-rollout"):
            worker = await stack.enter_async_context(
                rollout_service(settings, config, scripted, blobs)
            )
        start("warm-rollout", worker)
        todo = max(0, plan.steps - done_before) * plan.episodes_per_step
        stamp = int(time.time())
        await publish_requests(settings, [
            RolloutRequest(task_id=plan.task_ids[i % len(plan.task_ids)],
                           group_id=f"warm-{stamp}-{i:04d}", group_size=1, sample_index=0,
                           policy_version=0, max_steps=plan.max_steps)
            for i in range(todo)
        ])  # fmt: skip
        await _until_steps(trainer.processor, todo, plan.timeout_s)
        await stop("warm-rollout")
        await stop("warm-trainer")
    store_latest = trainer.processor.store.latest()
    return WarmStartResult(
        steps=trainer.processor.steps, episodes=wanted, seconds=time.monotonic() - started,
        checkpoint=store_latest.uri if store_latest else None,
    )  # fmt: skip


async def _until_steps(trainer: Any, wanted: int, timeout_s: float) -> bool:
    """Wait for the trainer's SFT steps; give up once every reward is in and no step follows."""
    deadline = time.monotonic() + timeout_s
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if trainer.finished_steps():
            return True
        stats = trainer.stats()
        if stats.get("rewards_read", 0) >= wanted and not stats["step_running"]:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 30:
                return False
        await asyncio.sleep(0.2)
    return False


async def commit_group_at_end(
    settings: BusSettings, group_id: str, topics: list[str]
) -> dict[TopicPartition, int]:
    """Commit `group_id`'s positions at the current end of `topics`; return them.

    A consumer group started afterwards reads only what is written from now on (the RL
    sampler must not fold the warm start's scripted episodes into its pass rates).
    """
    ends: dict[TopicPartition, int] = {}
    async with EventConsumer(settings, list(topics), group_id=None) as reader:
        async for _ in reader.catch_up(*topics):
            pass
        for tp in reader.raw.assignment():
            ends[tp] = await reader.raw.position(tp)
    committer = EventConsumer(settings, [], group_id=group_id)
    await committer.start()
    try:
        committer.raw.assign(list(ends))  # a manual assignment commits outside any generation
        await committer.commit(ends)
    finally:
        await committer.stop()
    return ends


def policy_with_card(base: Path, folder: Path, prompt_variant: str, observe: str) -> Path:
    """A model folder that is `base` (linked file by file) with a card for prompt and view."""
    from runtime.policy.card import PolicyCard, write_card

    folder.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        link = folder / f.name
        if f.is_file() and f.name != "agent.json" and not link.exists():
            link.symlink_to(f.resolve())
    write_card(folder, PolicyCard(prompt_variant=prompt_variant, observe=observe))
    return folder
