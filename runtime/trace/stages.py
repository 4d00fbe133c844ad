"""What a trajectory's timeline holds, stage by stage, and the gaps measured between them.

Plain values (JSON-ready with `dataclasses.asdict`), built by runtime/trace/timeline.py.
Times are ms since the epoch, from the events' own clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "GAPS",
    "GAP_LABELS",
    "Request",
    "Turn",
    "Attempt",
    "Completion",
    "Score",
    "SegmentRow",
    "Segments",
    "Training",
    "TaskAfter",
    "Member",
    "Timeline",
]

# The stage gaps a timeline measures, in order; `turn` has one value per turn.
GAPS = (
    "request_to_first_turn",
    "turn",
    "last_turn_to_complete",
    "complete_to_reward",
    "complete_to_segments",
    "segments_to_trained",
    "trained_to_announced",
)
GAP_LABELS = {
    "request_to_first_turn": "request → first turn",
    "turn": "turn",
    "last_turn_to_complete": "last turn → complete",
    "complete_to_reward": "complete → reward",
    "complete_to_segments": "complete → segments",
    "segments_to_trained": "segments → trained",
    "trained_to_announced": "trained → announced",
}


@dataclass(frozen=True)
class Request:
    """The rollout request, and why its task was drawn."""

    at_ms: int
    policy_version: int
    max_steps: int
    batch: int | None  # the sampler's batch number (from the group id); None: not the sampler's
    batch_tasks: int  # groups requested in that batch
    drawn: str  # "initial pass", "pool", "outside the pool", "every live task" or "unknown"
    pool_rank: int | None  # 1-based rank of the task by weight among the live tasks
    live_tasks: int  # tasks with an EMA, in the pool, when it was drawn
    pool_size: int  # min(live tasks, pool_factor × batch tasks)
    ema: float | None  # the task's EMA pass rate when requested (None: no group counted yet)
    weight: float | None
    groups_counted: int  # the task's groups counted before it


@dataclass(frozen=True)
class Turn:
    """One agent turn."""

    step: int
    started_ms: float
    at_ms: int  # when its record was made (the turn's end)
    latency_ms: float
    policy_version: int
    observation: list[str]  # what the policy saw: "screenshot", "a11y", "text"
    screenshot: str | None  # blob ref of the full screenshot shown before the turn
    screenshot_size: list[int]  # [w, h] the policy saw it at
    action: dict[str, Any] | None
    action_text: str
    action_error: str | None
    response_text: str
    tokens: int  # tokens generated
    prompt_tokens: int
    finish_reason: str
    timings_ms: dict[str, float]
    worker_id: str


@dataclass(frozen=True)
class Attempt:
    """Another attempt at the same request (a retry after an environment failure)."""

    trajectory_id: str
    attempt: int
    status: str  # its completion's status, or "unfinished"
    error: str | None
    at_ms: int | None


@dataclass(frozen=True)
class Completion:
    """The end of the episode."""

    at_ms: int
    status: str
    num_steps: int
    max_steps: int
    seconds: float
    error: str | None
    answer: str | None
    artifacts: dict[str, str]  # what the judge reads: name -> blob ref
    policy_version: int
    policy_version_last: int
    attempt: int
    worker_id: str
    retries: list[Attempt]


@dataclass(frozen=True)
class Score:
    """One judge's reward."""

    at_ms: int
    score: float
    judge_version: str
    reason: str
    metric_score: float | None  # what the task's metric said, before the status rules
    scored: bool
    status: str


@dataclass(frozen=True)
class SegmentRow:
    """One training segment."""

    index: int
    tokens: int
    images: int
    trained_tokens: int
    policy_version: int


@dataclass(frozen=True)
class Segments:
    """How the segmenter cut the trajectory."""

    first_ms: int
    at_ms: int  # the last segment's record: the trajectory is ready for training
    count: int
    expected: int  # num_segments the segmenter announced
    mode: str
    tokens: int
    trained_tokens: int
    images: int
    rows: list[SegmentRow]


@dataclass(frozen=True)
class Training:
    """The trainer's step that consumed the trajectory's group, and its announcement."""

    version: int  # the version the step produced
    step_started_ms: float
    trained_ms: float  # training done; the checkpoint was written after it
    announced_ms: int
    advantage: float | None  # the trajectory's advantage in its group (None: not trained on)
    groups: int  # groups in the step
    rollouts: int
    loss: float | None
    step_time_s: float | None
    checkpoint_uri: str


@dataclass(frozen=True)
class TaskAfter:
    """The task's sampler stats once the group was folded in."""

    at_ms: int
    ema: float
    weight: float
    groups_counted: int
    state: str


@dataclass(frozen=True)
class Member:
    """One rollout of the GRPO group, side by side with the others."""

    trajectory_id: str
    sample_index: int
    status: str  # its completion's status, or "unfinished"
    score: float | None
    scored: bool | None
    advantage: float | None
    num_steps: int
    policy_version: int | None
    attempts: int


@dataclass(frozen=True)
class Timeline:
    """A trajectory's life from request to weights, with the time between stages."""

    trajectory_id: str
    request_id: str
    group_id: str
    task_id: str
    sample_index: int
    group_size: int
    attempt: int
    run_id: str
    instruction: str
    request: Request | None
    turns: list[Turn]
    completion: Completion | None
    rewards: list[Score]
    segments: Segments | None
    training: Training | None
    task_after: TaskAfter | None
    group: list[Member]
    gaps: dict[str, float | None]  # each GAPS name but `turn` -> ms (None: a stage missing)

    @property
    def policy_version(self) -> int | None:
        """The version that played it (its first turn), else the one requested."""
        if self.completion is not None:
            return self.completion.policy_version
        if self.turns:
            return self.turns[0].policy_version
        return self.request.policy_version if self.request else None

    def stages(self) -> list[tuple[str, float]]:
        """Every stage reached, as (name, time in ms), in the order they happened."""
        out: list[tuple[str, float]] = []
        if self.request:
            out.append(("request", self.request.at_ms))
        for turn in self.turns:
            out.append((f"turn {turn.step}", turn.at_ms))
        if self.completion:
            out.append(("complete", self.completion.at_ms))
        if self.rewards:
            out.append(("reward", self.rewards[0].at_ms))
        if self.segments:
            out.append(("segments", self.segments.at_ms))
        if self.training:
            out.append(("trained", self.training.trained_ms))
            out.append(("announced", self.training.announced_ms))
        return sorted(out, key=lambda s: s[1])
