"""The dashboard's view model: events and offset samples in, JSON-ready panels out (pure).

Panels and what feeds them:

    summary     runs, counts, the latest policy version, where the data comes from
    iterations  `reward`: per policy version (an iteration) the mean reward, the pass rate
                (share of scored rewards with score >= threshold) and the unscored count
    trainer     `policy-updates`: every metric the trainer reported, per version
    pool        `task-stats`: histogram of EMA pass rates with the frontier band μ ± σ
    tasks       `task-stats`: the per-task table, most recently updated first
    filmstrip   `rollout-step` + `trajectory-complete` (+ `reward`): the newest finished
                trajectories, turn by turn, with each turn's screenshot and action
    services    offset samples: per consumer group its lag and consumed records/s, per
                topic its records and written records/s, over time

Every panel has a version that goes up when something changes it, so the server sends a
client only the panels that moved since its last send.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from topics.events import (
    Event,
    PolicyUpdate,
    Reward,
    RolloutStep,
    RunStarted,
    TaskStats,
    TrajectoryComplete,
)
from topics.registry import topic_names

__all__ = [
    "DashboardConfig",
    "DashboardState",
    "OffsetSample",
    "PANELS",
    "SERVICE_GROUPS",
    "action_label",
]

# Sent in this order: the header's status line last, so "live" shows once the rest is drawn.
PANELS = ("iterations", "trainer", "pool", "tasks", "filmstrip", "services", "summary")

# Each service's consumer group and the topics it reads (its processor's `topics`).
SERVICE_GROUPS: dict[str, tuple[str, ...]] = {
    "archiver": tuple(topic_names()),
    "rollout": ("rollout-requests",),
    "judge": ("trajectory-complete",),
    "segmenter": ("rollout-step", "trajectory-complete"),
    "sampler": ("reward", "policy-updates"),
    "trainer": ("segment-ready", "reward"),
}

# Trajectories whose steps are held while they have not finished (the paper ran 600
# environments at once). A larger fleet has more open at once than this: the ones already
# followed are kept whole and newcomers wait for room (evicting the least recently stepped
# would cut the early frames off every trajectory once more than this many run at once),
# and one silent this long (by event time: abandoned, its completion never comes) makes room.
_OPEN_TRAJECTORIES = 2048
_OPEN_IDLE_MS = 15 * 60 * 1000
_UNFOLLOWED = 65_536  # ids of trajectories not followed, remembered (a 60,000-environment fleet)
_REWARD_MEMORY = 20_000  # trajectory -> score, for filmstrip entries whose reward comes later


@dataclass(frozen=True)
class DashboardConfig:
    """What the panels show and how much of it."""

    pass_threshold: float = 1.0  # a scored reward at or above this is a pass
    mu: float = 0.5  # centre of the frontier band (Frontier Sampling's μ)
    sigma: float = 0.25  # half-width of the band (σ; ScienceBoard used 0.15)
    bins: int = 20  # histogram bins over [0, 1]
    judge_version: str | None = None  # rewards of this judge; None: the one with most rewards
    trajectories: int = 6  # finished trajectories in the filmstrip
    frames: int = 50  # turns kept per trajectory (the last ones)
    task_rows: int = 300  # rows of the per-task table sent to the page
    history: int = 180  # offset samples kept for the services charts
    groups: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(SERVICE_GROUPS))


@dataclass(frozen=True)
class OffsetSample:
    """The log's offsets at one moment: highwater per topic, committed per group and topic.

    Values are sums over a topic's partitions; a committed value of None means the group
    has committed nothing on that topic.
    """

    at_s: float  # seconds on any clock that only goes forward
    highwater: dict[str, int]
    committed: dict[str, dict[str, int | None]]


@dataclass
class _Iteration:
    rewards: int = 0
    scored: int = 0
    passed: int = 0
    score_sum: float = 0.0

    @property
    def unscored(self) -> int:
        return self.rewards - self.scored


@dataclass
class _Film:
    trajectory_id: str
    task_id: str
    status: str
    num_steps: int
    policy_version: int
    seconds: float
    ts_ms: int
    final_ref: str | None
    error: str | None
    frames: dict[int, dict[str, Any]]
    score: float | None = None
    scored: bool | None = None


def action_label(action: dict[str, Any] | None, error: str | None = None) -> str:
    """Return a short human label for an agent's action (or why it had none)."""
    if action is None:
        return f"no action: {error}" if error else "no action"
    name = str(action.get("action", "?"))
    parts = []
    if isinstance(action.get("coordinate"), list | tuple):
        parts.append("(" + ", ".join(str(round(float(c))) for c in action["coordinate"]) + ")")
    for key in ("text", "keys", "key", "direction", "amount", "duration", "path"):
        if key in action and action[key] not in (None, ""):
            value = action[key]
            text = repr(value) if isinstance(value, str) else str(value)
            parts.append(text if len(text) <= 40 else text[:37] + "...'")
    label = " ".join([name, *parts])
    return f"{label} (refused: {error})" if error else label


def _round(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


class DashboardState:
    """Everything the page shows, folded from events; call `panel(name)` for the JSON."""

    def __init__(self, config: DashboardConfig | None = None, source: str = "") -> None:
        self.config = config or DashboardConfig()
        self.source = source  # shown in the header: the broker or the archive and run
        self.versions = dict.fromkeys(PANELS, 0)
        self.status = "starting"  # the live source's health, shown in the header
        self.runs: list[RunStarted] = []
        self.undecodable_records = 0
        self._handlers = {
            "runs": self._run,
            "reward": self._reward,
            "task-stats": self._task_stats,
            "policy-updates": self._policy_update,
            "trajectory-complete": self._complete,
            "rollout-step": self._step,
        }
        self._reward_ids: set[str] = set()
        self._iterations: dict[str, dict[int, _Iteration]] = {}  # judge -> version -> sums
        self._judges: dict[str, int] = {}
        self._statuses: dict[str, dict[str, int]] = {}  # judge -> end status -> rewards
        self._scores: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self._updates: dict[int, dict[str, float]] = {}
        self._checkpoints: dict[int, str] = {}
        self._tasks: OrderedDict[str, TaskStats] = OrderedDict()  # oldest update first
        self._films: dict[str, _Film] = {}
        self._open: OrderedDict[str, dict[int, dict[str, Any]]] = OrderedDict()
        self._open_seen: dict[str, int] = {}  # open trajectory -> its last step's event time
        self._unfollowed: OrderedDict[str, None] = OrderedDict()  # turns not followed, newest last
        self._samples: list[OffsetSample] = []
        self._totals: dict[str, int] = {}  # topic -> records, when no live offsets exist

    # -- input ----------------------------------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        """Return the topics whose events this state folds in."""
        return tuple(self._handlers)

    def apply(self, topic_name: str, event: Event) -> None:
        """Fold one event of a topic into the panels."""
        handler = self._handlers.get(topic_name)
        if handler is not None:
            handler(event)

    def undecodable(self) -> None:
        """Count a record that did not decode (it stays out of every panel)."""
        self.undecodable_records += 1
        self._touch("summary")

    def forget_task(self, task_id: str) -> None:
        """Drop a task deleted from `task-stats` (a tombstone)."""
        if self._tasks.pop(task_id, None) is not None:
            self._touch("pool", "tasks")

    def set_status(self, status: str) -> None:
        """Set the source's health line ("live", "broker unreachable: ...", "archive")."""
        if status != self.status:
            self.status = status
            self._touch("summary")

    def add_offsets(self, sample: OffsetSample) -> None:
        """Record the log's offsets at one moment (the services panel)."""
        self._samples.append(sample)
        del self._samples[: -self.config.history]
        self._touch("services")

    def set_topic_totals(self, totals: dict[str, int]) -> None:
        """Record how many records each topic holds (archive mode: no live offsets)."""
        self._totals = dict(totals)
        self._touch("services")

    def _touch(self, *panels: str) -> None:
        for name in panels:
            self.versions[name] += 1

    def _run(self, event: RunStarted) -> None:
        if all(r.run_id != event.run_id for r in self.runs):
            self.runs.append(event)
            self._touch("summary")

    def _reward(self, event: Reward) -> None:
        if event.dedup_id() in self._reward_ids:
            return  # redelivered (at-least-once)
        self._reward_ids.add(event.dedup_id())
        self._judges[event.judge_version] = self._judges.get(event.judge_version, 0) + 1
        by_version = self._iterations.setdefault(event.judge_version, {})
        it = by_version.setdefault(event.policy_version, _Iteration())
        it.rewards += 1
        statuses = self._statuses.setdefault(event.judge_version, {})
        statuses[event.status] = statuses.get(event.status, 0) + 1
        if event.scored:
            it.scored += 1
            it.score_sum += event.score
            it.passed += event.score >= self.config.pass_threshold
        if event.judge_version == self.judge_version:
            self._scores[event.trajectory_id] = (event.score, event.scored)
            self._scores.move_to_end(event.trajectory_id)
            while len(self._scores) > _REWARD_MEMORY:
                self._scores.popitem(last=False)
            film = self._films.get(event.trajectory_id)
            if film is not None:
                film.score, film.scored = event.score, event.scored
                self._touch("filmstrip")
        self._touch("iterations", "summary")

    def _task_stats(self, event: TaskStats) -> None:
        self._tasks[event.task_id] = event
        self._tasks.move_to_end(event.task_id)
        self._touch("pool", "tasks")

    def _policy_update(self, event: PolicyUpdate) -> None:
        self._updates[event.policy_version] = dict(event.metrics)
        self._checkpoints[event.policy_version] = event.checkpoint_uri
        self._touch("trainer", "summary")

    def _complete(self, event: TrajectoryComplete) -> None:
        if event.trajectory_id in self._films or event.trajectory_id in self._unfollowed:
            return  # shown already, or its turns were not followed (a fleet past the bound)
        films = sorted(self._films.values(), key=lambda f: f.ts_ms)
        if len(films) >= self.config.trajectories and event.ts_ms <= films[0].ts_ms:
            self._open.pop(event.trajectory_id, None)
            self._open_seen.pop(event.trajectory_id, None)
            return  # older than every trajectory shown (read out of order across partitions)
        score = self._scores.get(event.trajectory_id)
        self._films[event.trajectory_id] = _Film(
            trajectory_id=event.trajectory_id, task_id=event.task_id, status=event.status,
            num_steps=event.num_steps, policy_version=event.policy_version,
            seconds=event.seconds, ts_ms=event.ts_ms,
            final_ref=event.artifacts.get("final_screenshot"), error=event.error,
            frames=self._open.pop(event.trajectory_id, {}),
            score=score[0] if score else None, scored=score[1] if score else None,
        )  # fmt: skip
        self._open_seen.pop(event.trajectory_id, None)
        for old in films[: max(0, len(films) + 1 - self.config.trajectories)]:
            del self._films[old.trajectory_id]
        self._touch("filmstrip")

    def _step(self, event: RolloutStep) -> None:
        frame = {
            "step": event.step,
            "ref": event.observation_ref,
            "action": action_label(event.action, event.action_error),
            "error": event.action_error is not None,
            "point": _point(event.action),
            "policy_version": event.policy_version,
        }
        film = self._films.get(event.trajectory_id)
        if film is not None:  # its completion was read first (another topic)
            frames = film.frames
            self._touch("filmstrip")
        else:
            frames = self._open.get(event.trajectory_id)
            if frames is None:
                if not self._room_for_one(event.ts_ms):
                    self._unfollowed[event.trajectory_id] = None  # never shown: no frames
                    while len(self._unfollowed) > _UNFOLLOWED:
                        self._unfollowed.popitem(last=False)
                    return
                frames = self._open[event.trajectory_id] = {}
            self._open.move_to_end(event.trajectory_id)
            self._open_seen[event.trajectory_id] = event.ts_ms
        frames[event.step] = frame
        while len(frames) > self.config.frames:
            del frames[min(frames)]

    def _room_for_one(self, now_ms: int) -> bool:
        """Whether one more open trajectory can be followed, dropping abandoned ones first."""
        if len(self._open) < _OPEN_TRAJECTORIES:
            return True
        # The least recently stepped come first: drop those silent for too long.
        for tid in list(self._open):
            if now_ms - self._open_seen.get(tid, now_ms) <= _OPEN_IDLE_MS:
                break
            self._open.pop(tid)
            self._open_seen.pop(tid, None)
        return len(self._open) < _OPEN_TRAJECTORIES

    # -- output ---------------------------------------------------------------------------

    @property
    def judge_version(self) -> str | None:
        """Return the judge version whose rewards the charts show."""
        if self.config.judge_version is not None:
            return self.config.judge_version
        if not self._judges:
            return None
        return max(self._judges, key=lambda v: (self._judges[v], v))

    def panel(self, name: str) -> dict[str, Any]:
        """Return one panel's JSON-ready content."""
        return getattr(self, f"_panel_{name}")()

    def panels(self) -> dict[str, dict[str, Any]]:
        """Return every panel's content."""
        return {name: self.panel(name) for name in PANELS}

    def _panel_summary(self) -> dict[str, Any]:
        judge = self.judge_version or ""
        iterations = self._iterations.get(judge, {}).values()
        return {
            "source": self.source,
            "status": self.status,
            "runs": [{"run_id": r.run_id, "resumed_from": r.resumed_from} for r in self.runs],
            "rewards": sum(it.rewards for it in iterations),
            "unscored": sum(it.unscored for it in iterations),
            "statuses": dict(sorted(self._statuses.get(judge, {}).items())),
            "tasks": len(self._tasks),
            "undecodable": self.undecodable_records,
            "policy_version": max(self._updates, default=None),
            "judge_version": self.judge_version,
            "judges": dict(self._judges),
        }

    def _panel_iterations(self) -> dict[str, Any]:
        rows = []
        for version, it in sorted(self._iterations.get(self.judge_version or "", {}).items()):
            rows.append(
                {
                    "version": version,
                    "rewards": it.rewards,
                    "scored": it.scored,
                    "unscored": it.unscored,
                    "passed": it.passed,
                    "mean_reward": _round(it.score_sum / it.scored) if it.scored else None,
                    "pass_rate": _round(it.passed / it.scored) if it.scored else None,
                }
            )
        return {
            "judge_version": self.judge_version,
            "threshold": self.config.pass_threshold,
            "rows": rows,
        }

    def _panel_trainer(self) -> dict[str, Any]:
        versions = sorted(self._updates)
        names = sorted({k for m in self._updates.values() for k in m})
        series = {
            name: [
                _round(float(self._updates[v][name]), 6) if name in self._updates[v] else None
                for v in versions
            ]
            for name in names
        }
        latest = versions[-1] if versions else None
        return {
            "versions": versions,
            "metrics": series,
            "checkpoint": self._checkpoints.get(latest) if latest is not None else None,
        }

    def _band(self) -> tuple[float, float]:
        c = self.config
        return max(0.0, c.mu - c.sigma), min(1.0, c.mu + c.sigma)

    def _panel_pool(self) -> dict[str, Any]:
        bins = self.config.bins
        active, excluded = [0] * bins, [0] * bins
        unmeasured = in_band = 0
        low, high = self._band()
        for stats in self._tasks.values():
            rate = stats.ema_pass_rate
            if rate < 0:
                unmeasured += 1
                continue
            counts = excluded if stats.state == "excluded" else active
            counts[min(bins - 1, int(min(rate, 1.0) * bins))] += 1
            in_band += stats.state != "excluded" and low <= rate <= high
        return {
            "edges": [round(i / bins, 6) for i in range(bins + 1)],
            "active": active,
            "excluded": excluded,
            "unmeasured": unmeasured,
            "in_band": in_band,
            "tasks": len(self._tasks),
            "mu": self.config.mu,
            "sigma": self.config.sigma,
            "band": [low, high],
        }

    def _panel_tasks(self) -> dict[str, Any]:
        low, high = self._band()
        rows = []
        for stats in reversed(self._tasks.values()):
            if len(rows) >= self.config.task_rows:
                break
            ema = stats.ema_pass_rate if stats.ema_pass_rate >= 0 else None
            rows.append(
                {
                    "task_id": stats.task_id,
                    "ema": _round(ema),
                    "initial": _round(stats.initial_pass_rate),
                    "weight": _round(stats.weight),
                    "attempts": stats.attempts,
                    "rollouts": stats.rollouts,
                    "successes": stats.successes,
                    "last_score": _round(stats.last_score),
                    "state": stats.state,
                    "policy_version": stats.policy_version,
                    "in_band": ema is not None and low <= ema <= high,
                }
            )
        return {"total": len(self._tasks), "rows": rows}

    def _panel_filmstrip(self) -> dict[str, Any]:
        films = sorted(self._films.values(), key=lambda f: f.ts_ms, reverse=True)
        return {
            "trajectories": [
                {
                    "trajectory_id": f.trajectory_id,
                    "task_id": f.task_id,
                    "status": f.status,
                    "num_steps": f.num_steps,
                    "policy_version": f.policy_version,
                    "seconds": _round(f.seconds, 1),
                    "ts_ms": f.ts_ms,
                    "score": _round(f.score),
                    "scored": f.scored,
                    "error": f.error,
                    "final_ref": f.final_ref,
                    "frames": [f.frames[s] for s in sorted(f.frames)],
                }
                for f in films
            ]
        }

    def _panel_services(self) -> dict[str, Any]:
        samples = self._samples
        if not samples:
            return {"live": False, "topics": self._topic_rows(), "groups": [], "history": []}
        last = samples[-1]
        prev = samples[-2] if len(samples) > 1 else None
        groups = []
        for group, group_topics in self.config.groups.items():
            committed, lag = _group_position(last, group, group_topics)
            rate = None
            if prev is not None and committed is not None:
                before, _ = _group_position(prev, group, group_topics)
                if before is not None and last.at_s > prev.at_s:
                    rate = _round(max(0, committed - before) / (last.at_s - prev.at_s), 2)
            groups.append(
                {
                    "group": group,
                    "topics": list(group_topics),
                    "committed": committed,
                    "lag": lag,
                    "rate": rate,
                }
            )
        return {
            "live": True,
            "topics": self._topic_rows(),
            "groups": groups,
            "history": self._history(),
        }

    def _topic_rows(self) -> list[dict[str, Any]]:
        samples = self._samples
        if not samples:
            return [{"topic": t, "records": n, "rate": None} for t, n in self._totals.items()]
        last, prev = samples[-1], samples[-2] if len(samples) > 1 else None
        rows = []
        for name, records in last.highwater.items():
            rate = None
            if prev is not None and name in prev.highwater and last.at_s > prev.at_s:
                rate = _round(max(0, records - prev.highwater[name]) / (last.at_s - prev.at_s), 2)
            rows.append({"topic": name, "records": records, "rate": rate})
        return rows

    def _history(self) -> list[dict[str, Any]]:
        """Per sample (after the first): seconds since the first, lag and records/s per group."""
        out = []
        origin = self._samples[0].at_s
        for prev, cur in zip(self._samples, self._samples[1:], strict=False):
            dt = cur.at_s - prev.at_s
            lag, rate = {}, {}
            for group, group_topics in self.config.groups.items():
                committed, lag[group] = _group_position(cur, group, group_topics)
                before, _ = _group_position(prev, group, group_topics)
                ok = committed is not None and before is not None and dt > 0
                rate[group] = _round(max(0, committed - before) / dt, 2) if ok else None
            out.append({"t": round(cur.at_s - origin, 2), "lag": lag, "rate": rate})
        return out


def _group_position(
    sample: OffsetSample, group: str, group_topics: tuple[str, ...]
) -> tuple[int | None, int | None]:
    """Return (records committed, lag) of a group over its topics, or Nones with no commit."""
    committed = sample.committed.get(group, {})
    if all(committed.get(t) is None for t in group_topics):
        return None, None
    done = sum(committed.get(t) or 0 for t in group_topics)
    lag = sum(max(0, sample.highwater.get(t, 0) - (committed.get(t) or 0)) for t in group_topics)
    return done, lag


def _point(action: dict[str, Any] | None) -> list[float] | None:
    """Return the action's coordinate on the 1000x1000 grid, if it has one."""
    coordinate = (action or {}).get("coordinate")
    if isinstance(coordinate, list | tuple) and len(coordinate) == 2:
        try:
            return [float(coordinate[0]), float(coordinate[1])]
        except (TypeError, ValueError):
            return None
    return None
