"""The dashboard's view model: events and offset samples folded into panels (pure)."""

from __future__ import annotations

import msgspec
import pytest

from consumers.dashboard.state import (
    DashboardConfig,
    DashboardState,
    OffsetSample,
    action_label,
)
from topics.events import (
    PolicyUpdate,
    Reward,
    RolloutStep,
    RunStarted,
    TaskStats,
    TrajectoryComplete,
)


def _reward(
    i: int, score: float, version: int, *, scored: bool = True, judge: str = "v1"
) -> Reward:
    return Reward(
        trajectory_id=f"traj-{i}", task_id="t", group_id="g", group_size=8, score=score,
        policy_version=version, scored=scored, judge_version=judge,
        status="done" if scored else "error",
    )  # fmt: skip


def _stats(task_id: str, ema: float, state: str = "active") -> TaskStats:
    return TaskStats(task_id=task_id, ema_pass_rate=ema, weight=0.5, attempts=1, state=state)


def _step(trajectory: str, step: int, action: dict | None = None) -> RolloutStep:
    return RolloutStep(
        trajectory_id=trajectory, step=step, observation_ref=f"sha256:{step:064x}",
        action=action if action is not None else {"action": "left_click", "coordinate": [500, 250]},
    )  # fmt: skip


def _complete(trajectory: str, ts_ms: int, steps: int = 2) -> TrajectoryComplete:
    return TrajectoryComplete(
        trajectory_id=trajectory, status="done", num_steps=steps, task_id="t", ts_ms=ts_ms,
        artifacts={"final_screenshot": "sha256:" + "f" * 64},
    )  # fmt: skip


def test_iterations_give_mean_reward_pass_rate_and_unscored_per_policy_version() -> None:
    state = DashboardState()
    scores = [(1.0, 0), (0.0, 0), (1.0, 0), (-0.2, 0), (1.0, 1), (1.0, 1), (0.5, 1)]
    for i, (score, version) in enumerate(scores):
        state.apply("reward", _reward(i, score, version))
    state.apply("reward", _reward(99, 0.0, 1, scored=False))
    rows = state.panel("iterations")["rows"]
    assert [r["version"] for r in rows] == [0, 1]
    assert rows[0] == {
        "version": 0, "rewards": 4, "scored": 4, "unscored": 0, "passed": 2,
        "mean_reward": pytest.approx(0.45), "pass_rate": 0.5,
    }  # fmt: skip
    assert rows[1]["pass_rate"] == pytest.approx(2 / 3, abs=1e-6)  # the unscored one is no attempt
    assert rows[1]["mean_reward"] == pytest.approx(2.5 / 3, abs=1e-6)
    assert rows[1]["unscored"] == 1
    summary = state.panel("summary")
    assert (summary["rewards"], summary["unscored"]) == (8, 1)
    assert summary["statuses"] == {"done": 7, "error": 1}


def test_a_redelivered_reward_counts_once_and_the_threshold_is_a_setting() -> None:
    state = DashboardState(DashboardConfig(pass_threshold=0.5))
    for _ in range(3):
        state.apply("reward", _reward(1, 0.5, 0))
    state.apply("reward", _reward(2, 0.4, 0))
    (row,) = state.panel("iterations")["rows"]
    assert (row["rewards"], row["passed"], row["pass_rate"]) == (2, 1, 0.5)


def test_the_judge_with_most_rewards_is_charted_unless_one_is_chosen() -> None:
    events = [_reward(i, 1.0, 0, judge="v1") for i in range(3)]
    events += [_reward(i, 0.0, 0, judge="v2") for i in range(2)]
    default, chosen = DashboardState(), DashboardState(DashboardConfig(judge_version="v2"))
    for event in events:
        default.apply("reward", event)
        chosen.apply("reward", event)
    assert default.panel("iterations")["rows"][0]["pass_rate"] == 1.0
    assert chosen.panel("iterations")["rows"][0]["pass_rate"] == 0.0
    assert default.panel("summary")["judges"] == {"v1": 3, "v2": 2}


def test_trainer_metrics_are_an_open_dict_aligned_on_versions() -> None:
    state = DashboardState()
    state.apply(
        "policy-updates", PolicyUpdate(policy_version=2, checkpoint_uri="c2", metrics={"loss": 0.5})
    )
    state.apply(
        "policy-updates",
        PolicyUpdate(policy_version=1, checkpoint_uri="c1", metrics={"loss": 1.0, "kl": 0.01}),
    )
    state.apply(
        "policy-updates", PolicyUpdate(policy_version=2, checkpoint_uri="c2", metrics={"loss": 0.5})
    )
    panel = state.panel("trainer")
    assert panel["versions"] == [1, 2]
    assert panel["metrics"] == {"kl": [0.01, None], "loss": [1.0, 0.5]}
    assert panel["checkpoint"] == "c2"
    assert state.panel("summary")["policy_version"] == 2


def test_pool_histogram_counts_measured_tasks_and_the_frontier_band() -> None:
    state = DashboardState(DashboardConfig(bins=4, mu=0.5, sigma=0.25))
    for i, (ema, kind) in enumerate(
        [(-1.0, "active"), (0.0, "active"), (0.3, "active"), (0.5, "active"), (0.75, "active"),
         (1.0, "active"), (0.6, "excluded")]
    ):  # fmt: skip
        state.apply("task-stats", _stats(f"t{i}", ema, kind))
    state.apply("task-stats", _stats("t1", 0.26))  # the latest stats of a task win
    pool = state.panel("pool")
    assert pool["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert pool["active"] == [0, 2, 1, 2]  # 0.26 0.3 | 0.5 | 0.75 1.0
    assert pool["excluded"] == [0, 0, 1, 0]
    assert (pool["unmeasured"], pool["tasks"], pool["in_band"]) == (1, 7, 4)
    assert pool["band"] == [0.25, 0.75]


def test_task_table_lists_the_newest_updates_first_and_marks_the_band() -> None:
    state = DashboardState(DashboardConfig(task_rows=2))
    for task_id, ema in [("a", 0.5), ("b", -1.0), ("c", 0.9), ("a", 0.4)]:
        state.apply("task-stats", _stats(task_id, ema))
    panel = state.panel("tasks")
    assert panel["total"] == 3
    assert [(r["task_id"], r["ema"], r["in_band"]) for r in panel["rows"]] == [
        ("a", 0.4, True),
        ("c", 0.9, False),
    ]
    state.forget_task("a")
    assert [r["task_id"] for r in state.panel("tasks")["rows"]] == ["c", "b"]


def test_filmstrip_keeps_the_newest_finished_trajectories_with_their_turns() -> None:
    state = DashboardState(DashboardConfig(trajectories=2))
    for t, ts in [("x", 100), ("y", 200), ("z", 300)]:
        state.apply("rollout-step", _step(t, 1))
        state.apply("rollout-step", _step(t, 0, {"action": "type", "text": "hello"}))
        state.apply("trajectory-complete", _complete(t, ts))
    state.apply("trajectory-complete", _complete("old", 50))  # older than all shown: ignored
    state.apply(
        "reward", Reward(trajectory_id="z", task_id="t", group_id="g", group_size=1, score=1.0)
    )
    films = state.panel("filmstrip")["trajectories"]
    assert [f["trajectory_id"] for f in films] == ["z", "y"]
    z = films[0]
    assert [f["step"] for f in z["frames"]] == [0, 1]
    assert z["frames"][0]["action"] == "type 'hello'"
    assert z["frames"][1]["point"] == [500.0, 250.0]
    assert (z["score"], z["scored"], z["final_ref"]) == (1.0, True, "sha256:" + "f" * 64)


def test_steps_read_after_their_completion_still_join_the_filmstrip() -> None:
    state = DashboardState()
    state.apply(
        "reward", Reward(trajectory_id="x", task_id="t", group_id="g", group_size=1, score=0.0)
    )
    state.apply("trajectory-complete", _complete("x", 1))
    before = state.versions["filmstrip"]
    state.apply("rollout-step", _step("x", 0))
    (film,) = state.panel("filmstrip")["trajectories"]
    assert [f["step"] for f in film["frames"]] == [0]
    assert film["score"] == 0.0  # the reward came before the completion
    assert state.versions["filmstrip"] > before


def test_frames_per_trajectory_are_capped_to_the_last_turns() -> None:
    state = DashboardState(DashboardConfig(frames=3))
    for step in range(6):
        state.apply("rollout-step", _step("x", step))
    state.apply("trajectory-complete", _complete("x", 1, steps=6))
    (film,) = state.panel("filmstrip")["trajectories"]
    assert [f["step"] for f in film["frames"]] == [3, 4, 5]


def test_a_fleet_larger_than_the_followed_trajectories_shows_them_whole() -> None:
    # 6,000 environments at once, their turns interleaved: every trajectory the filmstrip
    # shows has all its turns, and the state holds at most the bound's trajectories.
    state = DashboardState(DashboardConfig(trajectories=6))
    envs, turns = 6000, 3
    for step in range(turns):
        for env in range(envs):
            event = _step(f"e{env}", step)
            state.apply("rollout-step", msgspec.structs.replace(event, ts_ms=1000 + step))
    assert len(state._open) <= 2048
    for env in range(envs):
        state.apply("trajectory-complete", _complete(f"e{env}", 2000 + env, steps=turns))
    films = state.panel("filmstrip")["trajectories"]
    assert len(films) == 6 and all(len(f["frames"]) == turns for f in films)
    # One silent past the bound (abandoned) makes room for a newcomer.
    for env in range(2048):
        state.apply("rollout-step", msgspec.structs.replace(_step(f"n{env}", 0), ts_ms=5000))
    late = msgspec.structs.replace(_step("late", 0), ts_ms=5000 + 16 * 60 * 1000)
    state.apply("rollout-step", late)
    assert "late" in state._open


def test_action_labels() -> None:
    assert action_label({"action": "left_click", "coordinate": [10.4, 20]}) == "left_click (10, 20)"
    assert action_label({"action": "key", "keys": "ctrl+s"}) == "key 'ctrl+s'"
    assert action_label(None, "parse: no tool call") == "no action: parse: no tool call"
    assert action_label({"action": "type", "text": "x" * 100}).endswith("...'")
    assert "refused" in action_label({"action": "wait"}, "desktop said no")


def test_services_lag_and_throughput_from_offset_samples() -> None:
    groups = {"judge": ("trajectory-complete",), "trainer": ("segment-ready", "reward")}
    state = DashboardState(DashboardConfig(groups=groups))
    assert state.panel("services")["live"] is False
    state.add_offsets(OffsetSample(10.0, {"trajectory-complete": 100, "segment-ready": 50, "reward": 20},
                                   {"judge": {"trajectory-complete": 90}, "trainer": {}}))  # fmt: skip
    state.add_offsets(OffsetSample(12.0, {"trajectory-complete": 140, "segment-ready": 50, "reward": 20},
                                   {"judge": {"trajectory-complete": 130}, "trainer": {"reward": 20}}))  # fmt: skip
    panel = state.panel("services")
    judge, trainer = panel["groups"]
    assert (judge["committed"], judge["lag"], judge["rate"]) == (130, 10, 20.0)
    # The trainer committed only on `reward`: `segment-ready` is all lag.
    assert (trainer["committed"], trainer["lag"], trainer["rate"]) == (20, 50, None)
    assert {t["topic"]: t["rate"] for t in panel["topics"]}["trajectory-complete"] == 20.0
    (point,) = panel["history"]
    assert point == {
        "t": 2.0,
        "lag": {"judge": 10, "trainer": 50},
        "rate": {"judge": 20.0, "trainer": None},
    }


def test_panel_versions_move_only_when_their_panel_changes() -> None:
    state = DashboardState()
    before = dict(state.versions)
    state.apply("runs", RunStarted(run_id="20260101T000000Z-abcdef"))
    state.apply("runs", RunStarted(run_id="20260101T000000Z-abcdef"))
    state.apply("task-stats", _stats("a", 0.5))
    moved = {k for k in state.versions if state.versions[k] != before[k]}
    assert moved == {"summary", "pool", "tasks"}
    assert state.panel("summary")["runs"] == [
        {"run_id": "20260101T000000Z-abcdef", "resumed_from": None}
    ]
