"""The torch backend on the real tiny Qwen2.5-VL: exact logprobs, frozen vision, accumulation,
checkpoints the rollout engine loads, SFT."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from consumers.trainer.backends import MicroBatch, Sample, make_backend
from consumers.trainer.backends.torch_backend import TorchBackend
from consumers.trainer.batching import GroupBook, PlanConfig, pack_micro_batches, plan_group
from consumers.trainer.grpo import GRPOConfig, finish_stats, grpo_token_loss, sft_token_loss
from consumers.trainer.service import load_images
from runtime.blobstore import BlobStore, open_blob_store
from runtime.engines.base import GenerationRequest, SamplingParams
from runtime.engines.transformers_engine import TransformersEngine
from runtime.policy.model import Policy, default_tiny_policy, load_policy
from runtime.policy.render import HistoryRenderer
from tests.consumers.trainer.harness import INSTRUCTION, JUDGE, SYSTEM, make_group, screenshot_png

GRPO = GRPOConfig()


def _backend(lr: float = 1e-3, **kw: object) -> TorchBackend:
    backend = make_backend("torch", lr=lr, **kw)
    base = default_tiny_policy()
    backend.load(base, reference=base)
    return backend


def _samples(
    tiny: Policy, blobs: BlobStore, scores: list[float | None], **kw: object
) -> list[Sample]:
    book = GroupBook(JUDGE)
    for offset, rollout in enumerate(make_group(tiny, blobs, "g", scores, **kw)):
        for s in rollout.segments:
            book.add_segment(s, ("segment-ready", 0), offset * 10 + s.segment_index)
        book.add_reward(rollout.reward, ("reward", 0), offset)
    assert book.ready == ["g"]
    return plan_group(book.pending["g"], 0, PlanConfig()).samples


def _grpo(n: float):
    def loss_fn(tb):
        return grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, GRPO, num_tokens=n,
                               ref_logp=tb.ref_logp, weights=tb.weights, entropy=tb.entropy)  # fmt: skip

    return loss_fn


async def test_the_trainer_recomputes_the_rollout_engines_logprobs(tiny: Policy) -> None:
    engine = TransformersEngine(tiny)
    renderer = HistoryRenderer(SYSTEM, INSTRUCTION, tiny.processor)
    sampled: list[float] = []
    try:
        for turn in range(2):
            shot = Image.open(io.BytesIO(screenshot_png(turn))).convert("RGB").resize((112, 84))
            prompt = renderer.observe(shot, f"turn {turn}")
            params = SamplingParams(temperature=0.8, max_tokens=6, seed=turn)
            (result,) = await engine.generate(
                [GenerationRequest(prompt.ids, prompt.images, params)]
            )
            renderer.respond(result.token_ids)
            sampled += result.logprobs
    finally:
        await engine.close()
    rendered = renderer.rendered
    mask = np.asarray(rendered.loss_mask, dtype=bool)
    old = np.zeros(len(mask), np.float32)
    old[mask] = sampled
    sample = Sample(np.asarray(rendered.ids, np.int32), mask, old, advantage=1.0, temperature=0.8)
    backend = _backend()
    tb = backend.forward_logprobs(MicroBatch((sample,), 0.8, 1.0), lambda s: rendered.images)
    on = tb.mask > 0
    assert int(on.sum()) == len(sampled) == 12
    assert float((tb.logp[on] - tb.old_logp[on]).abs().max()) < 1e-5
    assert float((tb.ref_logp[on] - tb.logp[on]).abs().max()) == 0.0  # reference = start
    _, stats = _grpo(float(on.sum()))(tb)
    assert stats["clip_low"] == stats["clip_high"] == stats["dual_clip"] == 0
    assert float(tb.entropy[on].min()) > 0


def test_a_step_trains_the_language_model_and_leaves_the_vision_tower(
    tiny: Policy, blobs: BlobStore
) -> None:
    samples = _samples(tiny, blobs, [1.0, 0.0, 0.0, 1.0])
    backend = _backend()
    before = {k: v.clone() for k, v in backend.model.state_dict().items()}
    images = lambda s: load_images(blobs, s)  # noqa: E731
    batches = pack_micro_batches(samples, max_tokens=10_000, max_rows=2)
    result = backend.step(batches, _grpo(sum(s.tokens for s in samples)), images)
    stats = finish_stats(result["parts"])
    assert stats["tokens"] == sum(s.tokens for s in samples) and result["grad_norm"] > 0
    after = backend.model.state_dict()
    vision = [k for k in before if ".visual." in k]
    text = [k for k in before if ".language_model." in k]
    assert vision and text
    assert all(torch.equal(before[k], after[k]) for k in vision)
    changed = [k for k in text if not torch.equal(before[k], after[k])]
    assert len(changed) > len(text) // 2
    assert backend.trainable_parameters() < sum(v.numel() for v in before.values())


def test_micro_batches_accumulate_to_the_full_batch(tiny: Policy, blobs: BlobStore) -> None:
    samples = _samples(tiny, blobs, [1.0, 0.0, 0.5], turns=2, segments=2)
    # Unequal advantages, so the loss is not a near-zero sum of cancelling terms.
    samples = [
        replace(s, advantage=a) for s, a in zip(samples, [1, -2, 0.5, 3, -1, 2], strict=True)
    ]
    n = sum(s.tokens for s in samples)
    backend = _backend(lr=0.0)  # weights stay put: both steps see the same model
    images = lambda s: load_images(blobs, s)  # noqa: E731
    whole = backend.step(pack_micro_batches(samples, 100_000, 8), _grpo(n), images)
    split = backend.step(pack_micro_batches(samples, 1, 1), _grpo(n), images)
    assert len(split["parts"]) == len(samples) == 6 and len(whole["parts"]) == 1
    a, b = finish_stats(whole["parts"]), finish_stats(split["parts"])
    assert a["tokens"] == b["tokens"] == n
    assert abs(a["loss"]) > 0.1
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert whole["grad_norm"] == pytest.approx(split["grad_norm"], rel=1e-4)


async def test_checkpoints_load_as_policies_and_into_the_rollout_engine(
    tiny: Policy, blobs: BlobStore, tmp_path: Path
) -> None:
    samples = _samples(tiny, blobs, [1.0, 0.0])
    backend = _backend()
    backend.step(pack_micro_batches(samples, 10_000, 4), _grpo(sum(s.tokens for s in samples)),
                 lambda s: load_images(blobs, s))  # fmt: skip
    backend.save(tmp_path / "v1")
    backend.save_state(tmp_path / "state")
    loaded = load_policy(tmp_path / "v1")
    trained = backend.model.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in loaded.model.state_dict().items())
    assert loaded.processor.is_multimodal
    assert loaded.processor.tokenizer.encode("hello") == tiny.processor.tokenizer.encode("hello")
    engine = TransformersEngine(load_policy("tiny"))
    await engine.load_weights(str(tmp_path / "v1"), 1)
    assert engine.policy_version == 1
    assert torch.equal(engine.policy.model.lm_head.weight, backend.model.lm_head.weight)
    # The optimizer state resumes too.
    again = make_backend("torch", lr=1e-3)
    again.load(tmp_path / "v1", optimizer_state=tmp_path / "state")
    steps = [s["step"] for s in again.optimizer.state_dict()["state"].values()]
    assert steps and all(float(s) == 1.0 for s in steps)
    # ...under the configured hyperparameters, not the saved ones (a warm start's SFT rate
    # must not carry into the RL run that resumes from it).
    other = make_backend("torch", lr=2e-5, weight_decay=0.1)
    other.load(tmp_path / "v1", optimizer_state=tmp_path / "state")
    assert {g["lr"] for g in other.optimizer.param_groups} == {2e-5}
    assert {g["weight_decay"] for g in other.optimizer.param_groups} == {0.1}
    assert other.optimizer.state_dict()["state"]  # the moments came along


def test_sft_lowers_the_cross_entropy_of_successful_episodes(
    tiny: Policy, blobs: BlobStore
) -> None:
    book = GroupBook(JUDGE)
    for offset, rollout in enumerate(make_group(tiny, blobs, "g", [1.0, 0.0])):
        for s in rollout.segments:
            book.add_segment(s, ("segment-ready", 0), offset)
        book.add_reward(rollout.reward, ("reward", 0), offset)
    samples = plan_group(book.pending["g"], 0, PlanConfig(objective="sft")).samples
    assert {s.trajectory_id.split("@")[0] for s in samples} == {"g/0"}
    n = sum(s.tokens for s in samples)
    backend = _backend(lr=3e-3)

    def loss_fn(tb):
        return sft_token_loss(
            tb.logp, tb.mask, num_tokens=n, weights=tb.weights, entropy=tb.entropy
        )

    batches = pack_micro_batches(samples, 10_000, 4)
    nll = [
        finish_stats(backend.step(batches, loss_fn, lambda s: load_images(blobs, s))["parts"])[
            "nll"
        ]
        for _ in range(4)
    ]
    assert nll[-1] < nll[0] * 0.9, nll


def test_missing_screenshots_fail_the_step_without_touching_the_weights(
    tiny: Policy, blobs: BlobStore, tmp_path: Path
) -> None:
    samples = _samples(tiny, blobs, [1.0, 0.0])
    backend = _backend()
    before = {k: v.clone() for k, v in backend.model.state_dict().items()}
    empty = open_blob_store(str(tmp_path / "no-blobs"))
    with pytest.raises(Exception, match="no blob"):
        backend.step(
            pack_micro_batches(samples, 10_000, 4), _grpo(10), lambda s: load_images(empty, s)
        )
    assert all(torch.equal(v, before[k]) for k, v in backend.model.state_dict().items())
    assert all(p.grad is None for p in backend.model.parameters())
