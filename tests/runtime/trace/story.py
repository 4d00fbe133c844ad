"""One sampler batch's records, every stage of the loop with known times, for trace tests.

Two tasks, a group of 2 rollouts each. `alpha` was seen before (its EMA puts it in the
candidate pool, the top 6 of 9 live tasks), `beta` is unseen (its initial pass). Rollout
`.../1` of alpha's group died on the desktop (an environment failure) and was retried. The
trainer's step v5 trained both groups and names them, with each trajectory's advantage.
"""

from __future__ import annotations

from collections.abc import Callable

from topics.events import (
    Event,
    PolicyUpdate,
    Reward,
    RolloutRequest,
    RolloutStep,
    SegmentReady,
    TaskStats,
    TrajectoryComplete,
)

T0 = 1_800_000_000_000  # the batch's requests (ms)
RUN = "20270115T080000Z-abcdef"
ALPHA, BETA = "b00003-c0ffee-alpha", "b00003-c0ffee-beta"
TRAJECTORY = f"{ALPHA}/0@0aaa"  # the one the tests follow
RETRIED = f"{ALPHA}/1@1bbb"  # alpha's second rollout, after FAILED died
FAILED = f"{ALPHA}/1@0bad"
TURN_MS = 2_000.0


def _steps(tid: str, group: str, task: str, start: int, n: int, ref: Callable[[int], str | None],
           version: int = 4) -> list[tuple[str, Event]]:  # fmt: skip
    out: list[tuple[str, Event]] = []
    for i in range(n):
        out.append(("rollout-step", RolloutStep(
            trajectory_id=tid, step=i, task_id=task, group_id=group,
            request_id=tid.split("@")[0], policy_version=version,
            response_ids=list(range(10 + i)), response_logprobs=[-0.5] * (10 + i),
            response_text=f"click {i}",
            action={"action": "left_click", "coordinate": [100 * (i + 1), 500]},
            observation_ref=ref(i), observation_size=[640, 400], instruction=f"do {task}",
            prompt_tokens=300 + 50 * i, latency_ms=TURN_MS,
            timings_ms={"observe": 20.0, "generate": 1900.0, "act": 80.0},
            ts_ms=int(start + (i + 1) * TURN_MS),
        )))  # fmt: skip
    return out


def _complete(tid: str, group: str, task: str, sample: int, at: int, status: str = "done",
              n: int = 2, **kw: object) -> tuple[str, Event]:  # fmt: skip
    return ("trajectory-complete", TrajectoryComplete(
        trajectory_id=tid, status=status, num_steps=n, task_id=task, group_id=group,
        group_size=2, sample_index=sample, request_id=tid.split("@")[0], max_steps=5,
        policy_version=4, policy_version_last=4, artifacts={"evaluation": "sha256:" + "e" * 64},
        seconds=n * TURN_MS / 1000, ts_ms=at, **kw,
    ))  # fmt: skip


def _reward(tid: str, group: str, task: str, sample: int, score: float, at: int) -> tuple[str, Event]:  # fmt: skip
    return ("reward", Reward(
        trajectory_id=tid, task_id=task, group_id=group, group_size=2, score=score,
        reason="checked" if score > 0 else "not done", judge_version="osworld-metrics-v1",
        policy_version=4, sample_index=sample, request_id=tid.split("@")[0],
        metric_score=max(score, 0.0), ts_ms=at,
    ))  # fmt: skip


def _segment(tid: str, group: str, task: str, sample: int, index: int, of: int, at: int,
             tokens: int = 40) -> tuple[str, Event]:  # fmt: skip
    mask = [0] * (tokens - 10) + [1] * 10
    return ("segment-ready", SegmentReady(
        trajectory_id=tid, segment_index=index, input_ids=list(range(tokens)), loss_mask=mask,
        logprobs=[0.0] * (tokens - 10) + [-0.5] * 10, image_refs=["sha256:" + "a" * 64] * 2,
        image_sizes=[[640, 400]] * 2, task_id=task, group_id=group, group_size=2,
        sample_index=sample, request_id=tid.split("@")[0], policy_version=4,
        num_segments=of, is_last=index == of - 1, trained_tokens=10, ts_ms=at,
    ))  # fmt: skip


def story(ref: Callable[[int], str | None] = lambda i: None) -> list[tuple[str, Event]]:
    """The batch's records as (topic, event), in the order they were written."""
    alpha_before = TaskStats(
        task_id="alpha", ema_pass_rate=0.5, weight=1.0, attempts=2, policy_version=3,
        last_group_id="b00002-c0ffee-alpha", ts_ms=T0 - 60_000,
    )  # fmt: skip
    events: list[tuple[str, Event]] = [("task-stats", alpha_before)]
    for i in range(8):  # eight more live tasks, all weighing less than alpha
        events.append(("task-stats", TaskStats(
            task_id=f"other{i}", ema_pass_rate=0.9, weight=0.9 - 0.1 * i, attempts=1,
            ts_ms=T0 - 50_000,
        )))  # fmt: skip
    for group, task in ((ALPHA, "alpha"), (BETA, "beta")):
        for i in range(2):
            events.append(("rollout-requests", RolloutRequest(
                task_id=task, group_id=group, group_size=2, sample_index=i, policy_version=4,
                max_steps=5, ts_ms=T0,
            )))  # fmt: skip
    start = T0 + 1_000  # a worker took the request 1 s later
    events += _steps(TRAJECTORY, ALPHA, "alpha", start, 2, ref)
    events.append(_complete(TRAJECTORY, ALPHA, "alpha", 0, start + 4_100))
    events.append(_segment(TRAJECTORY, ALPHA, "alpha", 0, 0, 2, start + 4_300))
    events.append(_segment(TRAJECTORY, ALPHA, "alpha", 0, 1, 2, start + 4_400, tokens=60))
    events.append(_reward(TRAJECTORY, ALPHA, "alpha", 0, 1.0, start + 4_600))
    # alpha/1: the desktop died after one turn; the retry played two turns and failed
    events += _steps(FAILED, ALPHA, "alpha", start, 1, ref)
    events.append(_complete(FAILED, ALPHA, "alpha", 1, start + 2_500, "error", 1,
                            error="desktop died"))  # fmt: skip
    events += _steps(RETRIED, ALPHA, "alpha", start + 3_000, 2, ref)
    events.append(_complete(RETRIED, ALPHA, "alpha", 1, start + 7_100, "fail", attempt=1))
    events.append(_segment(RETRIED, ALPHA, "alpha", 1, 0, 1, start + 7_300))
    events.append(_reward(RETRIED, ALPHA, "alpha", 1, 0.0, start + 7_400))
    for i in range(2):  # beta: two quick failures
        tid = f"{BETA}/{i}@0ccc"
        events += _steps(tid, BETA, "beta", start, 2, ref)
        events.append(_complete(tid, BETA, "beta", i, start + 4_200, "fail"))
        events.append(_segment(tid, BETA, "beta", i, 0, 1, start + 4_500))
        events.append(_reward(tid, BETA, "beta", i, 0.0, start + 4_700))
    events.append(("task-stats", TaskStats(
        task_id="alpha", ema_pass_rate=0.5, weight=1.0, attempts=3, policy_version=4,
        last_group_id=ALPHA, folded_groups={ALPHA: start + 7_500}, ts_ms=start + 7_500,
    )))  # fmt: skip
    announced = start + 20_000
    events.append(("policy-updates", PolicyUpdate(
        policy_version=5, checkpoint_uri="file:///ckpt/v000005",
        metrics={"loss": 0.25, "groups": 2.0, "rollouts": 4.0, "step_time_s": 10.0,
                 "checkpoint_s": 1.5},
        groups=[ALPHA, BETA],
        advantages={TRAJECTORY: 0.7071, RETRIED: -0.7071, f"{BETA}/0@0ccc": 0.0,
                    f"{BETA}/1@0ccc": 0.0},  # fmt: skip
        ts_ms=announced,
    )))  # fmt: skip
    return events


# What the followed trajectory's timeline must say (ms).
EXPECTED_GAPS = {
    "request_to_first_turn": 1_000.0,
    "last_turn_to_complete": 100.0,
    "complete_to_reward": 500.0,
    "complete_to_segments": 300.0,
    "segments_to_trained": 20_000 + 1_000 - 1_500 - (1_000 + 4_400),
    "trained_to_announced": 1_500.0,
}
