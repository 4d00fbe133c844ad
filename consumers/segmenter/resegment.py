"""Re-segmenting recorded trajectories offline, in any mode: replay is what the log is for.

    scalecua resegment --mode stepwise --archive var/archive --run latest

reads every finished trajectory of a run (from the live log or the archive), cuts it with
the given mode and window, and reports items and tokens per item — so the three modes can
be compared on real episodes without running anything again.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from consumers.segmenter.service import SegmenterConfig, segments_of
from runtime.blobstore import BlobStore
from runtime.config import BusSettings
from runtime.policy.processor import PolicyProcessor
from topics.events import RolloutStep, SegmentReady, TrajectoryComplete

__all__ = ["load_trajectories", "resegment", "summarize"]


async def load_trajectories(
    settings: BusSettings | None, archive: str | None, runs: list[str] | None = None
) -> list[tuple[TrajectoryComplete, list[RolloutStep]]]:
    """Return every finished trajectory (not an environment failure) with its steps."""
    steps: dict[str, list[RolloutStep]] = defaultdict(list)
    completes: dict[str, TrajectoryComplete] = {}
    if archive is not None:
        from runtime.archive.layout import table_to_events
        from runtime.archive.store import ArchiveStore
        from runtime.replay import read_archive

        if runs == ["latest"]:
            runs = (await asyncio.to_thread(ArchiveStore(archive).runs))[-1:]

        for name, kind in (
            ("rollout-step", RolloutStep),
            ("trajectory-complete", TrajectoryComplete),
        ):
            table = await asyncio.to_thread(read_archive, archive, name, runs=runs)
            for event in table_to_events(kind, table):
                _add(event, steps, completes)
    else:
        from runtime.replay import collect_live

        for name in ("rollout-step", "trajectory-complete"):
            records, _ = await collect_live(settings, name)
            for record in records:
                _add(record.event, steps, completes)
    return [
        (c, steps[tid])
        for tid, c in completes.items()
        if c.status != "error" and len(steps[tid]) == c.num_steps
    ]


def _add(event: Any, steps: dict, completes: dict) -> None:
    if isinstance(event, RolloutStep):
        steps[event.trajectory_id].append(event)
    elif isinstance(event, TrajectoryComplete):
        completes[event.trajectory_id] = event


async def resegment(
    trajectories: list[tuple[TrajectoryComplete, list[RolloutStep]]],
    processor: PolicyProcessor,
    blobs: BlobStore,
    config: SegmenterConfig,
) -> list[SegmentReady]:
    """Cut every trajectory with the config's mode and window."""
    out: list[SegmentReady] = []
    cache: dict[str, str] = {}
    for complete, steps in trajectories:
        out += await segments_of(complete, steps, processor, blobs, config, cache)
    return out


def summarize(segments: list[SegmentReady], config: SegmenterConfig, trajectories: int) -> dict:
    """Items and tokens per item of a segmentation."""
    tokens = [len(s.input_ids) for s in segments]
    return {
        "mode": config.mode,
        "k": config.k if config.mode == "vcs" else None,
        "delta": config.delta if config.mode == "vcs" else None,
        "trajectories": trajectories,
        "items": len(segments),
        "total_tokens": sum(tokens),
        "trained_tokens": sum(s.trained_tokens for s in segments),
        "mean_tokens_per_item": round(sum(tokens) / len(tokens), 1) if tokens else 0,
        "max_tokens_per_item": max(tokens, default=0),
        "max_images_per_item": max((len(s.image_refs) for s in segments), default=0),
    }
