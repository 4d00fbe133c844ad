"""From a finished trajectory and its metric score to its reward: the status rules, pure.

- status `error` (an environment failure: the desktop died twice, the engine was down):
  no score at all (`scored=False`); the trainer drops it from its group and the sampler
  does not count it as an attempt — never a fake 0.
- status `max_steps` (the episode did not end within its step budget): the paper's
  incomplete-episode reward, −0.2 by default, whatever the metrics say.
- otherwise (`done`, `fail`, `answer`): the metric score.

Every reward is within `topics.events.REWARD_SCORES` (metric scores in `METRIC_SCORES`,
the penalty in `INCOMPLETE_REWARDS`): that is the judge's promise the trainer relies on,
and the event refuses anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.errors import ConfigError
from topics.events import INCOMPLETE_REWARDS, Reward, TrajectoryComplete

__all__ = ["JudgeConfig", "reward_for"]


@dataclass(frozen=True)
class JudgeConfig:
    """What the judge writes into every reward."""

    judge_version: str = "osworld-metrics-v1"  # bump to rejudge history under a new version
    incomplete_reward: float = -0.2  # reward of an episode that hit its step limit
    group_id: str = "judge"

    def __post_init__(self) -> None:
        if self.incomplete_reward not in INCOMPLETE_REWARDS:
            raise ConfigError(
                f"incomplete_reward {self.incomplete_reward!r} must be a penalty in "
                f"{INCOMPLETE_REWARDS}"
            )


def reward_for(
    trajectory: TrajectoryComplete,
    metric_score: float | None,
    reason: str,
    config: JudgeConfig,
) -> Reward:
    """Return the reward of a trajectory given its metric score (None: it could not be scored)."""
    common = {
        "trajectory_id": trajectory.trajectory_id,
        "task_id": trajectory.task_id,
        "group_id": trajectory.group_id,
        "group_size": trajectory.group_size,
        "sample_index": trajectory.sample_index,
        "request_id": trajectory.request_id,
        "judge_version": config.judge_version,
        "status": trajectory.status,
        "policy_version": trajectory.policy_version,
    }
    if trajectory.status == "error" or metric_score is None:
        why = trajectory.error or reason or "no score"
        return Reward(score=0.0, scored=False, reason=f"environment failure: {why}", **common)
    if trajectory.status == "max_steps":
        return Reward(
            score=config.incomplete_reward,
            metric_score=metric_score,
            reason=f"incomplete: hit the {trajectory.max_steps}-step limit ({reason})",
            **common,
        )
    return Reward(score=metric_score, metric_score=metric_score, reason=reason, **common)
