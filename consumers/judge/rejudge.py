"""Rejudging history: every recorded trajectory scored again with the current metric code.

The rewards go to `reward` under a new judge version; a reward's dedup id is (trajectory,
judge version), so old and new scores sit side by side and can be compared. The source is
the live log (a consumer group per judge version, so a rejudge can resume; or from the
beginning) or the archive of any run (the evaluation manifests live in the blob store, so
history outlives the in-memory broker).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

from consumers.judge.scoring import JudgeConfig, reward_for
from consumers.judge.service import Judge, score_trajectory
from runtime.blobstore import BlobStore
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from runtime.service import ServiceRunner
from topics.events import Reward, TrajectoryComplete

__all__ = ["rejudge_live", "rejudge_archive"]


async def _ends(settings: BusSettings, topic_name: str) -> dict[int, int]:
    """Return each partition's end offset (the fetch high-watermark) right now."""
    async with EventConsumer(settings, [topic_name], group_id=None) as consumer:
        tps = await consumer.read_all(topic_name)
        ends: dict[int, int] = {}
        deadline = time.monotonic() + 15
        while len(ends) < len(tps) and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200, max_records=1)
            for tp in tps:
                if (hw := consumer.raw.highwater(tp)) is not None:
                    ends[tp.partition] = hw
                    consumer.raw.pause(tp)
        return ends


def _summary(rewards: list[Reward], version: str) -> dict[str, Any]:
    scored = [r.score for r in rewards if r.scored]
    return {
        "judge_version": version,
        "rewards": len(rewards),
        "unscored": len(rewards) - len(scored),
        "mean_score": round(sum(scored) / len(scored), 4) if scored else None,
        "statuses": dict(Counter(r.status for r in rewards)),
    }


async def rejudge_live(
    settings: BusSettings,
    config: JudgeConfig,
    blobs: BlobStore,
    *,
    from_beginning: bool = False,
) -> dict[str, Any]:
    """Score every trajectory in the live log not yet rejudged under this version; return a summary.

    Without `from_beginning` the group `rejudge-<version>` resumes where the last rejudge
    under that version stopped; with it, a fresh group reads the whole log.
    """
    group = f"rejudge-{config.judge_version}"
    if from_beginning:
        group += f"-{uuid.uuid4().hex[:6]}"
    judge = _CollectingJudge(
        JudgeConfig(config.judge_version, config.incomplete_reward, group), blobs
    )
    ends = await _ends(settings, "trajectory-complete")
    runner = ServiceRunner(judge, settings, metrics_interval_s=3600)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    try:
        await asyncio.wait_for(runner.ready.wait(), 30)
        while not task.done():
            done = runner.positions()
            if all(done.get(p, 0) >= end for p, end in ends.items() if end > 0):
                break
            await asyncio.sleep(0.2)
    finally:
        runner.stop()
        await asyncio.wait_for(task, 60)
    return _summary(judge.rewards, config.judge_version)


class _CollectingJudge(Judge):
    """A judge that also keeps the rewards it wrote, for the summary."""

    def __init__(self, config: JudgeConfig, blobs: BlobStore) -> None:
        super().__init__(config, blobs)
        self.rewards: list[Reward] = []

    async def process(self, record):  # noqa: ANN001, ANN201 - the Processor signature
        outputs = await super().process(record)
        self.rewards.extend(o.event for o in outputs)
        return outputs


async def rejudge_archive(
    settings: BusSettings,
    config: JudgeConfig,
    blobs: BlobStore,
    archive: str,
    runs: list[str] | None = None,
) -> dict[str, Any]:
    """Score the archived trajectories (of some runs, or all) and write their rewards to the log."""
    from runtime.archive.layout import table_to_events
    from runtime.replay import read_archive

    table = await asyncio.to_thread(read_archive, archive, "trajectory-complete", runs=runs)
    trajectories: list[TrajectoryComplete] = table_to_events(TrajectoryComplete, table)
    rewards = []
    async with EventProducer(settings) as producer:
        futures = []
        for trajectory in trajectories:
            score, reason = await score_trajectory(trajectory, blobs)
            reward = reward_for(trajectory, score, reason, config)
            rewards.append(reward)
            futures.append(await producer.send("reward", reward))
        await producer.wait_acks(futures)
    return _summary(rewards, config.judge_version)
