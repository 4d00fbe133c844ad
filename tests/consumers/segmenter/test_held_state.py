"""What the segmenter holds, record by record: stragglers of finished or superseded
trajectories never pin the low-watermark, before or after a restart."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from consumers.segmenter.service import Segmenter, SegmenterConfig
from runtime.blobstore import open_blob_store
from runtime.bus import Record
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor
from tests.consumers.segmenter.test_service import DELTA, K, _episode
from topics.events import RolloutStep, TrajectoryComplete

STEPS = TopicPartition("rollout-step", 0)
DONE = TopicPartition("trajectory-complete", 0)


@pytest.fixture(scope="module")
def processor() -> PolicyProcessor:
    """The tiny policy's processor (what the synthetic rollouts were rendered with)."""
    return load_processor(resolve_policy("tiny"))


class _Log:
    """Records with offsets as one partition of each topic would give them."""

    def __init__(self) -> None:
        self.next = {STEPS: 0, DONE: 0}

    def record(self, event: RolloutStep | TrajectoryComplete) -> Record:
        tp = STEPS if isinstance(event, RolloutStep) else DONE
        offset = self.next[tp]
        self.next[tp] += 1
        return Record(tp.topic, tp.partition, offset, None, None, 0, event)


def _segmenter(processor: PolicyProcessor, tmp_path: Path) -> Segmenter:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    return Segmenter(SegmenterConfig(k=K, delta=DELTA), processor, blobs)


async def test_a_superseded_attempts_late_steps_are_dropped_not_held(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    segmenter = _segmenter(processor, tmp_path)
    blobs, rng, log = segmenter.blobs, random.Random(1), _Log()
    partial, _ = _episode(rng, blobs, processor, "g0/0", 0, 3)
    steps, complete = _episode(rng, blobs, processor, "g0/0", 1, 2)
    outputs = []
    for event in [*steps, complete, *partial[:2]]:  # attempt 0's steps arrive last
        outputs += await segmenter.process(log.record(event))
    assert outputs and all(o.event.trajectory_id == complete.trajectory_id for o in outputs)
    assert segmenter.low_watermark(STEPS) is None and segmenter.low_watermark(DONE) is None
    assert segmenter.stats()["superseded"] == 1
    # A second completing attempt loses to the first: the request trains once.
    late_steps, late_complete = _episode(rng, blobs, processor, "g0/0", 2, 1)
    assert await segmenter.process(log.record(late_steps[0])) == []
    assert await segmenter.process(log.record(late_complete)) == []
    assert segmenter.low_watermark(STEPS) is None


async def test_after_a_restart_halves_of_finished_trajectories_are_not_held(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    first = _segmenter(processor, tmp_path)
    blobs, rng, log = first.blobs, random.Random(2), _Log()
    x1_steps, x1_done = _episode(rng, blobs, processor, "g1/0", 0, 2)  # holds rollout-step
    x2_steps, x2_done = _episode(rng, blobs, processor, "g1/1", 0, 2)  # holds the completions
    y_steps, y_done = _episode(rng, blobs, processor, "g2/0", 0, 2)
    z_steps, z_done = _episode(rng, blobs, processor, "g2/1", 0, 2)
    # Y's completion ends up below the commit and its steps above; Z the other way round.
    stream = [*z_steps, x1_steps[0], *y_steps, y_done, x2_done, z_done]
    records = [log.record(e) for e in stream]
    cut = set()
    for r in records:
        cut |= {out.event.trajectory_id for out in await first.process(r)}
    assert cut == {y_done.trajectory_id, z_done.trajectory_id}
    commits = {tp: first.low_watermark(tp) for tp in (STEPS, DONE)}
    assert commits == {STEPS: 2, DONE: 1}

    # Restarted: the runner shows the segmenter what lies before the commit and hands it the
    # rest again; a completion may be re-read before the steps the warm-up remembers.
    second = _segmenter(processor, tmp_path)
    for r in sorted(records, key=lambda r: r.topic != DONE.topic):
        if r.offset < commits[r.tp]:
            second.remember(r)
        else:
            assert await second.process(r) == []
    assert second.stats()["held"] == 2  # X1 and X2, and nothing of Y or Z
    assert {tp: second.low_watermark(tp) for tp in (STEPS, DONE)} == commits
    rest = [*x1_steps[1:], x1_done, *x2_steps]
    again = [out for e in rest for out in await second.process(log.record(e))]
    assert {o.event.trajectory_id for o in again} == {x1_done.trajectory_id, x2_done.trajectory_id}
    assert second.low_watermark(STEPS) is None and second.low_watermark(DONE) is None
