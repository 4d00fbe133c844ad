"""Event schemas: one immutable msgspec Struct per topic, all sharing an envelope.

Schema evolution: new fields always get defaults, and decoders ignore fields they do not
know, so an old reader skips what a newer writer added and a new reader fills defaults
for what an older writer left out.

Validation: an event whose values are impossible (a non-finite or out-of-range score, a
group of size 0, a sample index outside its group, a non-finite logprob) is refused where
it is built (`ValueError`) and where it is decoded (a decode error: the service runner
dead-letters the record with the reason, `scalecua produce` refuses the line). The
ranges of scores are named here once (`METRIC_SCORES`, `INCOMPLETE_REWARDS`,
`REWARD_SCORES`): the judge writes within them and every reader relies on them.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = [
    "producer_id",
    "Event",
    "TaskEvent",
    "RolloutRequest",
    "RolloutStep",
    "TrajectoryComplete",
    "Reward",
    "SegmentReady",
    "TaskStats",
    "PolicyUpdate",
    "DeadLetter",
    "DEAD_LETTER_VALUE_CAP",
    "DEAD_LETTER_KEY_CAP",
    "DEAD_LETTER_ERROR_CAP",
    "RunStarted",
    "Leadership",
    "SynthesisRequest",
    "SynthesisEvent",
    "SCHEMA_VERSION",
    "ScoreRange",
    "METRIC_SCORES",
    "INCOMPLETE_REWARDS",
    "REWARD_SCORES",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ScoreRange:
    """A closed interval of finite scores."""

    low: float
    high: float

    def __contains__(self, value: object) -> bool:
        """Whether `value` is a finite number inside the interval."""
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        return math.isfinite(value) and self.low <= value <= self.high

    def __str__(self) -> str:
        return f"[{self.low:g}, {self.high:g}]"


# What the judge promises. A task's metrics (OSWorld's, and sandboxed VeriGen judges) score
# in [0, 1]; an episode that hits its step limit gets a fixed penalty instead (the paper's
# -0.2, configurable within [-1, 0]); so every reward lies in [-1, 1].
METRIC_SCORES = ScoreRange(0.0, 1.0)
INCOMPLETE_REWARDS = ScoreRange(-1.0, 0.0)
REWARD_SCORES = ScoreRange(min(METRIC_SCORES.low, INCOMPLETE_REWARDS.low),
                           max(METRIC_SCORES.high, INCOMPLETE_REWARDS.high))  # fmt: skip


def _require(ok: bool, what: str) -> None:
    """Refuse an impossible value: ValueError here, a decode error (dead letter) on the wire."""
    if not ok:
        raise ValueError(what)


def _check_group(event: Any) -> None:
    """A GRPO group has at least one member and every sample index lies inside it."""
    _require(event.group_size >= 1, f"group_size must be at least 1, not {event.group_size}")
    _require(
        0 <= event.sample_index < event.group_size,
        f"sample_index {event.sample_index} is outside a group of {event.group_size}",
    )


# The bounds of a dead letter; every one is built by DeadLetter.about, which applies them.
DEAD_LETTER_VALUE_CAP = 256 << 10  # bytes of the original value kept
DEAD_LETTER_KEY_CAP = 1 << 10  # bytes of the original key kept
DEAD_LETTER_ERROR_CAP = 8 << 10  # characters of the reason kept


def _check_version(version: int) -> None:
    _require(version >= 0, f"policy_version must be at least 0, not {version}")


def _new_event_id() -> str:
    return uuid.uuid4().hex


def producer_id() -> str:
    """Return this process's producer id for event envelopes (`$SCALECUA_PRODUCER_ID`)."""
    return _producer_id(os.getpid())


@functools.lru_cache(maxsize=4)
def _producer_id(pid: int) -> str:
    # Cached per pid: every event calls this, and a forked child must get its own id.
    return os.environ.get("SCALECUA_PRODUCER_ID") or f"{socket.gethostname()}:{pid}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """The envelope every event carries."""

    schema_version: int = SCHEMA_VERSION
    event_id: str = msgspec.field(default_factory=_new_event_id)
    producer_id: str = msgspec.field(default_factory=producer_id)
    ts_ms: int = msgspec.field(default_factory=_now_ms)  # wall clock at creation, ms since epoch

    def dedup_id(self) -> str:
        """Return the id consumers use to drop redelivered duplicates."""
        return self.event_id


class TaskEvent(Event, frozen=True, kw_only=True):
    """A task in OSWorld's JSON format plus where it came from (`tasks`, compacted)."""

    task_id: str
    task: dict[str, Any]  # the OSWorld/ScienceBoard task JSON, unchanged
    source: str = "builtin"  # "builtin", "osworld", "scienceboard", "verigen", ...
    split: str = "train"  # "train", "heldout" or "benchmark" (only train tasks are trained on)
    difficulty: float | None = None

    def dedup_id(self) -> str:
        """Return the task id: the latest version of a task wins."""
        return self.task_id


class RolloutRequest(Event, frozen=True, kw_only=True):
    """One rollout to run: a task, its GRPO group and the sample's index in it."""

    task_id: str
    group_id: str
    group_size: int
    sample_index: int
    policy_version: int
    max_steps: int = 50
    trajectory_id: str = ""  # empty means f"{group_id}/{sample_index}"

    def __post_init__(self) -> None:
        _check_group(self)
        _check_version(self.policy_version)

    def trajectory(self) -> str:
        """Return the trajectory id this request produces."""
        return self.trajectory_id or f"{self.group_id}/{self.sample_index}"

    def dedup_id(self) -> str:
        """Return the trajectory id: one rollout per (group, sample)."""
        return self.trajectory()


class RolloutStep(Event, frozen=True, kw_only=True):
    """One agent turn: what the policy was shown, its tokens, and the action it took.

    The log alone re-renders the exact prompt of every turn: the system prompt (by blob ref),
    the instruction, and per turn the screenshot (ref, at `observation_size`) and the
    observation text (ref) the policy saw, plus every earlier turn's response ids.
    """

    trajectory_id: str  # "<request id>@<attempt token>": a retry never reuses an id
    step: int  # 0-based turn index
    task_id: str = ""
    group_id: str = ""
    request_id: str = ""  # the rollout request's id ("<group>/<sample index>")
    attempt: int = 0  # 0 for the first attempt at a request, 1 for a retry
    policy_version: int = 0  # the version of the weights that generated this turn
    response_ids: list[int] = []
    response_logprobs: list[float] = []
    response_text: str = ""
    action: dict[str, Any] | None = None  # the controller's JSON action; None on a parse error
    action_error: str | None = (
        None  # why the response gave no action, or why the desktop refused it
    )
    observation_ref: str | None = None  # blob ref of the full screenshot shown before this turn
    observation_size: list[int] = []  # [w, h] the screenshot was resized to for the policy
    a11y_ref: str | None = None  # blob ref of the raw accessibility tree, when observed
    observation_text_ref: str | None = None  # blob ref of the observation text shown, if any
    instruction: str = ""  # the task instruction, as rendered
    prompt_variant: str = ""  # "osworld", "scienceboard" or "custom"
    system_prompt_ref: str | None = None  # blob ref of the system prompt's exact text
    temperature: float = 1.0  # sampling settings the logprobs were taken under
    top_p: float = 1.0
    context_window: list[int] = []  # [K, Δ] the prompt was rendered with; [] = every observation
    prompt_tokens: int = 0
    finish_reason: str = "stop"
    latency_ms: float = 0.0  # the whole turn
    timings_ms: dict[str, float] = {}  # per phase: observe, render, generate, act, bus
    worker_id: str = ""

    def dedup_id(self) -> str:
        """Return (trajectory, step)."""
        return f"{self.trajectory_id}:{self.step}"


class TrajectoryComplete(Event, frozen=True, kw_only=True):
    """End of an episode, with what the judge needs to score it.

    `artifacts["evaluation"]` is the blob ref of the evaluation manifest collected on the live
    desktop (runtime.envs.tasks.collect); status `error` is an environment failure (the
    desktop died twice, the engine was unreachable): it has no score and is dropped from
    its group, never counted as a 0.
    """

    trajectory_id: str
    status: str  # "done" | "fail" | "answer" | "max_steps" | "error"
    num_steps: int
    task_id: str = ""
    group_id: str = ""
    group_size: int = 1
    sample_index: int = 0
    request_id: str = ""
    attempt: int = 0
    max_steps: int = 0
    policy_version: int = 0  # the version that generated the first turn
    policy_version_last: int = 0  # ...and the last one (weights may change between turns)
    answer: str | None = None
    artifacts: dict[str, str] = {}  # name -> blob ref ("evaluation", "final_screenshot", ...)
    error: str | None = None
    seconds: float = 0.0
    worker_id: str = ""

    def __post_init__(self) -> None:
        _check_group(self)

    def dedup_id(self) -> str:
        """Return the trajectory id: an episode completes once."""
        return self.trajectory_id


class Reward(Event, frozen=True, kw_only=True):
    """A judge's score for one trajectory."""

    trajectory_id: str
    task_id: str
    group_id: str
    group_size: int
    score: float
    reason: str = ""
    judge_version: str = "v1"
    status: str = "done"  # the trajectory's end status ("max_steps" scores the incomplete reward)
    policy_version: int = 0
    scored: bool = True  # False: an environment failure with no score (drop it from the group)
    sample_index: int = 0
    request_id: str = ""
    metric_score: float | None = None  # what the task's metrics said, before status rules

    def __post_init__(self) -> None:
        _require(
            self.score in REWARD_SCORES,
            f"score {self.score!r} is outside what a judge gives: a finite number in "
            f"{REWARD_SCORES}",
        )
        _require(
            self.metric_score is None or self.metric_score in METRIC_SCORES,
            f"metric_score {self.metric_score!r} is not a finite number in {METRIC_SCORES}",
        )
        _check_group(self)
        _check_version(self.policy_version)

    def dedup_id(self) -> str:
        """Return (trajectory, judge version)."""
        return f"{self.trajectory_id}:{self.judge_version}"


class SegmentReady(Event, frozen=True, kw_only=True):
    """A training segment of a trajectory cut by Visual Context Segmentation.

    Every response token of a trajectory has loss_mask 1 in exactly one of its segments,
    with its rollout logprob; all segments of a trajectory share its reward (advantage).
    """

    trajectory_id: str
    segment_index: int
    input_ids: list[int]
    loss_mask: list[int]  # 1 where the token is an assistant token trained in this segment
    logprobs: list[float]  # rollout logprobs aligned with input_ids (0.0 where loss_mask is 0)
    image_refs: list[str] = []  # blob refs of the screenshots, in prompt order
    image_sizes: list[list[int]] = []  # [w, h] each screenshot is resized to, as rendered
    task_id: str = ""
    group_id: str = ""
    group_size: int = 1
    sample_index: int = 0
    request_id: str = ""
    policy_version: int = 0  # the oldest version that generated a trained token here
    num_segments: int = 1  # how many segments the trajectory has
    is_last: bool = False
    mode: str = "vcs"  # "vcs", "stepwise" or "trajectory"
    temperature: float = 1.0  # the logprobs were taken at this temperature and top-p
    top_p: float = 1.0
    trained_tokens: int = 0  # tokens with loss_mask 1
    sampled: bool = True  # False: the responses were scripted, not sampled (no logprobs; SFT only)

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        _require(
            len(self.loss_mask) == n and len(self.logprobs) == n,
            f"{n} input_ids, {len(self.loss_mask)} loss_mask entries and {len(self.logprobs)} "
            "logprobs: they must line up",
        )
        # One sum finds a NaN or an infinity anywhere cheaply (it also overflows on logprobs
        # near -1e308, as absurd as an infinity); the scan only names the position.
        if not math.isfinite(sum(self.logprobs)):
            bad = [i for i, x in enumerate(self.logprobs) if not math.isfinite(x)]
            where = f"{self.logprobs[bad[0]]!r} at position {bad[0]}" if bad else "overflowing"
            _require(False, f"logprobs must be finite: {where}")
        _require(
            self.num_segments >= 1, f"num_segments must be at least 1, not {self.num_segments}"
        )
        _require(
            0 <= self.segment_index < self.num_segments,
            f"segment_index {self.segment_index} is outside {self.num_segments} segments",
        )
        _check_group(self)
        _check_version(self.policy_version)

    def dedup_id(self) -> str:
        """Return (trajectory, segment index)."""
        return f"{self.trajectory_id}:{self.segment_index}"


class TaskStats(Event, frozen=True, kw_only=True):
    """The sampler's per-task state for Frontier Sampling (`task-stats`, compacted)."""

    task_id: str
    ema_pass_rate: float
    weight: float
    attempts: int  # groups counted (environment failures are no attempt)
    last_score: float | None = None  # the last group's mean score
    policy_version: int = 0
    state: str = "active"  # "active" (in the pool) or "excluded" (outside [p_min, p_max])
    initial_pass_rate: float | None = None  # after the first group (the initial pass)
    rollouts: int = 0  # scored rollouts counted
    successes: int = 0  # ...of which succeeded
    last_group_id: str = ""
    # Groups folded into these stats lately (group id -> wall-clock ms of the fold), so a
    # restarted sampler that re-reads their rewards never folds one twice.
    folded_groups: dict[str, int] = {}

    def dedup_id(self) -> str:
        """Return the task id: the latest stats win."""
        return self.task_id


class PolicyUpdate(Event, frozen=True, kw_only=True):
    """A new policy checkpoint is ready for rollout workers."""

    policy_version: int
    checkpoint_uri: str
    metrics: dict[str, float] = {}
    # What the step trained (empty on a re-announcement after a restart, and from older
    # trainers): its groups, and the advantage each trained trajectory got in its group.
    groups: list[str] = []
    advantages: dict[str, float] = {}

    def __post_init__(self) -> None:
        _require(
            self.policy_version >= 1,
            f"policy_version must be at least 1 (0 is the base policy), not {self.policy_version}",
        )
        _require(bool(self.checkpoint_uri), "checkpoint_uri is empty")

    def dedup_id(self) -> str:
        """Return the policy version."""
        return str(self.policy_version)


class DeadLetter(Event, frozen=True, kw_only=True):
    """A record that could not be decoded or processed, kept with the reason."""

    source_topic: str
    partition: int
    offset: int
    error: str  # a readable reason
    error_type: str  # "decode" | "process" | "output" (the processor's output was unsendable)
    # | "expired" (held for a group that never completed) | "rejected" (a policy update refused)
    service: str = ""
    original_key: bytes | None = None
    original_value: bytes | None = None  # the record's bytes, cut to a bound (see truncated)
    original_size: int = 0  # length of the original value before any cut
    original_sha256: str = ""  # hex sha256 of the whole original value
    truncated: bool = False  # original_value holds only the first bytes

    @classmethod
    def about(
        cls,
        *,
        source_topic: str,
        partition: int,
        offset: int,
        error: str,
        error_type: str,
        service: str,
        key: bytes | None = None,
        value: bytes | None = None,
        value_kept: bool = True,
    ) -> DeadLetter:
        """The bounded dead letter of one record a service gives up on.

        `value` is the record's value (None for a record without one, whose digest is that
        of no bytes); pass no value and `value_kept=False` when the service has none of the
        record's bytes at hand: the letter then holds no digest either.
        """
        data = value or b""
        return cls(
            source_topic=source_topic,
            partition=partition,
            offset=offset,
            error=error[:DEAD_LETTER_ERROR_CAP],
            error_type=error_type,
            service=service,
            original_key=key[:DEAD_LETTER_KEY_CAP] if key else key,
            original_value=data[:DEAD_LETTER_VALUE_CAP] if value is not None else None,
            original_size=len(data),
            original_sha256=hashlib.sha256(data).hexdigest() if value_kept else "",
            truncated=len(data) > DEAD_LETTER_VALUE_CAP,
        )

    def dedup_id(self) -> str:
        """Return (source topic, partition, offset, service)."""
        return f"{self.source_topic}:{self.partition}:{self.offset}:{self.service}"


class RunStarted(Event, frozen=True, kw_only=True):
    """The first record of a log incarnation (`runs`): names the run its records belong to.

    An in-memory broker restarts its offsets at 0, so (topic, partition, offset) identifies a
    record only together with the run; the archive keeps each run apart by this id.
    """

    run_id: str  # sortable: "<UTC yyyymmddThhmmssZ>-<6 hex>"
    origin: str = "embedded"  # "embedded" (a broker started here) or "cluster"
    resumed_from: str | None = None  # the archived run whose state was re-seeded into this one
    seeded: dict[str, int] = {}  # topic -> records re-seeded from that run

    def dedup_id(self) -> str:
        """Return the run id."""
        return self.run_id


class Leadership(Event, frozen=True, kw_only=True):
    """A singleton service's new term (`leaders`): this process now acts for the role.

    Written by the member of the role's election that was given the `leaders` partition,
    before it acts; the envelope's producer_id names the process.
    """

    role: str  # "sampler", ...
    term: str  # unique per term: a holder re-elected with no term in between keeps its state

    def dedup_id(self) -> str:
        """Return (role, term)."""
        return f"{self.role}:{self.term}"


class SynthesisRequest(Event, frozen=True, kw_only=True):
    """One VeriGen candidate to synthesise (`synthesis-requests`): an app and the loop's switches.

    The switches travel with the request, so every worker of the group runs a run's ablation
    the same way; `mode` and `seed` let later synthesis modes add their own input.
    """

    request_id: str  # "<run id>/<index>"
    run_id: str = ""
    app: str = "terminal"  # a knowledge document: terminal, mousepad, calc, writer
    hint: str = ""  # a theme the proposer starts from (free text)
    mode: str = "explore"  # "explore": from the app's knowledge document and a live observation
    seed: dict[str, Any] = {}  # mode-specific input
    max_rounds: int = 3  # validate/judge/check rounds, with a fix between two of them
    use_validator: bool = True  # the ablation switches
    use_judger: bool = True
    use_fixer: bool = True
    use_checker: bool = True

    def dedup_id(self) -> str:
        """Return the request id: a request is synthesised once."""
        return self.request_id


class SynthesisEvent(Event, frozen=True, kw_only=True):
    """One stage of the VeriGen loop for one candidate (`synthesis`); a run replays from these.

    Stages: propose, validate, judge, check, fix, then exactly one final stage: accepted,
    rejected or failed (the loop itself could not go on: model or desktops unavailable).
    """

    candidate_id: str  # "<request id>@<attempt token>": a redelivered request never reuses one
    request_id: str
    stage: str
    round: int = 0
    run_id: str = ""
    app: str = ""
    ok: bool = True  # the stage's own verdict (validation passed, judge accepted, ...)
    final: bool = False
    reasons: list[str] = []  # readable findings, never empty when a final stage is not accepted
    candidate: dict[str, Any] | None = None  # the candidate as of this stage (accepted: the task)
    detail: dict[str, Any] = {}  # the stage's record: validation report, verdict, checker steps
    task_id: str = ""  # the accepted task's id (stage "accepted")
    usage: dict[str, float] = {}  # calls, prompt_tokens, completion_tokens, cost_usd, llm_seconds
    seconds: float = 0.0  # wall time of the stage
    worker_id: str = ""

    def dedup_id(self) -> str:
        """Return (candidate, round, stage)."""
        return f"{self.candidate_id}:{self.round}:{self.stage}"
