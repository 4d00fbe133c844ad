"""The timeline builder and the stage summary, on one batch's records with known times."""

from __future__ import annotations

import math
import random

import pytest

from runtime.trace.summary import percentile, stage_summary
from runtime.trace.text import summary_text, timeline_text
from runtime.trace.timeline import (
    GAPS,
    LogIndex,
    SegmentFact,
    TraceLog,
    build_timeline,
    build_timelines,
    resolve_trajectory,
)
from tests.runtime.trace.story import (
    ALPHA,
    BETA,
    EXPECTED_GAPS,
    FAILED,
    RETRIED,
    T0,
    TRAJECTORY,
    story,
)
from topics.events import SegmentReady

_FIELDS = {
    "rollout-requests": "requests", "rollout-step": "steps", "trajectory-complete": "completes",
    "reward": "rewards", "segment-ready": "segments", "task-stats": "task_stats",
    "policy-updates": "updates",
}  # fmt: skip


def trace_log(events: list, run_id: str = "r1") -> TraceLog:
    """A TraceLog of (topic, event) pairs, as the readers fill it."""
    log = TraceLog(run_id=run_id)
    for name, event in events:
        if isinstance(event, SegmentReady):
            event = SegmentFact.of(event)
        getattr(log, _FIELDS[name]).append(event)
    return log


def test_every_stage_of_a_trajectory_with_the_time_between_them() -> None:
    t = build_timeline(LogIndex(trace_log(story())), TRAJECTORY)
    assert t is not None
    assert (t.task_id, t.group_id, t.sample_index, t.group_size) == ("alpha", ALPHA, 0, 2)
    r = t.request
    assert r is not None and r.at_ms == T0 and r.batch == 3 and r.batch_tasks == 2
    # alpha had the highest weight of 9 live tasks; the pool was the top 3 x 2
    assert (r.drawn, r.pool_rank, r.live_tasks, r.pool_size) == ("pool", 1, 9, 6)
    assert (r.ema, r.weight, r.groups_counted) == (0.5, 1.0, 2)
    assert [turn.step for turn in t.turns] == [0, 1]
    first = t.turns[0]
    assert first.tokens == 10 and first.observation == [] and first.latency_ms == 2000.0
    assert first.action_text == 'left_click {"coordinate":[100,500]}'
    c = t.completion
    assert c is not None and c.status == "done" and c.artifacts and c.retries == []
    assert [w.score for w in t.rewards] == [1.0] and t.rewards[0].metric_score == 1.0
    s = t.segments
    assert s is not None and (s.count, s.tokens, s.trained_tokens, s.images) == (2, 100, 20, 4)
    tr = t.training
    assert tr is not None and (tr.version, tr.advantage, tr.groups) == (5, 0.7071, 2)
    assert t.task_after is not None and t.task_after.groups_counted == 3
    assert {k: v for k, v in t.gaps.items()} == EXPECTED_GAPS
    assert set(t.gaps) | {"turn"} == set(GAPS)
    names = [name for name, _ in t.stages()]
    assert names == ["request", "turn 0", "turn 1", "complete", "segments", "reward", "trained",
                     "announced"]  # fmt: skip


def test_the_group_side_by_side_and_a_retried_rollout() -> None:
    index = LogIndex(trace_log(story()))
    t = build_timeline(index, TRAJECTORY)
    assert t is not None
    group = [(m.trajectory_id, m.status, m.score, m.advantage, m.attempts) for m in t.group]
    assert group == [(TRAJECTORY, "done", 1.0, 0.7071, 1), (RETRIED, "fail", 0.0, -0.7071, 2)]
    retried = build_timeline(index, RETRIED)
    assert retried is not None and retried.completion is not None
    (failed,) = retried.completion.retries
    assert (failed.trajectory_id, failed.status, failed.error) == (FAILED, "error", "desktop died")
    # A request id names its final attempt; a prefix names what it starts.
    assert resolve_trajectory(index, f"{ALPHA}/1") == [RETRIED]
    assert resolve_trajectory(index, BETA) == [f"{BETA}/0@0ccc", f"{BETA}/1@0ccc"]
    assert resolve_trajectory(index, "nothing") == []
    beta = build_timeline(index, f"{BETA}/0@0ccc")
    assert beta is not None and beta.request is not None
    assert beta.request.drawn == "initial pass" and beta.request.ema is None


def test_a_trajectory_not_trained_yet_has_open_gaps_and_records_in_any_order() -> None:
    events = [e for e in story() if e[0] != "policy-updates"]
    random.Random(1).shuffle(events)
    t = build_timeline(LogIndex(trace_log(events + events[:5])), TRAJECTORY)  # duplicates too
    assert t is not None and t.training is None
    assert t.gaps["segments_to_trained"] is None and t.gaps["trained_to_announced"] is None
    assert t.gaps["complete_to_reward"] == 500.0 and len(t.turns) == 2
    assert build_timeline(LogIndex(trace_log(events)), "no/such@id") is None


def test_the_summary_takes_percentiles_per_version() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 90) == 9.0 and math.isnan(percentile([], 50))
    timelines = build_timelines(LogIndex(trace_log(story())))
    assert len(timelines) == 5  # the failed attempt is a trajectory of its own
    rows = stage_summary(timelines)
    assert {r.version for r in rows} == {"v4", "all"}
    turn = next(r for r in rows if r.version == "all" and r.gap == "turn")
    assert turn.n == 9 and turn.p50 == turn.p99 == 2000.0
    trained = next(r for r in rows if r.version == "v4" and r.gap == "segments_to_trained")
    assert trained.n == 4  # the environment failure was never segmented
    text = summary_text(rows, len(timelines), "r1")
    assert "segments → trained" in text and "◀ most time" in text


def test_the_text_names_every_stage() -> None:
    t = build_timeline(LogIndex(trace_log(story())), TRAJECTORY)
    assert t is not None
    text = timeline_text(t)
    for stage in ("request", "turn 0", "turn 1", "complete", "reward", "segments", "step start",
                  "trained", "announced"):  # fmt: skip
        assert f"  {stage} " in text, stage
    assert "drawn: pool (rank 1 of 9 by weight; pool = top 6)" in text
    assert "advantage +0.707" in text and RETRIED in text


@pytest.mark.parametrize("name", [TRAJECTORY, RETRIED])
def test_turns_start_when_the_previous_one_ended(name: str) -> None:
    t = build_timeline(LogIndex(trace_log(story())), name)
    assert t is not None
    for before, after in zip(t.turns, t.turns[1:], strict=False):
        assert after.started_ms == before.at_ms
