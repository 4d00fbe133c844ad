"""Shared-prefix layout: runs chosen by tokens computed, passes under the budget, and the
torch backend's logprobs and gradients equal to computing every sample as its own row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from consumers.trainer.backends import MicroBatch, Sample, make_backend
from consumers.trainer.backends.torch_backend import TorchBackend
from consumers.trainer.grpo import GRPOConfig, grpo_token_loss
from consumers.trainer.shared_prefix import (
    common_prefix,
    pack_branches,
    pack_shared,
    prefix_runs,
    run_cost,
    shareable,
)
from runtime.policy.model import default_tiny_policy, smollm2_policy


def _sample(ids: list[int], trained_from: int, **kw: object) -> Sample:
    arr = np.asarray(ids, np.int32)
    mask = np.zeros(len(arr), bool)
    mask[trained_from:] = True
    return Sample(arr, mask, np.where(mask, -1.0, 0.0).astype(np.float32), **kw)


def _group(prefix: list[int], n: int, seed: int, first: int = 0) -> list[Sample]:
    """n samples: the prefix (untrained), then a prompt tail and a trained response each."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tail = list(rng.integers(1000, 2000, 3 + i))
        response = list(rng.integers(2000, 3000, 4 + (i % 3)))
        out.append(_sample(prefix + tail + response, len(prefix) + len(tail), advantage=i - first))
    return out


def test_common_prefix_and_what_a_sample_may_share() -> None:
    a, b = np.array([1, 2, 3, 4]), np.array([1, 2, 9])
    assert common_prefix(a, b) == 2 and common_prefix(a, a) == 4 and common_prefix(a, a[:0]) == 0
    # Trained from position 5: positions 0..3 may be shared, 4 predicts the first trained one.
    assert shareable(_sample(list(range(10)), 5)) == 4
    untrained = Sample(np.arange(6, dtype=np.int32), np.zeros(6, bool), np.zeros(6, np.float32))
    assert shareable(untrained) == 5
    assert run_cost([10, 12, 8], 0) == 36 and run_cost([10, 12, 8], 6) == 6 + 4 + 6 + 2


def test_runs_follow_the_groups_and_never_share_a_trained_position() -> None:
    system = list(range(100, 130))  # a system prompt every sample shares (30 tokens)
    a = _group(system + list(range(500, 560)), 8, seed=1)  # group a: 90 shared tokens
    b = _group(system + list(range(700, 740)), 6, seed=2)  # group b: 70 shared tokens
    loner = [_sample(list(range(5000, 5040)), 20)]  # shares nothing with anyone
    samples = a[:4] + b[:3] + loner + a[4:] + b[3:]
    runs = prefix_runs(samples)
    assert sorted(i for r in runs for i in r.members) == list(range(len(samples)))
    shared = {tuple(sorted(r.members)): r.shared for r in runs}
    index = {id(s): i for i, s in enumerate(samples)}
    assert shared[tuple(sorted(index[id(s)] for s in a))] == 90
    assert shared[tuple(sorted(index[id(s)] for s in b))] == 70
    assert shared[(index[id(loner[0])],)] == 0
    for r in runs:
        for i in r.members:
            if r.shared:
                assert r.shared <= shareable(samples[i])
                assert not samples[i].mask[: r.shared + 1].any()


def test_a_prefix_shorter_than_the_minimum_is_not_shared() -> None:
    samples = _group(list(range(10)), 4, seed=3)
    assert all(r.shared == 0 and len(r.members) == 1 for r in prefix_runs(samples, min_shared=16))
    assert [r.shared for r in prefix_runs(samples, min_shared=8)] == [10]


def test_packing_keeps_every_pass_under_the_budget_and_every_sample_once() -> None:
    system = list(range(100, 160))
    samples = _group(system + [7] * 40, 8, seed=4) + _group(system + [8] * 40, 8, seed=5)
    samples += [_sample(list(range(3000, 3000 + 30 + i)), 10) for i in range(5)]
    budget = 150
    batches = pack_shared(samples, budget, max_rows=2)
    seen = [id(s) for b in batches for s in b.samples]
    assert sorted(seen) == sorted(id(s) for s in samples)
    for b in batches:
        in_runs = {i for r in b.runs for i in r.members}
        singles = [len(s.ids) for i, s in enumerate(b.samples) if i not in in_runs]
        cost = sum(run_cost([len(b.samples[i].ids) for i in r.members], r.shared) for r in b.runs)
        cost += len(singles) * max(singles, default=0)
        assert cost <= budget and len(singles) <= 2
        for r in b.runs:
            assert len(r.members) > 1 and r.shared == 100
    # A group of 8 (100 shared, branches of 7-16) does not fit 150 in one pass: it is cut, each
    # chunk keeping the prefix (a chunk of one is a row of its own).
    runs = [r for b in batches for r in b.runs]
    assert len(runs) >= 4 and all(1 < len(r.members) < 8 for r in runs)


def test_branches_pack_into_rows_under_the_capacity() -> None:
    lengths = [300, 120, 250, 90, 700, 60, 200]
    rows = pack_branches(lengths, 512)
    assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
    assert [4] in rows  # longer than the capacity: a row of its own
    assert all(sum(lengths[i] for i in r) <= 512 for r in rows if r != [4])
    assert len(rows) == 4  # 700 | 300+200 | 250+120+90 | 60 (first fit, longest first)


def test_samples_of_other_sampling_settings_never_share_a_pass() -> None:
    prefix = list(range(50))
    warm = [Sample(s.ids, s.mask, s.old_logprobs, temperature=0.7) for s in _group(prefix, 3, 6)]
    batches = pack_shared(_group(prefix, 3, 7) + warm, 10_000, 4)
    assert len(batches) == 2
    assert all({s.temperature for s in b.samples} == {b.temperature} for b in batches)


# -- the torch backend on a real text-only policy ------------------------------------------
@pytest.fixture(scope="module")
def smollm2() -> TorchBackend:
    backend = make_backend("torch", lr=1e-5)
    base = smollm2_policy()
    backend.load(base, reference=base)
    return backend


def _chat_group(backend: TorchBackend, n: int) -> list[Sample]:
    """A GRPO group's segments: one first prompt, two sampled turns each (both trained)."""
    tok = backend.processor.tokenizer
    rng = np.random.default_rng(0)
    prompt = tok.encode(
        "<|im_start|>system\nYou operate a desktop. Reply with one JSON action.<|im_end|>\n"
        "<|im_start|>user\nCreate the folder projects in your home.\nWindow: xterm\n$ ls\n"
        "Documents notes.txt<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    out = []
    for i in range(n):
        first = list(rng.integers(100, 20_000, 6 + i))
        obs = tok.encode(f"<|im_end|>\n<|im_start|>user\n$ mkdir p{i}\n" + "ok " * i
                         + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)  # fmt: skip
        second = list(rng.integers(100, 20_000, 4))
        ids = np.asarray(prompt + first + obs + second, np.int32)
        mask = np.zeros(len(ids), bool)
        mask[len(prompt) : len(prompt) + len(first)] = True
        mask[-len(second) :] = True
        old = np.where(mask, -4.0, 0.0).astype(np.float32)
        out.append(Sample(ids, mask, old, advantage=(-1.0) ** i, temperature=0.8))
    return out


def _forward(backend: TorchBackend, batch: MicroBatch) -> tuple[dict, dict]:
    """Token values per sample (by identity) and the gradient of the GRPO loss."""
    backend.model.zero_grad(set_to_none=True)
    tb = backend._token_batch(batch, lambda s: [])
    config = GRPOConfig(kl_coef=1e-2 if tb.ref_logp is not None else 0.0)
    loss, _ = grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, config,
                              num_tokens=int(tb.mask.sum()), ref_logp=tb.ref_logp,
                              weights=tb.weights)  # fmt: skip
    loss.backward()
    values = {}
    for row, s in enumerate(batch.samples):
        n = s.tokens
        assert tb.mask[row, :n].all() and not tb.mask[row, n:].any()
        ref = tb.ref_logp[row, :n] if tb.ref_logp is not None else None
        values[id(s)] = (tb.logp[row, :n].detach(), ref, tb.entropy[row, :n],
                         tb.old_logp[row, :n], tb.advantages[row])  # fmt: skip
    grads = {k: p.grad.clone() for k, p in backend.model.named_parameters() if p.grad is not None}
    backend.model.zero_grad(set_to_none=True)
    return values, grads


@pytest.mark.parametrize("row_tokens", [512, 40])  # all branches in one row; several rows
def test_a_shared_prefix_gives_the_logprobs_and_gradients_of_separate_rows(
    smollm2: TorchBackend, row_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert smollm2.shares_prefixes
    monkeypatch.setattr(smollm2, "config", replace(smollm2.config, branch_row_tokens=row_tokens))
    samples = _chat_group(smollm2, 5)
    [shared] = pack_shared(samples, 100_000, 4)
    assert len(shared.runs) == 1 and len(shared.runs[0].members) == 5 and shared.runs[0].shared > 40
    rows, rows_grads = _forward(smollm2, MicroBatch(tuple(samples), 0.8))
    one, one_grads = _forward(smollm2, shared)
    for s in samples:
        a, b = rows[id(s)], one[id(s)]
        for x, y in zip(a[:3], b[:3], strict=True):  # logprobs, reference, entropy
            assert (x - y).abs().max().item() < 5e-5
        assert torch.equal(a[3], b[3]) and float(a[4]) == float(b[4])
    assert rows_grads.keys() == one_grads.keys()
    for name, g in rows_grads.items():
        scale = g.abs().max().item()
        assert (g - one_grads[name]).abs().max().item() <= 2e-4 * scale + 1e-9, name


def test_runs_are_ignored_where_prefixes_cannot_be_shared() -> None:
    tiny = make_backend("torch")
    tiny.load(default_tiny_policy())
    assert not tiny.shares_prefixes  # images need multimodal positions
    checkpointed = make_backend("torch", gradient_checkpointing=True)
    checkpointed.load(smollm2_policy())
    assert not checkpointed.shares_prefixes  # checkpointing turns the key/value cache off
    off = make_backend("torch", share_prefixes=False)
    off.load(smollm2_policy())
    assert not off.shares_prefixes
    samples = _chat_group(off, 3)
    [batch] = pack_shared(samples, 100_000, 4)
    values, _ = _forward(off, batch)  # computed as rows, the runs notwithstanding
    assert set(values) == {id(s) for s in samples}
