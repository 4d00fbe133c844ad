"""What `scalecua up` shows of its run: one row per iteration, read back from the log.

`Progress` follows `reward`, `trajectory-complete` and `policy-updates` from where the run's
own records begin, and tells the console a line per warm-start step and per RL iteration:
what the step trained on (its rollouts, rewards and the versions that played them), its
loss and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any

from cli.up.console import UpConsole
from runtime.config import BusSettings
from runtime.runs import RunWatch

__all__ = ["Progress"]


class Progress:
    """Follows `reward`, `trajectory-complete` and `policy-updates`: one row per iteration."""

    TOPICS = ("reward", "trajectory-complete", "policy-updates")

    def __init__(
        self,
        settings: BusSettings,
        iterations: int,
        judge_version: str,
        starts: dict[Any, int] | None = None,
        console: UpConsole | None = None,
    ) -> None:
        self.settings = settings
        self.console = console or UpConsole(iterations, live=False)
        self.iterations = iterations
        self.judge_version = judge_version
        # Where the run's own records begin (log_ends before any service wrote): what is
        # below is another run's (a resumed run's re-seeded update is not an iteration).
        self.starts = starts or {}
        self.run_check_interval_s = 5.0  # how often the log's run is re-read
        self.started = time.monotonic()
        self.rows: list[dict[str, Any]] = []
        self.rewards: list[Any] = []  # every reward of this judge version
        self._since: list[Any] = []  # rewards since the last update
        self.played = 0  # trajectories completed
        self.trajectories_by_version: dict[int, int] = defaultdict(int)
        self.last_uri: str | None = None
        self._wanted = float("inf")  # shown() waits for this version
        self._shown = asyncio.Event()
        self._last_at = self.started
        self.warm_steps = 0  # versions up to this one are the warm start's SFT steps (planned,
        # then as taken: the RL trainer's first version follows the last one taken)
        self.warm_rows: list[dict[str, Any]] = []

    async def run(self) -> None:
        """Read the topics from the run's start until cancelled, and a new log from its own."""
        from runtime.bus import EventConsumer

        topics = list(self.TOPICS)
        watch = await RunWatch(self.settings).start()
        try:
            async with EventConsumer(self.settings, topics, group_id=None) as consumer:
                for tp in await consumer.read_all(*topics):
                    if self.starts.get(tp):
                        consumer.raw.seek(tp, self.starts[tp])
                checked = time.monotonic()
                while True:
                    self._read(await consumer.getmany(timeout_ms=500))
                    if time.monotonic() - checked >= self.run_check_interval_s:
                        checked = time.monotonic()
                        # A restarted broker's log starts at 0 again: positions of the old
                        # one would skip its first records (the console stood still).
                        if await watch.verdict() == RunWatch.CHANGED:
                            watch.accept()
                            for tp in consumer.raw.assignment():
                                consumer.raw.seek(tp, 0)
        finally:
            await watch.stop()

    def _read(self, records: list[Any]) -> None:
        from topics.events import PolicyUpdate, Reward, TrajectoryComplete

        for record in records:
            event = record.event
            if isinstance(event, Reward) and event.judge_version == self.judge_version:
                self.rewards.append(event)
                self._since.append(event)
                self.trajectories_by_version[event.policy_version] += 1
            elif isinstance(event, TrajectoryComplete):
                self.played += 1
            elif isinstance(event, PolicyUpdate) and event.policy_version > 0:
                self._iteration(event)
                if self.last_version >= self._wanted:
                    self._shown.set()
        self.console.counts(played=self.played, scored=len(self.rewards))

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    @property
    def last_version(self) -> int:
        """The newest policy version read and shown (warm start or RL)."""
        return max((r["policy_version"] for r in [*self.warm_rows, *self.rows]), default=0)

    async def shown(self, version: int, timeout_s: float = 15.0) -> None:
        """Wait until `version`'s update has been read and shown, or `timeout_s` seconds."""
        self._wanted = version
        if self.last_version < version:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._shown.wait(), timeout_s)

    def _iteration(self, update: Any) -> None:
        if any(r["policy_version"] == update.policy_version for r in self.rows):
            return  # a re-announcement (trainer restart)
        scored = [r for r in self._since if r.scored]
        self._since = []
        m = update.metrics
        now = time.monotonic()
        row = {
            "iteration": len(self.rows) + 1,
            "label": str(len(self.rows) + 1),
            "policy_version": update.policy_version,
            **_trained_on(update.policy_version, m, scored),
            "step_time_s": round(m.get("step_time_s", 0.0), 1),
            "loss": round(m.get("loss", 0.0), 5),
            "groups": int(m.get("groups", 0)),
            "groups_all_equal": int(m.get("groups_all_equal", 0)),
            "elapsed_s": round(now - self.started, 1),
            "duration_s": round(now - self._last_at, 1),
        }
        self._last_at = now
        self.last_uri = update.checkpoint_uri
        self.console.counts(version=update.policy_version)
        reward = "n/a" if row["mean_reward"] is None else f"{row['mean_reward']:+.2f}"
        passed = "n/a" if row["pass_rate"] is None else f"{row['pass_rate']:.0%}"
        if update.policy_version <= self.warm_steps:
            # Its rollouts are the scripted episodes the step trained on, not rewards since.
            row.update(phase="warm start", label=f"warm {update.policy_version}",
                       rollouts=int(m.get("rollouts", 0)), pass_rate=None, mean_reward=None)  # fmt: skip
            self.warm_rows.append(row)
            self.console.iteration(row, (
                f"warm start step {update.policy_version}: SFT on {row['rollouts']} scripted "
                f"episodes, loss {row['loss']}, step {row['step_time_s']}s; policy "
                f"v{update.policy_version}; {self._elapsed()}"
            ))  # fmt: skip
            return
        row["iteration"] = len(self.rows) + 1
        row["phase"] = "rl"
        self.rows.append(row)
        self.console.iteration(row, (
            f"iteration {row['iteration']}/{self.iterations}: policy v{update.policy_version} "
            f"from {row['rollouts']} rollouts in {row['groups']} groups "
            f"({row['groups_all_equal']} all-equal; played by "
            f"v{','.join(map(str, row['rollout_versions'])) or '-'}): reward {reward}, pass "
            f"{passed}; step {row['step_time_s']}s, loss {row['loss']}; {self._elapsed()}"
        ))  # fmt: skip


def _trained_on(version: int, metrics: dict[str, float], since: list[Any]) -> dict[str, Any]:
    """What a step trained on: its groups' rollouts, their rewards and the versions that
    played them (from the step's metrics; else the rewards scored since the last update)."""
    if "pass_rate" in metrics and "reward_mean" in metrics:
        lo, hi = int(metrics.get("lag_min", 0)), int(metrics.get("lag_max", 0))
        return {
            "rollouts": int(metrics.get("rollouts", 0)),
            "mean_reward": round(metrics["reward_mean"], 3),
            "pass_rate": round(metrics["pass_rate"], 3),
            # a step turns version - 1 into version; a rollout `lag` behind was played by
            "rollout_versions": list(range(max(0, version - 1 - hi), version - lo)),
        }
    n = len(since)
    return {
        "rollouts": n,
        "mean_reward": round(sum(r.score for r in since) / n, 3) if n else None,
        "pass_rate": round(sum(r.score >= 1.0 for r in since) / n, 3) if n else None,
        "rollout_versions": sorted({r.policy_version for r in since}),
    }
