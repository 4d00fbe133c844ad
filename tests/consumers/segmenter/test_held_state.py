"""What the segmenter holds, record by record: stragglers of finished or superseded
trajectories never pin the low-watermark, before or after a restart; impossible and
contradictory trajectories are dead-lettered whole at once; idle ones after the bound, by
both clocks, and never wrongly while their partners still wait in a backlog."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import msgspec
import pytest
from aiokafka import TopicPartition

from consumers.segmenter.service import Segmenter, SegmenterConfig
from runtime.blobstore import open_blob_store
from runtime.bus import Record
from runtime.errors import RecordError
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.processor import Output
from tests.consumers.segmenter.test_service import DELTA, K, _episode
from topics.codec import encode
from topics.events import DeadLetter, RolloutStep, TrajectoryComplete

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

    def record(self, event: RolloutStep | TrajectoryComplete, ts_ms: int = 0) -> Record:
        tp = STEPS if isinstance(event, RolloutStep) else DONE
        offset = self.next[tp]
        self.next[tp] += 1
        key = (event.request_id or event.trajectory_id).encode()
        return Record(tp.topic, tp.partition, offset, key, encode(event), ts_ms, event)


def _segmenter(processor: PolicyProcessor, tmp_path: Path, **config: float) -> Segmenter:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    return Segmenter(SegmenterConfig(k=K, delta=DELTA, **config), processor, blobs)


def _letters(outputs: list[Output]) -> list[DeadLetter]:
    assert all(o.topic == "dead-letter" for o in outputs), outputs
    return [o.event for o in outputs]


def _held_nothing(segmenter: Segmenter) -> bool:
    return segmenter.low_watermark(STEPS) is None and segmenter.low_watermark(DONE) is None


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


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"num_steps": 5, "max_steps": 4}, "over its max_steps of 4"),
    ],
)
async def test_an_impossible_completion_dead_letters_its_trajectory_at_once(
    processor: PolicyProcessor, tmp_path: Path, change: dict, reason: str
) -> None:
    segmenter = _segmenter(processor, tmp_path)
    log = _Log()
    steps, complete = _episode(random.Random(4), segmenter.blobs, processor, "g3/0", 0, 2)
    held = [log.record(s) for s in steps]
    for r in held:
        assert await segmenter.process(r) == []
    bad = log.record(msgspec.structs.replace(complete, **change))
    letters = _letters(await segmenter.process(bad))
    # Every record of the trajectory, each with its coordinates, bytes and the reason.
    assert {(d.source_topic, d.offset) for d in letters} == {
        (r.topic, r.offset) for r in [*held, bad]
    }
    for d, r in zip(sorted(letters, key=lambda d: (d.source_topic, d.offset)),
                    sorted([*held, bad], key=lambda r: (r.topic, r.offset)), strict=True):  # fmt: skip
        assert d.original_value == r.value and d.original_key == r.key
        assert reason in d.error and complete.trajectory_id in d.error
        assert d.error_type == "process" and d.service == "segmenter"
    assert _held_nothing(segmenter) and segmenter.stats()["rejected"] == 1
    # A straggler of the trajectory follows it to dead-letter (the runner does that).
    with pytest.raises(RecordError, match=reason):
        await segmenter.process(log.record(msgspec.structs.replace(steps[0], step=1)))


async def test_contradicting_records_dead_letter_the_trajectory_and_a_resend_does_not(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    segmenter = _segmenter(processor, tmp_path)
    rng, log = random.Random(5), _Log()
    # A step past the completion's count, either order.
    steps, complete = _episode(rng, segmenter.blobs, processor, "g4/0", 0, 4)
    for s in steps[:3]:
        await segmenter.process(log.record(s))
    letters = _letters(await segmenter.process(
        log.record(msgspec.structs.replace(complete, num_steps=2))))  # fmt: skip
    assert len(letters) == 4 and all("says 2 steps but steps 2 arrived" in d.error
                                     for d in letters)  # fmt: skip
    steps, complete = _episode(rng, segmenter.blobs, processor, "g4/1", 0, 2)
    await segmenter.process(log.record(complete))
    letters = _letters(await segmenter.process(
        log.record(msgspec.structs.replace(steps[0], step=7))))  # fmt: skip
    assert len(letters) == 2 and "step 7" in letters[0].error
    # Two different records for one step (past the runner's dedup window).
    steps, complete = _episode(rng, segmenter.blobs, processor, "g5/0", 0, 2)
    await segmenter.process(log.record(steps[0]))
    letters = _letters(await segmenter.process(
        log.record(msgspec.structs.replace(steps[0], response_ids=[7, 7, 7]))))  # fmt: skip
    assert len(letters) == 2 and "two different records for step 0" in letters[0].error
    assert _held_nothing(segmenter)
    # The same step sent again (another event id, same content) is held once, and cut.
    steps, complete = _episode(rng, segmenter.blobs, processor, "g5/1", 0, 2)
    first = log.record(steps[0])
    await segmenter.process(first)
    resend = msgspec.structs.replace(steps[0], event_id="again", ts_ms=steps[0].ts_ms + 1)
    assert await segmenter.process(log.record(resend)) == []
    assert segmenter.low_watermark(STEPS) == first.offset
    await segmenter.process(log.record(steps[1]))
    cut = await segmenter.process(log.record(complete))
    assert cut and all(o.topic == "segment-ready" for o in cut)
    assert _held_nothing(segmenter) and segmenter.stats()["rejected"] == 3
    # Cut as its completion says (steps 0-1), then a step past that count: it cannot be
    # un-trained, but it is reported, not dropped with the harmless stragglers.
    with pytest.raises(RecordError, match="step 2 came after its trajectory was finished"):
        await segmenter.process(log.record(msgspec.structs.replace(steps[1], step=2)))
    assert await segmenter.process(log.record(steps[1])) == []  # a re-read: dropped


async def test_a_negative_step_is_dead_lettered_alone(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    segmenter = _segmenter(processor, tmp_path)
    log = _Log()
    steps, complete = _episode(random.Random(6), segmenter.blobs, processor, "g6/0", 0, 1)
    with pytest.raises(RecordError, match="negative"):
        await segmenter.process(log.record(msgspec.structs.replace(steps[0], step=-1)))
    assert _held_nothing(segmenter)
    await segmenter.process(log.record(steps[0]))
    assert await segmenter.process(log.record(complete))  # the trajectory itself is fine


async def test_an_environment_failure_waits_for_no_step_and_is_not_a_contradiction(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    segmenter = _segmenter(processor, tmp_path)
    log = _Log()
    steps, complete = _episode(random.Random(7), segmenter.blobs, processor, "g7/0", 0, 3)
    # The desktop died in turn 3: the completion counts fewer steps than were logged.
    await segmenter.process(log.record(steps[0]))
    await segmenter.process(log.record(steps[1]))
    failed = msgspec.structs.replace(complete, status="error", num_steps=0)
    assert await segmenter.process(log.record(failed)) == []
    assert _held_nothing(segmenter)
    assert await segmenter.process(log.record(steps[2])) == []  # late: dropped, not held
    assert _held_nothing(segmenter) and segmenter.stats()["rejected"] == 0


async def test_idle_trajectories_are_released_only_when_both_clocks_moved_on(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    bound = 0.05
    segmenter = _segmenter(processor, tmp_path, idle_timeout_s=bound)
    rng, log = random.Random(8), _Log()
    orphan, _ = _episode(rng, segmenter.blobs, processor, "g8/0", 0, 2)
    steps, complete = _episode(rng, segmenter.blobs, processor, "g8/1", 0, 3)
    # As after a restart with a backlog: the completion (event time 60 s) is read while its
    # steps (50-52 s) still wait behind an orphan's (1 s) in rollout-step.
    orphan_record = log.record(orphan[0], ts_ms=1_000)
    await segmenter.process(orphan_record)
    await segmenter.process(log.record(complete, ts_ms=60_000))
    await asyncio.sleep(3 * bound)  # the wall clock is past the bound for both
    assert await segmenter.tick() == []  # but rollout-step's event time is not
    assert segmenter.low_watermark(STEPS) == orphan_record.offset
    cut = []
    for n, s in enumerate(steps):
        cut += await segmenter.process(log.record(s, ts_ms=50_000 + 1_000 * n))
    assert cut and all(o.topic == "segment-ready" for o in cut)
    # Now rollout-step's event time is 51 s past the orphan's, and so is the wall clock.
    letters = _letters(await segmenter.tick())
    assert [(d.source_topic, d.offset) for d in letters] == [("rollout-step", 0)]
    assert letters[0].error_type == "incomplete"
    assert "no completion; steps held: 0" in letters[0].error
    assert _held_nothing(segmenter) and segmenter.stats()["released"] == 1
    # A live trajectory idle by event time (another producer's clock runs ahead) is kept
    # while the wall clock says it is not idle (a bound that a loaded machine's few
    # milliseconds of processing cannot pass).
    segmenter = _segmenter(processor, tmp_path, idle_timeout_s=30.0)
    live, _ = _episode(rng, segmenter.blobs, processor, "g9/0", 0, 2)
    await segmenter.process(log.record(live[0], ts_ms=100_000))
    ahead, ahead_done = _episode(rng, segmenter.blobs, processor, "g9/1", 0, 1)
    await segmenter.process(log.record(ahead[0], ts_ms=10_000_000))
    await segmenter.process(log.record(ahead_done, ts_ms=10_000_000))
    assert await segmenter.tick() == [] and segmenter.stats()["held"] == 1


async def test_an_idle_attempt_the_worker_retried_is_dropped_quietly(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    bound = 0.05
    segmenter = _segmenter(processor, tmp_path, idle_timeout_s=bound)
    rng, log = random.Random(9), _Log()
    first, _ = _episode(rng, segmenter.blobs, processor, "g10/0", 0, 3)
    retry, _ = _episode(rng, segmenter.blobs, processor, "g10/0", 1, 3)
    await segmenter.process(log.record(first[0]))
    await asyncio.sleep(3 * bound)
    retry_record = log.record(retry[0])
    await segmenter.process(retry_record)
    assert await segmenter.tick() == []  # no timestamps: the wall clock alone decides
    assert segmenter.stats()["superseded"] == 1
    assert segmenter.low_watermark(STEPS) == retry_record.offset  # the retry is still live


async def test_steps_missing_from_the_log_are_dead_lettered_after_the_grace_not_while_read(
    processor: PolicyProcessor, tmp_path: Path
) -> None:
    grace = 0.05
    segmenter = _segmenter(processor, tmp_path, missing_grace_s=grace)
    rng, log = random.Random(12), _Log()
    steps, complete = _episode(rng, segmenter.blobs, processor, "g12/0", 0, 3)
    late, late_done = _episode(rng, segmenter.blobs, processor, "g13/0", 0, 2)
    other, _ = _episode(rng, segmenter.blobs, processor, "g14/0", 0, 2)
    # Completions (event time 60 s) read while rollout-step is read only up to 59 s: their
    # missing steps may still wait there, however long the wall clock says.
    held = [log.record(steps[1], ts_ms=58_000), log.record(steps[2], ts_ms=59_000)]
    for record in [*held, log.record(late[1], ts_ms=59_000)]:
        await segmenter.process(record)
    done = log.record(complete, ts_ms=60_000)
    await segmenter.process(done)
    await segmenter.process(log.record(late_done, ts_ms=60_000))
    await asyncio.sleep(3 * grace)
    assert await segmenter.tick() == []
    # A step written after the completions is read: whatever they miss was written before
    # it, so the grace starts; a step that comes within it still completes its trajectory.
    await segmenter.process(log.record(other[0], ts_ms=61_000))
    assert await segmenter.tick() == []  # the grace starts now
    cut = await segmenter.process(log.record(late[0], ts_ms=59_500))
    assert cut and all(o.topic == "segment-ready" for o in cut)
    await asyncio.sleep(3 * grace)
    letters = _letters(await segmenter.tick())
    assert [(d.source_topic, d.offset) for d in letters] == [
        (done.topic, done.offset),
        *((r.topic, r.offset) for r in held),
    ]
    reason = letters[0].error
    assert reason.startswith(f"{complete.trajectory_id}: steps missing from the log: ")
    assert "the completion says 3 steps; held: 1-2; missing: 0" in reason
    assert all(d.error == reason and d.error_type == "incomplete" for d in letters)
    stats = segmenter.stats()
    assert stats["steps_missing"] == 1 and stats["released"] == 0 and stats["held"] == 1
    with pytest.raises(RecordError, match="was dead-lettered before this record came"):
        await segmenter.process(log.record(steps[0], ts_ms=62_000))  # a straggler follows it
