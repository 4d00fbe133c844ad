"""Rollouts sampled by the real engine, cut by the real segmenter (Visual Context
Segmentation, and step-wise items), trained by the trainer: the first step's importance ratio
is exactly 1, so the segment contract (ids, mask, logprobs, image refs and sizes, sampling
settings) holds and every item is a context the engine sampled under."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from consumers.segmenter.service import Segmenter, SegmenterConfig
from consumers.trainer.service import TrainerConfig
from consumers.trainer.startup import trainer_service
from runtime.blobstore import BlobStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.engines.base import GenerationRequest, SamplingParams
from runtime.engines.transformers_engine import TransformersEngine
from runtime.policy.model import Policy
from runtime.policy.observation import fit_image
from runtime.policy.render import HistoryRenderer
from runtime.service import ServiceRunner
from tests.bus_reading import read_until
from tests.consumers.trainer.harness import INSTRUCTION, JUDGE, SYSTEM, screenshot_png
from topics.events import Reward, RolloutStep, TrajectoryComplete

K, DELTA, TURNS = 2, 1, 4  # a 4-turn episode in a window of 2+1 screenshots: 2 segments


async def _episode(engine: TransformersEngine, policy: Policy, blobs: BlobStore, sample: int,
                   seed: int) -> list:  # fmt: skip
    """One rollout logged as the rollout worker logs it, plus its reward."""
    system_ref = blobs.put(SYSTEM.encode())
    renderer = HistoryRenderer(SYSTEM, INSTRUCTION, policy.processor, window=(K, DELTA))
    trajectory = f"g/{sample}@0{seed:07x}"
    events: list = []
    for t in range(TURNS):
        png = screenshot_png(seed * 10 + t)
        image = fit_image(png, 112)
        prompt = renderer.observe(image, "")
        params = SamplingParams(temperature=0.8, max_tokens=4, seed=seed * 10 + t)
        (result,) = await engine.generate([GenerationRequest(prompt.ids, prompt.images, params)])
        renderer.respond(result.token_ids)
        events.append(("rollout-step", RolloutStep(
            trajectory_id=trajectory, step=t, task_id="task", group_id="g",
            request_id=f"g/{sample}", response_ids=result.token_ids,
            response_logprobs=result.logprobs, observation_ref=blobs.put(png),
            observation_size=list(image.size), instruction=INSTRUCTION,
            system_prompt_ref=system_ref, temperature=0.8, top_p=1.0,
            context_window=[K, DELTA], prompt_tokens=len(prompt.ids),
        )))  # fmt: skip
    events.append(("trajectory-complete", TrajectoryComplete(
        trajectory_id=trajectory, status="done", num_steps=TURNS, task_id="task", group_id="g",
        group_size=2, sample_index=sample, request_id=f"g/{sample}",
    )))  # fmt: skip
    events.append(("reward", Reward(
        trajectory_id=trajectory, task_id="task", group_id="g", group_size=2,
        score=float(sample), judge_version=JUDGE, sample_index=sample, request_id=f"g/{sample}",
    )))  # fmt: skip
    return events


@pytest.mark.parametrize(("mode", "items"), [("vcs", 2), ("stepwise", TURNS)])
async def test_engine_segmenter_trainer_agree_on_every_logprob(
    bus_settings: BusSettings, tiny: Policy, blobs: BlobStore, tmp_path: Path, mode: str,
    items: int,
) -> None:  # fmt: skip
    engine = TransformersEngine(tiny)
    try:
        events = [e for i in range(2) for e in await _episode(engine, tiny, blobs, i, 11 + i)]
    finally:
        await engine.close()
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send(t, e) for t, e in events])
    segmenter = ServiceRunner(
        Segmenter(SegmenterConfig(mode=mode, k=K, delta=DELTA), tiny.processor, blobs),
        bus_settings,
    )
    config = TrainerConfig(checkpoints=str(tmp_path / "ckpt"), batch_groups=1, max_steps=1)
    async with trainer_service(bus_settings, config, blobs=blobs) as trainer:
        tasks = [
            asyncio.create_task(r.run(install_signal_handlers=False)) for r in (segmenter, trainer)
        ]
        try:
            (update,) = [
                r.event for r in await read_until(bus_settings, "policy-updates", bool, 180)
            ]
        finally:
            segmenter.stop()
            trainer.stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
    metrics = update.metrics
    assert metrics["segments"] == 2 * items and metrics["tokens"] == 2 * TURNS * 4 - _short(events)
    assert metrics["logp_diff_abs_max"] < 1e-4  # the trainer recomputes the engine's logprobs
    assert metrics["clip_frac"] == 0.0 and abs(metrics["ratio_mean"] - 1) < 1e-4


def _short(events: list) -> int:
    """Sampled tokens fewer than max_tokens (a response that stopped early)."""
    return sum(4 - len(e.response_ids) for t, e in events if t == "rollout-step")
