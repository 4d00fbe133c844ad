"""One valid example event per topic, for `scalecua produce TOPIC --example` and docs."""

from __future__ import annotations

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
from topics.registry import topic

__all__ = ["example_event"]

_SHA = "sha256:" + "0" * 64


def example_event(topic_name: str) -> Event:
    """Return a valid, realistic example event for a registered topic."""
    event_type = topic(topic_name).event_type
    examples: dict[type[Event], Event] = {
        RunStarted: RunStarted(run_id="20261122T181923Z-3fa2c1", origin="embedded"),
        Leadership: Leadership(role="sampler", term="5c0e2b7d9a41"),
        TaskEvent: TaskEvent(
            task_id="mousepad-hello",
            task={
                "id": "mousepad-hello",
                "instruction": "Write 'hello' in a new file ~/hello.txt",
                "config": [],
                "evaluator": {"func": "exact_match", "result": {"type": "vm_file"}},
            },
        ),
        RolloutRequest: RolloutRequest(
            task_id="mousepad-hello",
            group_id="g-000001",
            group_size=8,
            sample_index=0,
            policy_version=3,
        ),  # fmt: skip
        RolloutStep: RolloutStep(
            trajectory_id="g-000001/0",
            step=0,
            task_id="mousepad-hello",
            group_id="g-000001",
            policy_version=3,
            response_ids=[151657, 90, 151658],
            response_logprobs=[-0.1, -0.2, -0.05],
            response_text='<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [500, 500]}}</tool_call>',
            action={"action": "left_click", "coordinate": [500, 500]},
            observation_ref=_SHA,
        ),  # fmt: skip
        TrajectoryComplete: TrajectoryComplete(
            trajectory_id="g-000001/0",
            status="done",
            num_steps=7,
            task_id="mousepad-hello",
            group_id="g-000001",
            group_size=8,
            sample_index=0,
            policy_version=3,
        ),  # fmt: skip
        Reward: Reward(
            trajectory_id="g-000001/0",
            task_id="mousepad-hello",
            group_id="g-000001",
            group_size=8,
            score=1.0,
            reason="exact_match: 1.0",
            policy_version=3,
        ),  # fmt: skip
        SegmentReady: SegmentReady(
            trajectory_id="g-000001/0",
            segment_index=0,
            input_ids=[151644, 872, 151645],
            loss_mask=[0, 1, 1],
            logprobs=[0.0, -0.3, -0.01],
            image_refs=[_SHA],
            policy_version=3,
        ),  # fmt: skip
        TaskStats: TaskStats(
            task_id="mousepad-hello", ema_pass_rate=0.45, weight=0.98, attempts=16, last_score=1.0
        ),
        PolicyUpdate: PolicyUpdate(policy_version=4, checkpoint_uri="file:///var/ckpt/v4"),
        SynthesisRequest: SynthesisRequest(
            request_id="20261122T181923Z-3fa2c1/0",
            run_id="20261122T181923Z-3fa2c1",
            app="mousepad",
            hint="a shopping list",
        ),
        SynthesisEvent: SynthesisEvent(
            candidate_id="20261122T181923Z-3fa2c1/0@0a1b2c3",
            request_id="20261122T181923Z-3fa2c1/0",
            stage="validate",
            round=0,
            app="mousepad",
            ok=False,
            reasons=[
                "the untouched desktop already scores 1.0: the task is solved before the agent acts"
            ],
            usage={"calls": 0.0, "cost_usd": 0.0},
        ),
        DeadLetter: DeadLetter(
            source_topic="reward",
            partition=0,
            offset=42,
            error="reward: not a Reward: ...",
            error_type="decode",
            service="archiver",
            original_value=b"\xff\x00garbage",
        ),  # fmt: skip
    }
    return examples[event_type]
