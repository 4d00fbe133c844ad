"""The trainer's backends across two ranks (gloo, CPU), driven from this process as rank 0,
against one rank on the same batch: the same step, the same weights (fp32, within 1e-5).

One two-rank group serves the whole file (rank 1 is a child process built by the driver):
the torch backend sharded with FSDP2 on the tiny Qwen2.5-VL with screenshots, then the
megatron backend on a tiny Llama with TP = 2, with DP = 2 and with PP = 2 (megatron-core
through the CPU shim on both ranks; its optimizer is the shim's AdamW, see megatron_cpu.py).
The one-rank references are computed first, in this process, before the group exists.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from consumers.trainer.backends import MicroBatch, NonFiniteStep, make_backend, spmd
from consumers.trainer.batching import GroupBook, PlanConfig, pack_micro_batches, plan_group
from consumers.trainer.grpo import GRPOConfig, StepObjective, finish_stats
from consumers.trainer.ranks import RankGroup, RankSpec
from consumers.trainer.screenshots import MissingImage, load_images
from consumers.trainer.shared_prefix import batch_cost
from runtime.blobstore import open_blob_store
from runtime.policy.model import Policy, default_tiny_policy, load_policy
from tests.consumers.trainer.harness import JUDGE, make_group
from tests.consumers.trainer.megatron_cpu import cpu_patches, megatron_on_cpu
from tests.consumers.trainer.test_megatron_backend import _batches, _llama_config

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:megatron"),
    pytest.mark.filterwarnings("ignore::UserWarning:megatron"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]

SHIM = "tests.consumers.trainer.megatron_cpu:install"
MEGATRON = {"tp2": {"tensor_parallel": 2}, "dp2": {}, "pp2": {"pipeline_parallel": 2}}


@dataclasses.dataclass
class Data:
    blobs_url: str
    batches: list[MicroBatch]  # tiny Qwen2.5-VL segments with screenshots
    objective: StepObjective
    llama: Path
    text: list[MicroBatch]  # random text for the tiny Llama


def _loader(url: str):  # noqa: ANN202
    blobs = open_blob_store(url)
    return lambda sample: load_images(blobs, sample)


def _text_objective(batches: list[MicroBatch]) -> StepObjective:
    return StepObjective("grpo", sum(s.tokens for b in batches for s in b.samples), GRPOConfig())


@pytest.fixture(scope="module")
def data(tiny: Policy, tmp_path_factory: pytest.TempPathFactory) -> Data:
    root = tmp_path_factory.mktemp("ranks")
    blobs = open_blob_store(str(root / "blobs"))
    book = GroupBook(JUDGE)
    groups = {"a": [1.0, 0.0, 0.5], "b": [0.0, 1.0]}
    for name, scores in groups.items():
        for offset, rollout in enumerate(make_group(tiny, blobs, name, scores, segments=2)):
            for s in rollout.segments:
                book.add_segment(s, ("segment-ready", 0), offset * 10 + s.segment_index)
            book.add_reward(rollout.reward, ("reward", 0), offset)
    samples = [s for g in groups for s in plan_group(book.pending[g], 0, PlanConfig()).samples]
    batches = pack_micro_batches(samples, 10_000, 2)
    objective = StepObjective("grpo", sum(s.tokens for s in samples), GRPOConfig(kl_coef=1e-2))
    llama = root / "llama"
    torch.manual_seed(0)
    LlamaForCausalLM(_llama_config()).save_pretrained(llama)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.json"):
        shutil.copyfile(default_tiny_policy() / name, llama / name)
    return Data(blobs.url, batches, objective, llama, _batches())


@pytest.fixture(scope="module")
def one_rank(data: Data, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every reference on one rank, in this process, without a process group."""
    out = tmp_path_factory.mktemp("one")
    base = default_tiny_policy()
    backend = make_backend("torch", lr=1e-3)
    backend.load(base, reference=base)
    result = backend.step(data.batches, data.objective, _loader(data.blobs_url))
    backend.save(out / "torch")
    backend.save_state(out / "torch-state")
    second = backend.step(data.batches, data.objective, _loader(data.blobs_url))
    backend.save(out / "torch-2")
    refs: dict = {"torch": (result, second, out)}
    with megatron_on_cpu():  # TP = PP = DP = 1
        megatron = make_backend("megatron", dtype="float32", device="cpu", lr=1e-4)
        megatron.load(data.llama, reference=data.llama)
        step = megatron.step(data.text, _text_objective(data.text), lambda s: [])
        refs["megatron"] = (step, megatron.hf_state_dict())
        megatron.close()
    return refs


@pytest.fixture(scope="module")
def group(one_rank: dict, data: Data) -> Iterator[RankGroup]:
    """Two ranks: this process and a child, started after the references."""
    spec = RankSpec("torch", {"lr": 1e-3}, blobs=data.blobs_url, threads=1)
    ranks = RankGroup.spawn(2, spec)
    try:
        ranks.connect()
        yield ranks
    finally:
        ranks.close()


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_two_fsdp_ranks_take_the_step_one_rank_takes(
    group: RankGroup, one_rank: dict, data: Data, tmp_path: Path
) -> None:
    (result, second, out) = one_rank["torch"]
    backend = group.backend()
    base = default_tiny_policy()
    backend.load(base, reference=base)
    # Sharded for real: rank 0 holds about half of every weight and of the reference.
    local = backend.local
    held = sum(p.to_local().numel() for p in local.model.parameters())
    assert held < 0.6 * sum(p.numel() for p in local.model.parameters())
    assert not backend.shares_prefixes  # one forward per micro-batch on every rank
    ours = backend.step(data.batches, data.objective, _loader(data.blobs_url))
    assert len(data.batches) >= 3 and ours["micro_batches"] == result["micro_batches"]
    assert ours["grad_norm"] == pytest.approx(result["grad_norm"], rel=1e-5)
    mine, ref = finish_stats(ours["parts"]), finish_stats(result["parts"])
    assert mine["tokens"] == ref["tokens"] and mine["kl"] == pytest.approx(ref["kl"], abs=1e-9)
    assert mine["entropy"] == pytest.approx(ref["entropy"], rel=1e-6)
    backend.save(tmp_path / "v1")
    backend.save_state(tmp_path / "state")
    theirs = load_file(str(out / "torch" / "model.safetensors"))
    weights = load_file(str(tmp_path / "v1" / "model.safetensors"))
    assert _max_diff(weights, theirs) < 1e-5
    start = load_file(str(base / "model.safetensors"))
    assert _max_diff(weights, start) > 5e-4  # the step moved the weights (lr 1e-3)
    state, ref_state = (torch.load(p / "optimizer.pt") for p in (tmp_path / "state",
                                                                 out / "torch-state"))  # fmt: skip
    assert state["state"].keys() == ref_state["state"].keys()
    assert max(float((state["state"][i]["exp_avg_sq"] - ref_state["state"][i]["exp_avg_sq"])
                     .abs().max()) for i in state["state"]) < 1e-9  # fmt: skip
    # The checkpoint is an ordinary policy folder; a second step continues alike, from
    # this group's own state and from the one-rank run's.
    assert load_policy(tmp_path / "v1").processor.is_multimodal
    again = backend.step(data.batches, data.objective, _loader(data.blobs_url))
    assert again["grad_norm"] == pytest.approx(second["grad_norm"], rel=1e-4)
    backend.load(out / "torch", reference=base, optimizer_state=out / "torch-state")
    resumed = backend.step(data.batches, data.objective, _loader(data.blobs_url))
    assert resumed["grad_norm"] == pytest.approx(second["grad_norm"], rel=1e-4)
    backend.save(tmp_path / "v2")  # the moments came along: the same second update
    two = load_file(str(out / "torch-2" / "model.safetensors"))
    assert _max_diff(load_file(str(tmp_path / "v2" / "model.safetensors")), two) < 1e-5


def test_a_failure_on_one_rank_stops_the_step_on_both_and_the_group_goes_on(
    group: RankGroup, data: Data, tmp_path: Path
) -> None:
    backend = group.backend()
    base = default_tiny_policy()
    backend.load(base, reference=base)
    backend.save(tmp_path / "before")
    theirs = spmd.share([batch_cost(b) for b in data.batches], 2)[1]  # rank 1's micro-batches
    target = data.batches[theirs[0]]
    first = target.samples[0]
    old = first.old_logprobs.copy()
    old[np.flatnonzero(first.mask)[0]] = -200.0  # finite, absurd: the ratio overflows to inf
    for advantage, reason in ((1.0, "gradient norm is nan"), (0.0, f"micro-batch {theirs[0]}: "
                                                                 "the loss is nan")):  # fmt: skip
        poisoned = dataclasses.replace(first, old_logprobs=old, advantage=advantage)
        batches = list(data.batches)
        batches[theirs[0]] = dataclasses.replace(target, samples=(poisoned, *target.samples[1:]))
        with pytest.raises(NonFiniteStep, match=reason):
            backend.step(batches, data.objective, _loader(data.blobs_url))
    # A screenshot only rank 1 loads is gone: both ranks stop with rank 1's error.
    refs = ("sha256:" + "0" * 64, *first.image_refs[1:])
    missing = dataclasses.replace(first, image_refs=refs, trajectory_id="gone")
    batches = list(data.batches)
    batches[theirs[0]] = dataclasses.replace(target, samples=(missing, *target.samples[1:]))
    with pytest.raises(MissingImage, match="gone"):
        backend.step(batches, data.objective, _loader(data.blobs_url))
    assert backend.nonfinite_parameters() == 0
    # Rank 0 alone fails to write a checkpoint (after every rank gathered): its own error.
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        backend.save(tmp_path / "file" / "v1")
    backend.save(tmp_path / "after")
    before = load_file(str(tmp_path / "before" / "model.safetensors"))
    assert _max_diff(load_file(str(tmp_path / "after" / "model.safetensors")), before) == 0.0
    backend.step(data.batches, data.objective, _loader(data.blobs_url))  # the group goes on


@pytest.mark.parametrize("layout", list(MEGATRON))
def test_megatron_across_two_ranks_takes_the_step_one_rank_takes(
    group: RankGroup, one_rank: dict, data: Data, tmp_path: Path, layout: str
) -> None:
    reference, weights = one_rank["megatron"]
    options = {"dtype": "float32", "device": "cpu", "lr": 1e-4, **MEGATRON[layout]}
    with cpu_patches():
        backend = group.backend(RankSpec("megatron", options, setup=SHIM))
        try:
            backend.load(data.llama, reference=data.llama)
            ours = backend.step(data.text, _text_objective(data.text), lambda s: [])
            backend.save(tmp_path / "v1")
        finally:
            backend.close()
    assert ours["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-5)
    mine, ref = finish_stats(ours["parts"]), finish_stats(reference["parts"])
    assert mine["tokens"] == ref["tokens"] and mine["loss"] == pytest.approx(ref["loss"], abs=1e-7)
    saved = load_file(str(tmp_path / "v1" / "model.safetensors"))
    assert _max_diff(saved, weights) < 1e-5
    assert _max_diff(saved, load_file(str(data.llama / "model.safetensors"))) > 5e-5  # moved
