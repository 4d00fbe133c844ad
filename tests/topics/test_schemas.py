"""Schema round trips, evolution and validation for every registered topic."""

from __future__ import annotations

import msgspec
import pytest

from runtime.errors import ConfigError, SchemaError
from topics.codec import decode, encode, from_json, to_dict, to_json
from topics.events import (
    INCOMPLETE_REWARDS,
    METRIC_SCORES,
    REWARD_SCORES,
    Event,
    Reward,
    RolloutStep,
)
from topics.examples import example_event
from topics.registry import TOPICS, topic


@pytest.mark.parametrize("name", list(TOPICS))
def test_every_topic_round_trips_msgpack_and_json(name: str) -> None:
    event = example_event(name)
    assert isinstance(event, topic(name).event_type)
    assert decode(name, encode(event)) == event
    assert from_json(name, to_json(event)) == event
    assert topic(name).key_of(event) is None or isinstance(topic(name).key_of(event), bytes)


def test_envelope_is_filled() -> None:
    a, b = example_event("reward"), example_event("reward")
    assert a.schema_version == 1 and a.producer_id and a.ts_ms > 1_700_000_000_000
    assert a.event_id != b.event_id


class RewardV2(Event, frozen=True, kw_only=True):
    """A future Reward with an extra field, as a newer writer would send it."""

    trajectory_id: str
    task_id: str
    group_id: str
    group_size: int
    score: float
    reason: str = ""
    judge_version: str = "v1"
    status: str = "done"
    policy_version: int = 0
    judge_latency_ms: float = 0.0
    rubric: dict[str, float] = {}


def test_old_reader_skips_new_fields() -> None:
    new = RewardV2(trajectory_id="t", task_id="a", group_id="g", group_size=8, score=0.5,
                   judge_latency_ms=12.5, rubric={"file": 1.0})  # fmt: skip
    old = decode("reward", msgspec.msgpack.encode(new))
    assert isinstance(old, Reward)
    assert (old.trajectory_id, old.score, old.event_id) == ("t", 0.5, new.event_id)


def test_new_reader_fills_defaults_for_old_writers() -> None:
    old = Reward(trajectory_id="t", task_id="a", group_id="g", group_size=8, score=1.0)
    new = msgspec.msgpack.decode(encode(old), type=RewardV2)
    assert new.judge_latency_ms == 0.0 and new.rubric == {} and new.score == 1.0


def test_required_fields_named_in_errors() -> None:
    with pytest.raises(SchemaError, match="trajectory_id"):
        from_json("reward", b'{"task_id": "a"}')
    with pytest.raises(SchemaError, match="score"):
        from_json(
            "reward",
            b'{"trajectory_id":"t","task_id":"a","group_id":"g","group_size":8,"score":"high"}',
        )


def test_garbage_bytes_raise_schema_error() -> None:
    for garbage in (b"\xff\x00\x13garbage", b"", b"not msgpack at all", None):
        with pytest.raises(SchemaError):
            decode("rollout-step", garbage)


def test_unknown_topic_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="known topics"):
        topic("rollout-steps")


def test_issue_field_contract() -> None:
    """Field names other services rely on (issue 2, item 2)."""
    need = {
        "rollout-requests": {"task_id", "group_id", "group_size", "sample_index", "policy_version"},
        "rollout-step": {"trajectory_id", "step", "response_ids", "response_logprobs", "action",
                         "observation_ref"},
        "trajectory-complete": {"trajectory_id", "status", "num_steps"},
        "reward": {"trajectory_id", "task_id", "group_id", "group_size", "score"},
        "segment-ready": {"trajectory_id", "segment_index", "input_ids", "loss_mask", "logprobs",
                          "image_refs"},
    }  # fmt: skip
    for name, fields in need.items():
        assert fields <= set(topic(name).event_type.__struct_fields__), name
    for spec in TOPICS.values():
        assert {"schema_version", "event_id", "producer_id", "ts_ms"} <= set(
            spec.event_type.__struct_fields__
        )


def test_dedup_ids_are_deterministic() -> None:
    step = RolloutStep(trajectory_id="g/1", step=3)
    assert step.dedup_id() == "g/1:3"
    r1 = Reward(trajectory_id="g/1", task_id="a", group_id="g", group_size=8, score=1.0)
    r2 = Reward(trajectory_id="g/1", task_id="a", group_id="g", group_size=8, score=1.0)
    assert r1.event_id != r2.event_id and r1.dedup_id() == r2.dedup_id()
    assert to_dict(step)["trajectory_id"] == "g/1"


def _reward_bytes(**fields: object) -> bytes:
    """A reward as a writer that skips validation (an old or buggy producer) puts it on the wire."""
    base = {"trajectory_id": "g/0", "task_id": "a", "group_id": "g", "group_size": 8, "score": 1.0}
    return msgspec.msgpack.encode({**base, **fields})


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"score": float("nan")}, "score nan is outside what a judge gives"),
        ({"score": float("inf")}, "score inf"),
        ({"score": 1.7e308}, r"score 1\.7e\+308"),
        ({"score": -1.5}, r"a finite number in \[-1, 1\]"),
        ({"metric_score": 1.5}, r"metric_score 1.5 is not a finite number in \[0, 1\]"),
        ({"group_size": 0, "sample_index": 0}, "group_size must be at least 1, not 0"),
        ({"group_size": -1}, "group_size must be at least 1, not -1"),
        ({"sample_index": 8}, "sample_index 8 is outside a group of 8"),
        ({"sample_index": -1}, "sample_index -1"),
        ({"policy_version": -3}, "policy_version must be at least 0"),
    ],
)
def test_impossible_rewards_do_not_decode_and_cannot_be_built(fields: dict, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        decode("reward", _reward_bytes(**fields))
    with pytest.raises(ValueError, match=reason):
        Reward(**{**msgspec.msgpack.decode(_reward_bytes()), **fields})


def test_rewards_the_judge_gives_decode() -> None:
    for score, metric in ((1.0, 1.0), (0.0, None), (-0.2, 1.0), (-1.0, 0.0), (0.37, 0.37)):
        event = decode("reward", _reward_bytes(score=score, metric_score=metric))
        assert event.score == score and event.metric_score == metric
    assert 1.0 in REWARD_SCORES and -0.2 in REWARD_SCORES and float("nan") not in REWARD_SCORES
    assert True not in REWARD_SCORES and METRIC_SCORES.low == 0.0 and -0.2 in INCOMPLETE_REWARDS


def test_impossible_requests_segments_and_updates_do_not_decode() -> None:
    request = {"task_id": "a", "group_id": "g", "group_size": 8, "sample_index": 0,
               "policy_version": 0}  # fmt: skip
    for bad, reason in (
        ({"group_size": 0}, "group_size must be at least 1"),
        ({"group_size": -1}, "group_size must be at least 1"),
        ({"sample_index": 9}, "sample_index 9 is outside a group of 8"),
        ({"policy_version": -1}, "policy_version must be at least 0"),
    ):
        with pytest.raises(SchemaError, match=reason):
            decode("rollout-requests", msgspec.msgpack.encode({**request, **bad}))
    segment = {"trajectory_id": "g/0", "segment_index": 0, "input_ids": [1, 2, 3],
               "loss_mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.25], "group_id": "g",
               "group_size": 2, "sample_index": 1}  # fmt: skip
    assert decode("segment-ready", msgspec.msgpack.encode(segment)).logprobs[1] == -0.5
    for bad, reason in (
        ({"logprobs": [0.0, float("nan"), -0.25]}, "logprobs must be finite: nan at position 1"),
        ({"logprobs": [0.0, -0.5, float("-inf")]}, "-inf at position 2"),
        ({"logprobs": [0.0, -1e308, -1e308]}, "logprobs must be finite: overflowing"),
        ({"logprobs": [0.0, -0.5]}, "3 input_ids, 3 loss_mask entries and 2 logprobs"),
        ({"loss_mask": [0, 1]}, "must line up"),
        ({"segment_index": 2, "num_segments": 2}, "segment_index 2 is outside 2 segments"),
        ({"num_segments": 0}, "num_segments must be at least 1"),
        ({"group_size": 0, "sample_index": 0}, "group_size must be at least 1"),
        ({"sample_index": 2}, "sample_index 2 is outside a group of 2"),
    ):
        with pytest.raises(SchemaError, match=reason):
            decode("segment-ready", msgspec.msgpack.encode({**segment, **bad}))
    with pytest.raises(SchemaError, match="group_size must be at least 1"):
        decode("trajectory-complete", msgspec.msgpack.encode(
            {"trajectory_id": "t", "status": "done", "num_steps": 1, "group_size": 0}
        ))  # fmt: skip
    for bad, reason in (
        ({"policy_version": 0, "checkpoint_uri": "/c"}, "policy_version must be at least 1"),
        ({"policy_version": 2, "checkpoint_uri": ""}, "checkpoint_uri is empty"),
    ):
        with pytest.raises(SchemaError, match=reason):
            decode("policy-updates", msgspec.msgpack.encode(bad))
