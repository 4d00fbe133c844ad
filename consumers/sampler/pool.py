"""The sampler's task pool: tasks joining, group results folded into the EMA, stats out.

A thin stateful wrapper around `frontier.PoolState` (numpy arrays indexed by task) that the
service drives; no I/O. `restore` rebuilds it from `task-stats` events, `stats` writes them.
"""

from __future__ import annotations

import math

import numpy as np

from consumers.sampler.frontier import FrontierConfig, PoolState, ema_update, frontier_weights
from topics.events import TaskStats

__all__ = ["TaskPool"]


class TaskPool:
    """The training tasks and their pass-rate estimates."""

    def __init__(self, config: FrontierConfig) -> None:
        self.config = config
        self.state = PoolState.empty()
        self._index: dict[str, int] = {}
        self.rollouts: list[int] = []
        self.successes: list[int] = []
        self.last_score: list[float | None] = []

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._index

    def __len__(self) -> int:
        return len(self.state)

    def add(self, task_id: str) -> bool:
        """Add a task (a no-op if present); return whether it was new."""
        if task_id in self._index:
            return False
        s = self.state
        self._index[task_id] = len(s.task_ids)
        s.task_ids.append(task_id)
        s.pass_rate = np.append(s.pass_rate, np.nan)
        s.initial = np.append(s.initial, np.nan)
        s.attempts = np.append(s.attempts, 0)
        s.active = np.append(s.active, True)
        self.rollouts.append(0)
        self.successes.append(0)
        self.last_score.append(None)
        return True

    def remove(self, task_id: str) -> None:
        """Take a task out of training (it stays known, inactive)."""
        if task_id in self._index:
            self.state.active[self._index[task_id]] = False

    def unseen(self) -> list[str]:
        """Active tasks without a first group yet (the initial pass still owes them one)."""
        s = self.state
        return [s.task_ids[i] for i in np.flatnonzero(s.active & np.isnan(s.pass_rate))]

    def record_group(self, task_id: str, scores: list[float]) -> TaskStats | None:
        """Fold one finished group's scored rewards in; return the task's new stats."""
        if task_id not in self._index or not scores:
            return None  # unknown task, or every rollout an environment failure: no attempt
        i = self._index[task_id]
        s, c = self.state, self.config
        successes = np.asarray(scores) >= c.threshold
        first = math.isnan(s.pass_rate[i])
        s.pass_rate[i] = ema_update(s.pass_rate[i], successes, c.alpha, first)
        if first:
            s.initial[i] = s.pass_rate[i]
            if not c.p_min <= s.initial[i] <= c.p_max:
                s.active[i] = False
        s.attempts[i] += 1
        self.rollouts[i] += len(scores)
        self.successes[i] += int(successes.sum())
        self.last_score[i] = float(np.mean(scores))
        return self.stats(task_id)

    def stats(self, task_id: str, policy_version: int = 0) -> TaskStats:
        """The task-stats event of one task."""
        i, s = self._index[task_id], self.state
        rate = float(s.pass_rate[i]) if not math.isnan(s.pass_rate[i]) else -1.0
        weight = (
            float(frontier_weights(np.array([rate]), self.config.mu, self.config.sigma)[0])
            if rate >= 0
            else 0.0
        )
        return TaskStats(
            task_id=task_id,
            ema_pass_rate=rate,
            weight=weight,
            attempts=int(s.attempts[i]),
            last_score=self.last_score[i],
            policy_version=policy_version,
            state="active" if s.active[i] else "excluded",
            initial_pass_rate=None if math.isnan(s.initial[i]) else float(s.initial[i]),
            rollouts=self.rollouts[i],
            successes=self.successes[i],
        )

    def restore(self, stats: TaskStats) -> None:
        """Load a task's state from its latest task-stats event (after a restart)."""
        self.add(stats.task_id)
        i, s = self._index[stats.task_id], self.state
        s.pass_rate[i] = stats.ema_pass_rate if stats.ema_pass_rate >= 0 else np.nan
        s.initial[i] = stats.initial_pass_rate if stats.initial_pass_rate is not None else np.nan
        s.attempts[i] = stats.attempts
        s.active[i] = stats.state != "excluded"
        self.rollouts[i] = stats.rollouts
        self.successes[i] = stats.successes
        self.last_score[i] = stats.last_score

    def ids(self, indices: np.ndarray) -> list[str]:
        """Task ids of pool indices."""
        return [self.state.task_ids[i] for i in indices]
