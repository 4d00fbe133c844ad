"""The megatron backend on CPU, through the test-only shim in megatron_cpu.py.

Tested here: HF <-> megatron weights exactly (QKV and gated-MLP fusing, vocab padding, TP
shards); the GPTModel built with a single-process gloo group; the same logprobs, reference
logprobs, entropy, loss and gradient norm as the torch backend on the same batch and
weights; a step whose checkpoint the torch backend loads; Qwen2.5-VL's text model with its
vision tower carried through checkpoints untouched. Not tested (no GPU): megatron's own
optimizer (`get_megatron_optimizer` allocates on CUDA, so steps here run torch AdamW on the
DDP gradient buffers, see the shim), the distributed optimizer, TP/PP > 1 and NCCL.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from cli import build_parser
from cli.train_commands import trainer_config
from consumers.trainer.backends import MicroBatch, NonFiniteStep, Sample, TokenBatch, make_backend
from consumers.trainer.backends.megatron_backend import MegatronBackend
from consumers.trainer.backends.megatron_checkpoint import load_optimizer_state, optimizer_manifest
from consumers.trainer.backends.megatron_layout import (
    hf_names,
    hf_to_megatron,
    megatron_layout,
    megatron_to_hf,
    text_architecture,
    tp_shard,
    tp_unshard,
)
from consumers.trainer.grpo import GRPOConfig, finish_stats, grpo_token_loss
from runtime.errors import ConfigError, PolicyError
from runtime.policy.model import default_tiny_policy, load_policy
from runtime.policy.processor import load_processor
from tests.consumers.trainer.megatron_cpu import megatron_on_cpu

# megatron-core 0.16 warns about its own deprecations and missing TE/APEX on every build.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:megatron"),
    pytest.mark.filterwarnings("ignore::UserWarning:megatron"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]

VOCAB = 151665  # the Qwen tokenizer's, so the folder's tokenizer covers every id
NO_IMAGES = lambda s: []  # noqa: E731


def _llama_config(vocab: int = VOCAB) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=False,
    )  # fmt: skip


def _qwen2_config(vocab: int = VOCAB) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cpu_megatron() -> Iterator[None]:
    """megatron-core on CPU with a gloo group of one process, for the whole file."""
    with megatron_on_cpu():
        yield


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (SmolLM2's architecture, untied head) as an HF folder."""
    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    LlamaForCausalLM(_llama_config()).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.json"):
        shutil.copyfile(default_tiny_policy() / name, folder / name)
    return folder


def _sample(rng: np.random.Generator, length: int, advantage: float) -> Sample:
    ids = rng.integers(0, 150_000, length).astype(np.int32)
    mask = np.zeros(length, dtype=bool)
    mask[length // 3 :] = True
    old = np.where(mask, -8.0 - 3.0 * rng.random(length), 0.0).astype(np.float32)
    return Sample(ids, mask, old, advantage=advantage)


def _batches(seed: int = 0) -> list[MicroBatch]:
    rng = np.random.default_rng(seed)
    return [
        MicroBatch((_sample(rng, 21, 1.0), _sample(rng, 12, -0.7)), temperature=0.8),
        MicroBatch((_sample(rng, 9, 2.0),), temperature=0.8),
    ]


def _grpo(batches: list[MicroBatch]):
    n = sum(s.tokens for b in batches for s in b.samples)

    def loss_fn(tb: TokenBatch):
        return grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, GRPOConfig(),
                               num_tokens=n, ref_logp=tb.ref_logp, weights=tb.weights,
                               entropy=tb.entropy)  # fmt: skip

    return loss_fn


def _rows(tb: TokenBatch, field: str) -> list[torch.Tensor]:
    """A TokenBatch field per row over its trained positions (backends pad differently)."""
    values = getattr(tb, field)
    return [values[i][tb.mask[i] > 0] for i in range(len(values))]


def _max_diff(a: TokenBatch, b: TokenBatch, field: str) -> float:
    pairs = zip(_rows(a, field), _rows(b, field), strict=True)
    return max(float((x.detach() - y.detach()).abs().max()) for x, y in pairs)


def _megatron(folder: Path, **options: object) -> MegatronBackend:
    backend = make_backend("megatron", dtype="float32", device="cpu", **options)
    assert isinstance(backend, MegatronBackend)
    backend.load(folder, reference=folder)
    return backend


# -- the layout (pure) ------------------------------------------------------------------------
@pytest.mark.parametrize("config", [_llama_config(300), _qwen2_config(300)], ids=["llama", "qwen2"])
def test_hf_weights_round_trip_through_megatrons_layout_exactly(config) -> None:
    torch.manual_seed(1)
    model_class = LlamaForCausalLM if config.model_type == "llama" else Qwen2ForCausalLM
    hf = {k: v for k, v in model_class(config).state_dict().items() if k != "lm_head.weight"}
    if not config.tie_word_embeddings:
        hf["lm_head.weight"] = torch.randn(config.vocab_size, config.hidden_size)
    arch = text_architecture(config)
    assert arch.qkv_bias == (config.model_type == "qwen2") and set(hf) == hf_names(
        megatron_layout(arch, "model.")
    )
    for tp in (1, 2):
        layout = megatron_layout(arch, "model.", tp)
        assert layout.padded_vocab % (128 * tp) == 0 and layout.padded_vocab >= 300
        megatron = hf_to_megatron(hf, layout)
        resharded = {
            name: tp_unshard(name, [tp_shard(name, t, r, tp) for r in range(tp)])
            for name, t in megatron.items()
        }
        back = megatron_to_hf(resharded, layout)
        assert set(back) == set(hf)
        assert all(torch.equal(back[k], hf[k]) for k in hf)
    # The fused layouts are megatron's: per query group [its q heads, k, v]; fc1 = [gate; up].
    layout = megatron_layout(arch, "model.", 2)
    megatron = hf_to_megatron(hf, layout)
    qkv = megatron["decoder.layers.1.self_attention.linear_qkv.weight"]
    per, d = arch.num_heads // arch.num_kv_heads, arch.head_dim
    group = qkv.view(arch.num_kv_heads, (per + 2) * d, -1)[1]
    q, k = (
        hf["model.layers.1.self_attn.q_proj.weight"],
        hf["model.layers.1.self_attn.k_proj.weight"],
    )
    assert torch.equal(group[: per * d], q[per * d : 2 * per * d])
    assert torch.equal(group[per * d : (per + 1) * d], k[d : 2 * d])
    fc1 = tp_shard("decoder.layers.0.mlp.linear_fc1.weight",
                   megatron["decoder.layers.0.mlp.linear_fc1.weight"], 1, 2)  # fmt: skip
    half = arch.ffn_hidden_size // 2
    assert torch.equal(fc1[:half], hf["model.layers.0.mlp.gate_proj.weight"][half:])
    assert torch.equal(fc1[half:], hf["model.layers.0.mlp.up_proj.weight"][half:])
    embedding = megatron["embedding.word_embeddings.weight"]
    assert embedding.shape[0] == layout.padded_vocab and not embedding[300:].any()


# -- the backend on CPU -----------------------------------------------------------------------
def test_the_model_builds_on_cpu_with_gloo_and_holds_the_checkpoint_exactly(
    cpu_megatron: None, llama: Path
) -> None:
    backend = _megatron(llama)
    assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
    gpt = backend.model.module
    assert type(gpt).__name__ == "GPTModel" and len(gpt.decoder.layers) == 2
    assert backend.layout is not None and backend.layout.padded_vocab == 151680
    stored = load_file(str(llama / "model.safetensors"))
    held = backend.hf_state_dict()
    assert set(held) == set(stored)
    assert all(torch.equal(held[k], stored[k]) for k in stored)
    padding = 2 * (151680 - VOCAB) * 64  # embedding and output rows megatron adds
    assert (
        sum(p.numel() for p in gpt.parameters())
        == sum(t.numel() for t in stored.values()) + padding
    )


def test_megatron_and_torch_give_the_same_logprobs_loss_and_update(
    cpu_megatron: None, llama: Path
) -> None:
    batches = _batches()
    megatron = _megatron(llama, lr=1e-3)
    reference = make_backend("torch", lr=1e-3)
    reference.load(llama, reference=llama)
    for batch in batches:
        a = reference.forward_logprobs(batch, NO_IMAGES)
        b = megatron.forward_logprobs(batch, NO_IMAGES)
        assert _max_diff(a, b, "logp") < 1e-5 and _max_diff(a, b, "ref_logp") < 1e-5
        assert _max_diff(a, b, "old_logp") == 0.0
        assert _max_diff(a, b, "entropy") < 1e-4  # entropies are ~12 nats: relative 1e-5
    ours = megatron.step(batches, _grpo(batches), NO_IMAGES)
    theirs = reference.step(batches, _grpo(batches), NO_IMAGES)
    assert ours["micro_batches"] == theirs["micro_batches"] == 2
    mine, ref = finish_stats(ours["parts"]), finish_stats(theirs["parts"])
    assert mine["tokens"] == ref["tokens"] and abs(ref["loss"]) > 1e-2
    assert abs(mine["loss"] - ref["loss"]) < 1e-5
    assert mine["kl"] == pytest.approx(ref["kl"], abs=1e-7)
    assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
    # One AdamW step (lr 1e-3) on both sides lands on the same weights. Adam's first step
    # moves a weight by about lr·sign(g), so the few weights whose gradient is near Adam's eps
    # (1e-8) amplify float noise: bound at 5% of one step (measured here: at most 0.7%).
    trained = reference.model.state_dict()
    after = megatron.hf_state_dict()
    assert max(float((after[k] - trained[k]).abs().max()) for k in after) < 5e-5
    assert not torch.equal(
        after["model.norm.weight"], load_file(str(llama / "model.safetensors"))["model.norm.weight"]
    )


def _poisoned(batches: list[MicroBatch], advantage: float) -> list[MicroBatch]:
    """The batches with one trained token's rollout logprob at -200 (finite, absurd): the
    importance ratio exp(logp + 200) overflows float32 to inf."""
    first = batches[0].samples[0]
    old = first.old_logprobs.copy()
    old[np.flatnonzero(first.mask)[0]] = -200.0
    sample = dataclasses.replace(first, old_logprobs=old, advantage=advantage)
    return [dataclasses.replace(batches[0], samples=(sample, *batches[0].samples[1:])),
            *batches[1:]]  # fmt: skip


def test_neither_backend_applies_a_step_whose_loss_or_gradient_is_not_finite(
    cpu_megatron: None, llama: Path
) -> None:
    megatron = _megatron(llama, lr=1e-3)
    reference = make_backend("torch", lr=1e-3)
    reference.load(llama, reference=llama)
    before = megatron.hf_state_dict()
    torch_before = {k: v.clone() for k, v in reference.model.state_dict().items()}
    # Â ≠ 0: the clipped loss is finite, its gradient NaN (0 · inf in backward); Â = 0: the
    # loss itself is 0 · inf = NaN.
    for advantage, reason in ((1.0, "gradient"), (0.0, "micro-batch 0: the loss is nan")):
        batches = _poisoned(_batches(seed=3), advantage)
        for backend in (megatron, reference):
            with pytest.raises(NonFiniteStep, match=reason):
                backend.step(batches, _grpo(batches), NO_IMAGES)
    after = megatron.hf_state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert all(torch.equal(v, torch_before[k]) for k, v in reference.model.state_dict().items())
    assert megatron.nonfinite_parameters() == 0 == reference.nonfinite_parameters()
    assert (
        megatron.optimizer.state_dict()["state"] == {} == reference.optimizer.state_dict()["state"]
    )
    # Nothing of the refused steps lingers in the gradient buffers: the next step is as usual.
    batches = _batches(seed=3)
    ours = megatron.step(batches, _grpo(batches), NO_IMAGES)
    theirs = reference.step(batches, _grpo(batches), NO_IMAGES)
    assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)


def test_a_checkpoint_loads_as_a_policy_and_the_optimizer_resumes(
    cpu_megatron: None, llama: Path, tmp_path: Path
) -> None:
    batches = _batches(seed=1)
    megatron = _megatron(llama, lr=1e-3)
    megatron.step(batches, _grpo(batches), NO_IMAGES)
    megatron.save(tmp_path / "v1")
    megatron.save_state(tmp_path / "state")
    files = {p.name for p in (tmp_path / "v1").iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= files
    tokenizer = load_policy(tmp_path / "v1").processor.tokenizer
    assert tokenizer.encode("hello") == load_processor(llama).tokenizer.encode("hello")
    loaded = make_backend("torch")
    loaded.load(tmp_path / "v1")
    for batch in batches:
        a = loaded.forward_logprobs(batch, NO_IMAGES)
        b = megatron.forward_logprobs(batch, NO_IMAGES)
        assert _max_diff(a, b, "logp") < 1e-5
    again = make_backend("megatron", lr=1e-3, dtype="float32", device="cpu")
    again.load(tmp_path / "v1", optimizer_state=tmp_path / "state")
    steps = {float(s["step"]) for s in again.optimizer.state_dict()["state"].values()}
    assert steps == {1.0}


class _WritesAFile:
    """A pickle that writes a file when it is loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (Path.write_text, (self.path, "written by a forged optimizer.pt"))


def test_an_optimizer_state_that_names_code_is_refused_without_running_it(tmp_path: Path) -> None:
    # Issue 30: optimizer.pt was loaded with weights_only=False, running whatever it named.
    marker = tmp_path / "pwned"
    torch.save(_WritesAFile(marker), tmp_path / "optimizer.pt")
    with pytest.raises(PolicyError, match="holds more than tensors and plain data"):
        load_optimizer_state(None, optimizer_manifest(1, 1, False), tmp_path)
    assert not marker.exists()


def test_qwen25vl_trains_its_text_model_and_carries_the_vision_tower(
    cpu_megatron: None, tmp_path: Path
) -> None:
    tiny = default_tiny_policy()
    megatron = make_backend("megatron", dtype="float32", device="cpu")
    megatron.load(tiny)
    reference = make_backend("torch")
    reference.load(tiny)
    batch = _batches()[0]  # text only: multimodal RoPE on text is plain RoPE
    a = reference.forward_logprobs(batch, NO_IMAGES)
    b = megatron.forward_logprobs(batch, NO_IMAGES)
    assert _max_diff(a, b, "logp") < 1e-5
    megatron.save(tmp_path / "v1")
    stored, saved = load_file(str(tiny / "model.safetensors")), load_file(str(tmp_path / "v1" / "model.safetensors"))  # fmt: skip
    assert set(saved) == set(stored) and any(k.startswith("visual.") for k in saved)
    assert all(torch.equal(saved[k], stored[k]) for k in stored)
    assert load_policy(tmp_path / "v1").processor.is_multimodal
    with_image = Sample(batch.samples[0].ids, batch.samples[0].mask,
                        batch.samples[0].old_logprobs, image_refs=("blob",), image_sizes=((56, 56),))  # fmt: skip
    with pytest.raises(PolicyError, match="vision model .* not supported by this backend yet"):
        megatron.forward_logprobs(MicroBatch((with_image,)), NO_IMAGES)


def test_the_cli_selects_megatron_and_cpu_without_the_shim_is_refused(
    cpu_megatron: None, llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = build_parser().parse_args(["train", "--backend", "megatron", "--dtype", "bfloat16"])
    config, options = trainer_config(args)
    assert config.backend == "megatron"
    backend = make_backend(config.backend, **options)
    assert isinstance(backend, MegatronBackend) and backend.config.dtype == "bfloat16"

    def no_cuda() -> int:
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    with pytest.raises(ConfigError, match="--device cuda"):
        backend.load(llama)  # the CLI's default --device cpu, and no shim


def test_megatrons_own_optimizers_refuse_cpu_so_the_distributed_one_is_untested_here(
    cpu_megatron: None, llama: Path
) -> None:
    # What the docs claim: megatron-core 0.16.1's optimizers cannot run on CPU, so the tests
    # step with the shim's AdamW and the distributed optimizer is correct by construction only.
    # Its own tensors are made on CUDA (optimizer.py: `torch.tensor(..., device='cuda')`), and
    # with those redirected its type checks still ask for `torch.cuda.FloatTensor` parameters
    # (distrib_optimizer.py, clip_grads.py). If this starts passing, test the real optimizers.
    from megatron.core.optimizer import get_megatron_optimizer

    from consumers.trainer.backends.megatron_model import optimizer_config

    for distributed in (False, True):
        backend = _megatron(llama, distributed_optimizer=distributed)
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            get_megatron_optimizer(optimizer_config(backend.config), [backend.model])
