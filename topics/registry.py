"""The topic registry: the single source of truth for names, types, keys and layout."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.errors import ConfigError
from topics.events import (
    DeadLetter,
    Event,
    Leadership,
    PolicyUpdate,
    Reward,
    RolloutRequest,
    RolloutStep,
    RunStarted,
    SegmentReady,
    SynthesisEvent,
    SynthesisRequest,
    TaskEvent,
    TaskStats,
    TrajectoryComplete,
)

__all__ = ["TopicSpec", "TOPICS", "topic", "topic_names", "DEAD_LETTER", "RUNS", "LEADERS"]


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name, event type, record key field, partitions and compaction."""

    name: str
    event_type: type[Event]
    # The event field used as the record key (several: the first non-empty one); None = no key.
    key_field: str | tuple[str, ...] | None
    partitions: int = 4
    compacted: bool = False
    description: str = ""
    retain_forever: bool = False  # never delete by age (Kafka's retention.ms = -1)
    # What a resumed run re-seeds from the archive: "per-key" (the latest event of each key),
    # "last" (the newest event), or None (nothing: the topic starts empty).
    reseed: str | None = None

    def key_of(self, event: Event) -> bytes | None:
        """Return the record key for an event of this topic."""
        if self.key_field is None:
            return None
        fields = (self.key_field,) if isinstance(self.key_field, str) else self.key_field
        for name in fields:
            value = str(getattr(event, name))
            if value:
                return value.encode()
        return b""

    def configs(self) -> dict[str, str]:
        """Return the topic configs to create it with."""
        configs = {"cleanup.policy": "compact"} if self.compacted else {}
        if self.retain_forever:
            configs["retention.ms"] = "-1"
        return configs


DEAD_LETTER = "dead-letter"
RUNS = "runs"
LEADERS = "leaders"
_BY_REQUEST = ("request_id", "trajectory_id")

TOPICS: dict[str, TopicSpec] = {
    spec.name: spec
    for spec in (
        TopicSpec(RUNS, RunStarted, "run_id", 1, False, "log incarnations", True),
        TopicSpec("tasks", TaskEvent, "task_id", 4, True, "task JSON + metadata", reseed="per-key"),
        TopicSpec(
            "rollout-requests", RolloutRequest, "group_id", 8, False, "one record per rollout"
        ),
        # Keyed by request: every attempt at a request lands, in order, in one partition, and a
        # trajectory's steps and its completion share the partition number (co-partitioned).
        TopicSpec("rollout-step", RolloutStep, _BY_REQUEST, 8, False, "one record per agent turn"),
        TopicSpec(
            "trajectory-complete", TrajectoryComplete, _BY_REQUEST, 8, False, "end of episode"
        ),
        TopicSpec("reward", Reward, "trajectory_id", 4, False, "judge scores"),
        TopicSpec("segment-ready", SegmentReady, "trajectory_id", 8, False, "training segments"),
        TopicSpec(
            "task-stats", TaskStats, "task_id", 4, True, "Frontier Sampling state", reseed="per-key"
        ),
        TopicSpec("policy-updates", PolicyUpdate, None, 1, False, "new checkpoints", reseed="last"),
        TopicSpec(
            "synthesis-requests", SynthesisRequest, "request_id", 8, False, "VeriGen work items"
        ),
        # Keyed by candidate: one candidate's stages stay in order in one partition.
        TopicSpec(
            "synthesis", SynthesisEvent, "candidate_id", 4, False, "VeriGen loop stages", True
        ),
        # One partition: each singleton role's consumer group hands it to exactly one member.
        TopicSpec(LEADERS, Leadership, "role", 1, False, "singleton services' terms"),
        TopicSpec(DEAD_LETTER, DeadLetter, "source_topic", 1, False, "unprocessable records"),
    )
}


def topic(name: str) -> TopicSpec:
    """Return the spec of a registered topic, or raise ConfigError naming the known ones."""
    try:
        return TOPICS[name]
    except KeyError:
        known = ", ".join(TOPICS)
        raise ConfigError(f"unknown topic {name!r}; known topics: {known}") from None


def topic_names() -> list[str]:
    """Return every registered topic name."""
    return list(TOPICS)
