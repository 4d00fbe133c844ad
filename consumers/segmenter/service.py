"""The segmenter service: finished trajectories from the log, cut into `segment-ready` records.

It consumes `rollout-step` and `trajectory-complete`. Both are keyed by request id and have
the same partition count, and the group uses range assignment (`co_partitioned`), so a
trajectory's steps and its completion always reach the same member. Cross-topic order is
not guaranteed: a trajectory is cut only once its completion and all `num_steps` steps are
in. The history is rebuilt from the events and the blob store (system prompt and
observation texts; screenshots are not even decoded — rendering needs only their size,
which each step records), then cut by `consumers/segmenter/vcs.py`.

State and restarts: records wait in memory until their trajectory is cut, so the segmenter
reports the oldest offset it still holds per partition (its low-watermark) and the runner
commits only past what was cut and acknowledged. After a crash it re-reads from there and
re-emits identical segments (same ids: `(trajectory, segment index)`), which downstream
drops as duplicates. Superseded attempts — a retried request's partial trajectory, which
never completes — are dropped as soon as another attempt at the same request completes,
and so are their steps that arrive later (the first attempt to complete wins); anything
older than `max_age_s` without a completion is dropped too.

Finished work is remembered (a bounded window of trajectory ids and completed requests), so
a step or completion of a trajectory already cut or superseded is dropped instead of held
forever. After a restart, re-reading from the low-watermark brings back records of such
trajectories whose other half lies before the committed offset; the runner shows the
segmenter those older records (`remember`): anything before the committed offset belongs
to a trajectory that was no longer held, that is, finished.

Safety check: in `vcs` mode with the rollout's own window, each turn's re-rendered prompt
must have the length the rollout worker recorded; a mismatch (a different tokenizer or
window) dead-letters the completion with the reason instead of training on wrong tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from consumers.segmenter.vcs import Segment, TurnRecord, segment_trajectory
from runtime.blobstore import BlobStore
from runtime.bus import Record
from runtime.errors import BlobCorrupt, BlobNotFound, RecordError
from runtime.policy.processor import PolicyProcessor
from runtime.service import Output
from topics.events import RolloutStep, SegmentReady, TrajectoryComplete

__all__ = ["SegmenterConfig", "Segmenter", "segments_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmenterConfig:
    """How trajectories are cut."""

    mode: str = "vcs"  # "vcs", "stepwise" or "trajectory"
    k: int = 5  # observations kept in context (paper: 5 on OSWorld, 8 on ScienceBoard)
    delta: int = 5  # observations dropped at once (paper: 5)
    max_age_s: float = 6 * 3600.0  # drop a trajectory that never completes after this long
    remembered: int = 100_000  # finished trajectories and requests remembered (bounded memory)
    group_id: str = "segmenter"


@dataclass(frozen=True)
class _Size:
    """A screenshot as rendering sees it: only its size."""

    size: tuple[int, int]


@dataclass
class _Trajectory:
    request_id: str
    steps: dict[int, tuple[TopicPartition, int, RolloutStep]] = field(default_factory=dict)
    complete: tuple[TopicPartition, int, TrajectoryComplete] | None = None
    first_seen: float = field(default_factory=time.monotonic)

    def offsets(self) -> list[tuple[TopicPartition, int]]:
        held = [(tp, off) for tp, off, _ in self.steps.values()]
        if self.complete is not None:
            held.append(self.complete[:2])
        return held

    def ready(self) -> bool:
        if self.complete is None:
            return False
        return len(self.steps) >= self.complete[2].num_steps


async def segments_of(
    complete: TrajectoryComplete,
    steps: list[RolloutStep],
    processor: PolicyProcessor,
    blobs: BlobStore,
    config: SegmenterConfig,
    text_cache: dict[str, str] | None = None,
) -> list[SegmentReady]:
    """Rebuild a finished trajectory from its events and cut it into segment-ready events."""
    steps = sorted(steps, key=lambda s: s.step)
    if [s.step for s in steps] != list(range(complete.num_steps)):
        raise RecordError(f"{complete.trajectory_id}: steps {[s.step for s in steps]} are not "
                          f"0..{complete.num_steps - 1}")  # fmt: skip
    if not steps:
        return []
    cache = text_cache if text_cache is not None else {}

    async def text(ref: str | None) -> str:
        if not ref:
            return ""
        if ref not in cache:
            cache[ref] = (await blobs.aget(ref)).decode()
        return cache[ref]

    system = await text(steps[0].system_prompt_ref)
    turns = []
    for s in steps:
        image = (
            _Size(tuple(s.observation_size)) if s.observation_ref and s.observation_size else None
        )
        turns.append(
            TurnRecord(
                screenshot=image,
                observation=await text(s.observation_text_ref),
                response_ids=s.response_ids,
                logprobs=s.response_logprobs,
                image_ref=s.observation_ref if image is not None else None,
                policy_version=s.policy_version,
            )
        )
    segments = await asyncio.to_thread(
        segment_trajectory, system, steps[0].instruction, turns, processor, config.mode,
        config.k, config.delta,
    )  # fmt: skip
    if config.mode == "vcs" and steps[0].context_window == [config.k, config.delta]:
        _check_prompts(complete.trajectory_id, segments, steps)
    sampled = all(len(s.response_logprobs) == len(s.response_ids) for s in steps)
    return [_event(complete, seg, turns, steps, len(segments), config, sampled) for seg in segments]


def _check_prompts(trajectory_id: str, segments: list[Segment], steps: list[RolloutStep]) -> None:
    for seg in segments:
        for t, length in zip(seg.trained_turns, seg.prompt_tokens, strict=True):
            recorded = steps[t].prompt_tokens
            if recorded and recorded != length:
                raise RecordError(
                    f"{trajectory_id}: turn {t} re-renders to {length} prompt tokens but the "
                    f"rollout's prompt had {recorded}: is the segmenter's --policy (tokenizer) "
                    "the rollout's?"
                )


def _event(
    complete: TrajectoryComplete,
    seg: Segment,
    turns: list[TurnRecord],
    steps: list[RolloutStep],
    count: int,
    config: SegmenterConfig,
    sampled: bool,
) -> SegmentReady:
    return SegmentReady(
        trajectory_id=complete.trajectory_id,
        segment_index=seg.index,
        input_ids=seg.ids,
        loss_mask=seg.loss_mask,
        logprobs=seg.logprobs,
        image_refs=[turns[t].image_ref for t in seg.image_turns],
        image_sizes=[list(turns[t].screenshot.size) for t in seg.image_turns],
        task_id=complete.task_id,
        group_id=complete.group_id,
        group_size=complete.group_size,
        sample_index=complete.sample_index,
        request_id=complete.request_id,
        policy_version=min(turns[t].policy_version for t in seg.trained_turns),
        num_segments=count,
        is_last=seg.index == count - 1,
        mode=config.mode,
        temperature=steps[0].temperature,
        top_p=steps[0].top_p,
        trained_tokens=seg.trained_tokens,
        sampled=sampled,
    )


class _Recent:
    """The last `capacity` keys put, each with a value, oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self._items.get(key)

    def put(self, key: str, value: str = "") -> None:
        self._items.setdefault(key, value)
        if len(self._items) > self.capacity:
            del self._items[next(iter(self._items))]

    def __contains__(self, key: str) -> bool:
        return key in self._items


class Segmenter:
    """Stateful processor that turns finished trajectories into segments; see the module doc."""

    topics = ["rollout-step", "trajectory-complete"]
    co_partitioned = True
    dedup = True

    def __init__(
        self, config: SegmenterConfig, processor: PolicyProcessor, blobs: BlobStore
    ) -> None:
        self.config = config
        self.name = config.group_id
        self.processor = processor
        self.blobs = blobs
        self._held: dict[str, _Trajectory] = {}
        self._attempts: dict[str, set[str]] = {}  # request id -> trajectory ids held
        self._texts: dict[str, str] = {}  # blob text cache (system prompts repeat)
        self._finished = _Recent(config.remembered)  # trajectory ids cut or dropped
        self._winners = _Recent(config.remembered)  # request id -> the attempt that completed
        self.cut = 0
        self.superseded = 0
        self.late = 0
        self.expired = 0
        self.segments = 0

    async def process(self, record: Record) -> list[Output]:
        """Hold a step or a completion; cut the trajectory once it is whole."""
        event = record.event
        request = event.request_id or event.trajectory_id
        if event.trajectory_id in self._finished:
            self.late += 1  # cut or dropped already: a re-read after a restart, or a straggler
            return []
        winner = self._winners.get(request)
        if winner is not None and winner != event.trajectory_id:
            self._finish(event.trajectory_id)  # another attempt at the request completed
            self.superseded += 1
            return []
        trajectory = self._held.get(event.trajectory_id)
        if trajectory is None:
            trajectory = self._held[event.trajectory_id] = _Trajectory(request)
            self._attempts.setdefault(request, set()).add(event.trajectory_id)
        if isinstance(event, RolloutStep):
            trajectory.steps[event.step] = (record.tp, record.offset, event)
        else:
            trajectory.complete = (record.tp, record.offset, event)
            self._winners.put(request, event.trajectory_id)
            self._supersede(event)
        if not trajectory.ready():
            return []
        return await self._cut(event.trajectory_id, trajectory)

    async def _cut(self, trajectory_id: str, trajectory: _Trajectory) -> list[Output]:
        complete = trajectory.complete[2]
        self._finish(trajectory_id)
        if complete.status == "error":
            return []  # an environment failure trains nothing
        steps = [s for _, _, s in trajectory.steps.values()]
        try:
            events = await segments_of(
                complete, steps, self.processor, self.blobs, self.config, self._texts
            )
        except (BlobNotFound, BlobCorrupt) as exc:
            raise RecordError(f"{trajectory_id}: {exc}") from exc
        self.cut += 1
        self.segments += len(events)
        return [Output("segment-ready", e) for e in events]

    def _supersede(self, complete: TrajectoryComplete) -> None:
        """Drop other attempts at the same request: they never complete and must not be cut."""
        for other in list(self._attempts.get(complete.request_id or complete.trajectory_id, ())):
            if other != complete.trajectory_id and other in self._held:
                held = self._held[other]
                if held.complete is None:
                    self._finish(other)
                    self.superseded += 1

    def remember(self, record: Record) -> None:
        """Note a record handled before the committed offset: its trajectory is finished."""
        event = record.event
        if not isinstance(event, RolloutStep | TrajectoryComplete):
            return
        # Nothing held was ever committed past, so the trajectory was cut or dropped; a
        # re-read half of it (held now, e.g. its completion) must not wait for the rest.
        self._finish(event.trajectory_id)
        if isinstance(event, TrajectoryComplete):
            self._winners.put(event.request_id or event.trajectory_id, event.trajectory_id)

    def _finish(self, trajectory_id: str) -> None:
        """Forget a trajectory for good: its later records are dropped."""
        self._forget(trajectory_id)
        self._finished.put(trajectory_id)

    def _forget(self, trajectory_id: str) -> None:
        trajectory = self._held.pop(trajectory_id, None)
        if trajectory is None:
            return
        ids = self._attempts.get(trajectory.request_id, set())
        ids.discard(trajectory_id)
        if not ids:
            self._attempts.pop(trajectory.request_id, None)

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Return the oldest offset of `tp` a held (uncut) trajectory still needs."""
        offsets = [off for t in self._held.values() for p, off in t.offsets() if p == tp]
        return min(offsets) if offsets else None

    async def tick(self) -> list[Output]:
        """Drop trajectories that never completed within max_age_s."""
        now = time.monotonic()
        for trajectory_id, t in list(self._held.items()):
            if now - t.first_seen > self.config.max_age_s:
                log.warning("dropping %s: no completion after %.0f s", trajectory_id,
                            now - t.first_seen)  # fmt: skip
                self._finish(trajectory_id)
                self.expired += 1
        return []

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        """Nothing to prepare: the runner re-reads from the committed low-watermark."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> list[Output]:
        """Forget trajectories of partitions moving elsewhere (their new owner re-reads them)."""
        for trajectory_id, t in list(self._held.items()):
            if any(tp in partitions for tp, _ in t.offsets()):
                self._forget(trajectory_id)
        return []

    async def close(self) -> list[Output]:
        """Nothing to persist: uncut trajectories are re-read after a restart."""
        return []

    def stats(self) -> dict[str, Any]:
        """Counters for logs and the dashboard."""
        return {
            "held": len(self._held),
            "cut": self.cut,
            "segments": self.segments,
            "superseded": self.superseded,
            "late": self.late,
            "expired": self.expired,
        }
