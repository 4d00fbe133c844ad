"""Where a task's failed rollouts leave its reference (pure, no I/O).

**Outcomes.** A rollout is a finished trajectory (not an environment failure) with a
scored reward; it succeeds when its latest reward is 1.0. A task's pass rate is its
successes over its rollouts.

**Deviation.** The state-changing actions of a rollout are its parsed, accepted actions
other than `wait`, `screenshot`, `cursor_position`, `mouse_move`, `done` and `fail` (they
leave the desktop as it was). Two actions *match* when they have the same name and: the
same key combos (as sets of keysyms per combo: `ctrl+alt+t` = `alt+ctrl+t`); the same
typed text up to CRLF and runs of spaces or tabs; pointer coordinates within `tolerance`
grid units (of 1000) of each other; the same scroll direction and click modifiers; the
same `write_file` path and content; the same `answer` up to case and spacing. A failed
rollout **deviates at reference action i** when its first i state-changing actions match
the reference's first i and its next one does not (or it ends there); i = n means it
reproduced the whole reference and still failed. The reference is the task's own solution
when it has one, else its shortest successful rollout. The task's **deviation point** is
the most common i over its failed rollouts (ties: the earliest).

**Sub-goals.** With n reference actions, the intermediate sub-goals are the states after
reference actions 0..e for e in 0..n-2 (e = n-1 is the task itself); they are taken
nearest the deviation point first: e = min(i, n-2), then the later ones, then the earlier.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runtime.envs.desktop.actions import ActionError, parse_key_combos
from topics.events import Reward, RolloutStep, TrajectoryComplete

__all__ = [
    "NO_OP_ACTIONS",
    "Deviation",
    "DeviationPoint",
    "Rollout",
    "TaskOutcome",
    "Turn",
    "actions_match",
    "deviation_point",
    "find_deviation",
    "fold_rollouts",
    "state_changing",
    "subgoal_ends",
]

NO_OP_ACTIONS = frozenset({"wait", "screenshot", "cursor_position", "mouse_move", "done", "fail"})
_BLANKS = re.compile(r"[ \t]+")


# -- rollouts -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    """One turn of a rollout: its action (None when unparsed) and whether it was refused."""

    step: int
    action: dict[str, Any] | None
    error: str | None = None


@dataclass(frozen=True)
class Rollout:
    """A finished, scored trajectory of one task."""

    trajectory_id: str
    task_id: str
    score: float
    status: str
    turns: list[Turn] | None  # None when the log lacks some of its steps

    @property
    def succeeded(self) -> bool:
        """The latest reward is 1.0."""
        return self.score >= 1.0


@dataclass(frozen=True)
class TaskOutcome:
    """A task's rollouts in the log."""

    task_id: str
    rollouts: list[Rollout]

    @property
    def pass_rate(self) -> float:
        """Successful rollouts over all rollouts."""
        return (
            sum(r.succeeded for r in self.rollouts) / len(self.rollouts) if self.rollouts else 0.0
        )

    @property
    def failed(self) -> list[Rollout]:
        """The rollouts that did not succeed."""
        return [r for r in self.rollouts if not r.succeeded]

    @property
    def succeeded(self) -> list[Rollout]:
        """The rollouts that succeeded."""
        return [r for r in self.rollouts if r.succeeded]


def fold_rollouts(
    steps: Iterable[RolloutStep],
    completes: Iterable[TrajectoryComplete],
    rewards: Iterable[Reward],
) -> dict[str, TaskOutcome]:
    """Per task, its finished rollouts with their latest scored reward and their turns."""
    latest: dict[str, Reward] = {}
    for reward in rewards:
        if not reward.scored:
            continue
        seen = latest.get(reward.trajectory_id)
        if seen is None or reward.ts_ms >= seen.ts_ms:
            latest[reward.trajectory_id] = reward
    turns: dict[str, dict[int, Turn]] = {}
    for s in steps:
        turns.setdefault(s.trajectory_id, {})[s.step] = Turn(s.step, s.action, s.action_error)
    out: dict[str, list[Rollout]] = {}
    for complete in completes:
        reward = latest.get(complete.trajectory_id)
        if complete.status == "error" or reward is None:
            continue
        seen_turns = turns.get(complete.trajectory_id, {})
        whole = len(seen_turns) == complete.num_steps
        task_id = complete.task_id or reward.task_id
        rollout = Rollout(
            complete.trajectory_id, task_id, float(reward.score), complete.status,
            [seen_turns[i] for i in sorted(seen_turns)] if whole else None,
        )  # fmt: skip
        out.setdefault(task_id, []).append(rollout)
    return {
        task_id: TaskOutcome(task_id, sorted(rollouts, key=lambda r: r.trajectory_id))
        for task_id, rollouts in sorted(out.items())
    }


# -- matching actions ---------------------------------------------------------------------
def state_changing(turns: Iterable[Turn]) -> list[Turn]:
    """The turns that can change the desktop: parsed, accepted, and not a no-op action."""
    return [
        t
        for t in turns
        if t.action is not None and not t.error and t.action.get("action") not in NO_OP_ACTIONS
    ]


def _combos(text: Any) -> Any:
    try:
        return [frozenset(combo) for combo in parse_key_combos(text)]
    except ActionError:
        return str(text).lower()


def _typed(text: Any) -> str:
    return _BLANKS.sub(" ", str(text or "").replace("\r\n", "\n"))


def _near(a: Any, b: Any, tolerance: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return math.dist([float(v) for v in a], [float(v) for v in b]) <= tolerance
    except (TypeError, ValueError):
        return a == b


def actions_match(a: dict[str, Any], b: dict[str, Any], tolerance: float = 30.0) -> bool:
    """Whether two actions do the same thing (see the module doc for what counts as same)."""
    name = a.get("action")
    if name != b.get("action"):
        return False
    if name in ("key", "hold_key"):
        return _combos(a.get("text")) == _combos(b.get("text"))
    if name == "type":
        return _typed(a.get("text")) == _typed(b.get("text"))
    if name == "answer":
        return _typed(a.get("text")).strip().casefold() == _typed(b.get("text")).strip().casefold()
    if name == "write_file":
        return a.get("text") == b.get("text") and _typed(a.get("content")) == _typed(
            b.get("content")
        )
    if name == "scroll" and a.get("scroll_direction", "down") != b.get("scroll_direction", "down"):
        return False
    if str(a.get("text") or "").lower() != str(b.get("text") or "").lower():  # click modifiers
        return False
    return all(_near(a.get(f), b.get(f), tolerance) for f in ("coordinate", "start_coordinate"))


# -- deviation ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Deviation:
    """Where one failed rollout left the reference."""

    trajectory_id: str
    index: int  # reference actions it reproduced before departing (n: all of them)
    step: int | None  # the rollout's turn that departed; None when it ended instead
    expected: dict[str, Any] | None  # the reference's action there (None past its end)
    observed: dict[str, Any] | None  # the rollout's action instead (None: it ended)


def find_deviation(
    rollout: Rollout, reference: list[dict[str, Any]], tolerance: float = 30.0
) -> Deviation:
    """The earliest reference action a rollout does not reproduce (reference: state-changing)."""
    done = state_changing(rollout.turns or [])
    for i, expected in enumerate(reference):
        if i >= len(done):
            return Deviation(rollout.trajectory_id, i, None, expected, None)
        if not actions_match(done[i].action or {}, expected, tolerance):
            return Deviation(rollout.trajectory_id, i, done[i].step, expected, done[i].action)
    extra = done[len(reference)] if len(done) > len(reference) else None
    return Deviation(
        rollout.trajectory_id, len(reference), extra.step if extra else None, None,
        extra.action if extra else None,
    )  # fmt: skip


@dataclass(frozen=True)
class DeviationPoint:
    """Where a task's failed rollouts typically leave its reference."""

    task_id: str
    reference: list[dict[str, Any]]  # the reference's state-changing actions
    reference_source: str  # "solution" or "rollout:<trajectory id>"
    index: int  # the most common deviation index (ties: the earliest)
    deviations: list[Deviation]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: the point, what was expected, what the rollouts did instead."""
        at = [d for d in self.deviations if d.index == self.index]
        observed = Counter(json.dumps(d.observed, sort_keys=True) for d in at)
        return {
            "index": self.index,
            "expected": self.reference[self.index] if self.index < len(self.reference) else None,
            "observed": [
                {"action": json.loads(a), "rollouts": n} for a, n in observed.most_common(3)
            ],
            "histogram": dict(sorted(Counter(d.index for d in self.deviations).items())),
            "failed_rollouts": len(self.deviations),
            "reference_source": self.reference_source,
        }


def deviation_point(
    outcome: TaskOutcome, solution: list[dict[str, Any]] | None, tolerance: float = 30.0
) -> DeviationPoint | None:
    """The task's deviation point against its solution (else its shortest success), or None."""
    if solution:
        source = "solution"
        reference = [
            t.action
            for t in state_changing(Turn(i, a) for i, a in enumerate(solution))
            if t.action is not None
        ]
    else:
        wins = [r for r in outcome.succeeded if r.turns is not None]
        if not wins:
            return None
        best = min(wins, key=lambda r: (len(state_changing(r.turns or [])), r.trajectory_id))
        source = f"rollout:{best.trajectory_id}"
        reference = [t.action for t in state_changing(best.turns or []) if t.action is not None]
    failed = [r for r in outcome.failed if r.turns is not None]
    if not reference or not failed:
        return None
    deviations = [find_deviation(r, reference, tolerance) for r in failed]
    counts = Counter(d.index for d in deviations)
    index = min(counts, key=lambda i: (-counts[i], i))
    return DeviationPoint(outcome.task_id, reference, source, index, deviations)


def subgoal_ends(n: int, deviation: int, k: int) -> list[int]:
    """Up to k intermediate sub-goals (reference action indices), nearest the deviation first."""
    if n < 2 or k < 1:
        return []
    first = min(max(deviation, 0), n - 2)
    order = [*range(first, n - 1), *range(first - 1, -1, -1)]
    return order[:k]
