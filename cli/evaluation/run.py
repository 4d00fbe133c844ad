"""Evaluate a policy: play each task once, greedily, through the rollout worker and the judge.

Or, with `samples` > 1 and a temperature, play each task that many times as one group of
sampled rollouts (as RL samples them), for pass@k (cli/evaluation/stats.py).

The same episode loop and judge as training, on a log of its own: tasks and one request per
task go to an embedded broker started for the evaluation, a rollout worker plays them with
temperature 0 on real desktops, the judge scores them, and the rewards come back as
outcomes. Never a training run's log: there its segmenter and trainer (SFT keeps successful
episodes) would learn from the evaluation's episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from shlex import quote

from cli.evaluation.stats import Outcome
from runtime.config import BusSettings, home_dir
from runtime.errors import ConfigError
from runtime.service_logs import ServiceLogs
from topics.events import Reward, RolloutRequest, TaskEvent

__all__ = ["EvalConfig", "evaluate_policy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalConfig:
    """How the evaluation plays: the policy, its desktops and its limits."""

    policy: str  # tiny | smollm2 | a model folder
    desktops: int = 2
    max_steps: int = 5
    max_tokens: int = 96
    observe: str | None = None  # default: the policy card's, else a11y (text-only) / screenshot
    image_max_side: int = 1280
    context: tuple[int, int] = (5, 5)
    judge_version: str = "osworld-metrics-v1"
    incomplete_reward: float = -0.2
    timeout_s: float = 3600.0
    samples: int = 1  # rollouts per task (one group): > 1 needs a temperature
    temperature: float = 0.0  # 0: greedy

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ConfigError(f"samples must be at least 1, not {self.samples}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, not {self.temperature}")
        if self.samples > 1 and self.temperature == 0:
            raise ConfigError(
                f"{self.samples} samples per task at temperature 0 would play the same "
                "episode each time: give a temperature > 0"
            )


async def _publish(settings: BusSettings, events: list[TaskEvent]) -> int:
    from producers.task_import import publish_tasks

    return await publish_tasks(settings, events)


async def evaluate_policy(
    config: EvalConfig,
    events: list[TaskEvent],
    family_of: Callable[[str], str],
    *,
    progress: Callable[[str], None] | None = None,
    logs: ServiceLogs | None = None,
) -> list[Outcome]:
    """Play every task `samples` times (once greedily by default); the judged outcomes.

    `logs`, when given, gets a folder of the evaluation's own for the services' log files
    (`$SCALECUA_HOME/evals/<time>-<tag>/logs`)."""
    from consumers.judge.service import Judge, JudgeConfig
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player, default_observe
    from consumers.rollout.service import RolloutConfig, rollout_service
    from producers.rollout_requests import publish_requests
    from runtime.blobstore import open_blob_store
    from runtime.broker import private_log
    from runtime.engines.base import SamplingParams
    from runtime.service import ServiceRunner
    from runtime.service_logs import as_service

    say = progress or (lambda _msg: None)
    sampling = SamplingParams(temperature=config.temperature, max_tokens=config.max_tokens,
                              stop=("</tool_call>",))  # fmt: skip
    player = build_player(config.policy, sampling=sampling, context_window=config.context)
    observe = config.observe or default_observe(config.policy, player)
    tag = uuid.uuid4().hex[:6]
    requests = _requests(config, events, tag)
    blobs = open_blob_store()
    rollout_config = RolloutConfig(
        desktops=config.desktops, group_id="rollout",
        episode=EpisodeConfig(observe=observe, image_max_side=config.image_max_side),
    )  # fmt: skip
    # The log is the evaluation's own: the services keep their usual names (and log files).
    judge_config = JudgeConfig(config.judge_version, config.incomplete_reward, "judge")
    if logs is not None:
        _open_logs(logs, tag, say)
    async with private_log() as settings:
        published = await _publish(settings, events)
        how = f"{config.samples} samples each at temperature {config.temperature}"
        how = "greedy" if config.temperature == 0 else how
        say(f"{published} tasks on a log of its own, policy "
            f"{config.policy} {how} on {config.desktops} desktops, observing {observe}")  # fmt: skip
        judge = ServiceRunner(Judge(judge_config, blobs), settings, metrics_interval_s=3600)
        tasks = [asyncio.create_task(judge.run(install_signal_handlers=False))]
        try:
            async with contextlib.AsyncExitStack() as stack:
                with as_service("rollout"):  # its desktops and tasks log to rollout.log
                    worker = await stack.enter_async_context(
                        rollout_service(settings, rollout_config, player, blobs)
                    )
                    tasks.append(asyncio.create_task(worker.run(install_signal_handlers=False)))
                await publish_requests(settings, requests)
                rewards = await asyncio.wait_for(
                    _rewards(settings, requests, config.judge_version, say), config.timeout_s
                )
                worker.stop()
        finally:
            judge.stop()
            for task in tasks:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 60)
    return [
        Outcome(
            r.task_id,
            family_of(r.task_id),
            r.score if r.scored else None,
            r.status,
            r.reason,
            r.sample_index,
        )  # fmt: skip
        for r in rewards
    ]


def _requests(config: EvalConfig, events: list[TaskEvent], tag: str) -> list[RolloutRequest]:
    """One request per task and sample, each task's samples one group."""
    return [
        RolloutRequest(
            task_id=e.task_id,
            group_id=f"eval-{tag}-{e.task_id}",
            group_size=config.samples,
            sample_index=i,
            policy_version=0,
            max_steps=config.max_steps,
        )  # fmt: skip
        for e in events
        for i in range(config.samples)
    ]


def _open_logs(logs: ServiceLogs, tag: str, say: Callable[[str], None]) -> None:
    """The services' log files in a folder of the evaluation's own, and where it is."""
    folder = home_dir() / "evals" / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{tag}"
    logs.open(folder / "logs")
    say(f"service logs: {quote(str(folder / 'logs'))}/<service>.log (warnings and errors "
        "also here)")  # fmt: skip


async def _rewards(
    settings: BusSettings, requests: list[RolloutRequest], judge_version: str,
    say: Callable[[str], None],
) -> list[Reward]:  # fmt: skip
    """Follow `reward` from the start until every request has one of this judge version."""
    from runtime.bus import EventConsumer

    wanted = {r.trajectory() for r in requests}
    out: list[Reward] = []
    started = time.monotonic()
    async with EventConsumer(settings, ["reward"], group_id=None) as consumer:
        await consumer.read_all("reward")
        while wanted:
            for record in await consumer.getmany(timeout_ms=500):
                reward = record.event
                if not isinstance(reward, Reward) or reward.judge_version != judge_version:
                    continue
                if reward.request_id in wanted:
                    wanted.discard(reward.request_id)
                    out.append(reward)
                    if len(out) % 10 == 0 or not wanted:
                        say(f"{len(out)}/{len(requests)} played, "
                            f"{time.monotonic() - started:.0f}s")  # fmt: skip
    return out
