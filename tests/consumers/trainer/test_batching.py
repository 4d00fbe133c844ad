"""The join of segments and rewards into groups, planning and packing: pure, no broker."""

from __future__ import annotations

import numpy as np
import pytest

from consumers.trainer.backends.base import Sample
from consumers.trainer.batching import GroupBook, PlanConfig, pack_micro_batches, plan_group
from topics.events import Reward, SegmentReady

JUDGE = "osworld-metrics-v1"
SEG, REW = ("segment-ready", 0), ("reward", 0)


def seg(traj: str, index: int, count: int, group: str = "g", size: int = 2, sample: int = 0,
        version: int = 0, length: int = 6) -> SegmentReady:  # fmt: skip
    mask = [0, 0, 0] + [1] * (length - 3)
    return SegmentReady(
        trajectory_id=traj, segment_index=index, num_segments=count, is_last=index == count - 1,
        input_ids=list(range(10, 10 + length)), loss_mask=mask,
        logprobs=[-0.5 * m for m in mask], group_id=group, group_size=size,
        sample_index=sample, request_id=f"{group}/{sample}", policy_version=version,
        temperature=0.8,
    )  # fmt: skip


def reward(traj: str, score: float, group: str = "g", size: int = 2, sample: int = 0,
           scored: bool = True, judge: str = JUDGE, version: int = 0) -> Reward:  # fmt: skip
    return Reward(
        trajectory_id=traj, task_id="t", group_id=group, group_size=size, score=score,
        scored=scored, judge_version=judge, sample_index=sample, request_id=f"{group}/{sample}",
        policy_version=version,
    )  # fmt: skip


class Log:
    """Feeds a book with increasing offsets per partition, as a consumer would."""

    def __init__(self, book: GroupBook) -> None:
        self.book = book
        self.offsets = {SEG: 0, REW: 0}

    def add(self, event: SegmentReady | Reward) -> str:
        tp = SEG if isinstance(event, SegmentReady) else REW
        offset = self.offsets[tp]
        self.offsets[tp] += 1
        if isinstance(event, SegmentReady):
            return self.book.add_segment(event, tp, offset)
        return self.book.add_reward(event, tp, offset)


def test_a_group_completes_with_every_reward_and_every_scored_segment() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    log.add(seg("a", 0, 2, sample=0))
    log.add(reward("a", 1.0, sample=0))
    log.add(reward("b", 0.0, sample=1))
    assert book.ready == []  # a's second segment and b's segments are missing
    log.add(seg("a", 1, 2, sample=0))
    assert book.ready == []
    log.add(seg("b", 0, 1, sample=1))
    assert book.ready == ["g"]
    assert book.low_watermark(SEG) == 0 and book.low_watermark(REW) == 0


def test_other_judge_versions_duplicates_and_environment_failures() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    assert log.add(reward("a", 1.0, judge="v0", sample=0)) == "other_judge"
    assert log.add(reward("a", 1.0, sample=0)) == "held"
    assert log.add(seg("a", 0, 1, sample=0)) == "held"
    assert log.add(seg("a", 0, 1, sample=0)) == "duplicate"
    # A second trajectory for request g/0 (a redelivered request played again): ignored.
    log.add(seg("a2", 0, 1, sample=0))
    log.add(reward("a2", 0.0, sample=0))
    # Sample 1 failed in its environment: no segments needed, the group completes.
    log.add(reward("b", 0.0, sample=1, scored=False))
    assert book.ready == ["g"]
    group = book.pending["g"]
    assert [t.trajectory_id for t in group.members()] == ["a", "b"] and group.duplicates() == 1
    assert book.counters["rewards_other_judge"] == 1
    assert book.counters["trajectories_duplicate"] == 1
    plan = plan_group(group, 0, PlanConfig())
    assert plan.env_failures == 1 and plan.all_equal  # one scored survivor: no signal
    assert {s.trajectory_id for s in plan.samples} == {"a"}
    assert all(s.advantage == 0.0 for s in plan.samples)
    assert plan_group(group, 0, PlanConfig(skip_equal_groups=True)).samples == []


def test_the_first_written_trajectory_of_a_request_wins_whatever_is_read_first() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    early = reward("first", 1.0, size=1)
    late = reward("second", 0.0, size=1)
    late = Reward(
        **{**{f: getattr(late, f) for f in late.__struct_fields__}, "ts_ms": early.ts_ms + 5}
    )
    log.add(late)
    log.add(seg("second", 0, 1, size=1))
    assert book.ready == ["g"]
    log.add(early)  # read later, written earlier: it takes the request over
    assert book.ready == [] and book.pending["g"].chosen == {"g/0": "first"}
    log.add(seg("first", 0, 1, size=1))
    assert book.ready == ["g"] and book.pending["g"].duplicates() == 1


def test_finished_groups_ignore_late_records_and_release_their_offsets() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    for sample, score in ((0, 1.0), (1, 0.0)):
        log.add(seg(f"t{sample}", 0, 1, sample=sample))
        log.add(reward(f"t{sample}", score, sample=sample))
    log.add(seg("other", 0, 1, group="h", sample=0))  # another group, still pending
    book.take("g")
    assert book.low_watermark(SEG) == 0  # taken but not released: still held
    book.release(["g"])
    assert book.low_watermark(SEG) == 2  # only group h's segment
    assert log.add(seg("t9", 0, 1, sample=0)) == "late"
    assert log.add(reward("t9", 1.0, sample=0)) == "late"
    restart = book.restart_point()
    assert restart["floors"] == {SEG: 2, REW: 3}  # everything below was finished
    assert "g" in restart["finished"]  # its late segment at offset 3 is above the floor


def test_restart_point_skips_exactly_what_was_finished() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    events = []
    for group in ("g1", "g2", "g3"):
        for sample in range(2):
            events += [seg(f"{group}-{sample}", 0, 1, group=group, sample=sample),
                       reward(f"{group}-{sample}", float(sample), group=group, sample=sample)]  # fmt: skip
    # g2 completes first and trains; g1 and g3 stay pending (g1's last reward not read yet).
    order = [e for e in events if e.group_id == "g2"] + [
        e for e in events if e.group_id != "g2" and e.trajectory_id != "g1-1"
    ]
    order += [e for e in events if e.trajectory_id == "g1-1" and isinstance(e, SegmentReady)]
    for event in order:
        log.add(event)
    book.take("g2")
    restart = book.restart_point()
    # A restart re-reads from the floors: g1 and g3 are rebuilt, g2 is skipped.
    fresh = GroupBook(JUDGE)
    fresh.restore(restart["floors"], restart["finished"])
    again = Log(fresh)
    results = {e.dedup_id(): again.add(e) for e in order}
    assert all(r == "late" for k, r in results.items() if k.startswith("g2"))
    assert all(r == "held" for k, r in results.items() if not k.startswith("g2"))
    assert set(fresh.pending) == {"g1", "g3"}


def test_staleness_drops_before_normalising_or_downweights() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    for sample, (score, version) in enumerate([(1.0, 0), (0.0, 5), (0.5, 5), (0.0, 5)]):
        log.add(seg(f"t{sample}", 0, 1, size=4, sample=sample, version=version))
        log.add(reward(f"t{sample}", score, size=4, sample=sample, version=version))
    group = book.pending["g"]
    drop = plan_group(group, 6, PlanConfig(max_lag=3))
    assert drop.stale_dropped == 1 and {s.trajectory_id for s in drop.samples} == {"t1", "t2", "t3"}
    assert sum(drop.advantages) == pytest.approx(0.0, abs=1e-9)  # normalised without t0
    down = plan_group(group, 6, PlanConfig(max_lag=3, staleness="downweight", stale_weight=0.5))
    weights = {s.trajectory_id: s.weight for s in down.samples}
    assert down.stale_downweighted == 1 and weights == {"t0": 0.125, "t1": 1, "t2": 1, "t3": 1}
    assert plan_group(group, 6, PlanConfig(max_lag=None)).stale_dropped == 0


def test_sft_trains_trajectories_at_or_above_the_threshold_at_temperature_one() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    for sample, score in enumerate([1.0, 0.4, 1.0]):
        log.add(seg(f"t{sample}", 0, 1, size=3, sample=sample, version=0))
        log.add(reward(f"t{sample}", score, size=3, sample=sample))
    plan = plan_group(book.pending["g"], 50, PlanConfig(objective="sft", sft_threshold=1.0))
    assert {s.trajectory_id for s in plan.samples} == {"t0", "t2"}
    assert plan.below_threshold == 1 and plan.stale_dropped == 0
    assert all(s.temperature == 1.0 for s in plan.samples)


def test_expiry_and_malformed_segments() -> None:
    now = [100.0]
    book = GroupBook(JUDGE, clock=lambda: now[0])
    log = Log(book)
    log.add(seg("a", 0, 1))
    now[0] += 9
    log.add(reward("b", 0.0, sample=1))  # the group is still receiving: not idle
    now[0] += 9
    assert book.expire(timeout_s=10) == []
    now[0] += 2
    (gone,) = book.expire(timeout_s=10)
    # Its records stay held until the caller has reported them (dead letters) and releases.
    assert gone.group_id == "g" and book.low_watermark(SEG) == 0
    assert gone.missing() == "1 of 2 rewards never came; 1 scored trajectories lack segments"
    assert [(tp, offset, t) for tp, offset, t in gone.records()] == [(REW, 0, "b"), (SEG, 0, "a")]
    book.release(["g"])
    assert book.low_watermark(SEG) is None
    with pytest.raises(ValueError, match="group g expired before this record came"):
        log.add(reward("a", 1.0))  # a latecomer is refused (dead-lettered), not ignored
    bad = SegmentReady(trajectory_id="x", segment_index=0, input_ids=[1, 2], loss_mask=[1, 0],
                       logprobs=[0.0, 0.0], group_id="h")  # fmt: skip
    with pytest.raises(ValueError, match="position 0"):
        book.add_segment(bad, SEG, 10)


def test_a_record_that_contradicts_its_group_size_is_refused() -> None:
    book = GroupBook(JUDGE)
    log = Log(book)
    log.add(reward("a", 1.0, size=2))
    with pytest.raises(ValueError, match="group g has 2 members .* this record says 3"):
        log.add(seg("b", 0, 1, size=3, sample=1))
    with pytest.raises(ValueError, match="this record says 1"):
        log.add(reward("c", 0.0, size=1))
    assert book.pending["g"].group_size == 2 and list(book.pending["g"].trajectories) == ["a"]


def test_micro_batches_respect_the_token_budget_and_sampling_settings() -> None:
    def sample(length: int, temperature: float = 0.8) -> Sample:
        mask = np.zeros(length, bool)
        mask[-1] = True
        return Sample(np.arange(length, dtype=np.int32), mask, np.zeros(length, np.float32),
                      temperature=temperature)  # fmt: skip

    samples = [sample(n) for n in (10, 50, 20, 30, 200)] + [sample(15, 1.0)]
    batches = pack_micro_batches(samples, max_tokens=100, max_rows=3)
    assert sorted(len(s.ids) for b in batches for s in b.samples) == [10, 15, 20, 30, 50, 200]
    for b in batches:
        longest = max(len(s.ids) for s in b.samples)
        assert len(b.samples) <= 3
        assert len(b.samples) == 1 or len(b.samples) * longest <= 100
        assert {s.temperature for s in b.samples} == {b.temperature}
