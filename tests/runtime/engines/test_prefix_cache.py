"""Prefix reuse in the transformers engine: same tokens and logprobs as computing it all."""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

from runtime.engines.base import GenerationRequest, SamplingParams
from runtime.engines.transformers_engine import TransformersEngine
from runtime.policy.logprobs import recompute_logprobs
from runtime.policy.model import Policy, load_policy

torch.set_num_threads(2)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.fixture(scope="module")
def smollm2() -> Policy:
    """SmolLM2-135M-Instruct: a real text-only policy (the prefix cache is text-only)."""
    return load_policy("smollm2")


def _chat(policy: Policy, *turns: str) -> list[int]:
    messages = [{"role": "system", "content": "You operate a desktop. Reply with JSON."}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    tok = policy.processor.tokenizer
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def _same(a, b) -> None:
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    for x, y in zip(a, b, strict=True):
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) <= 1e-4


def test_multi_turn_prompts_reuse_the_last_turn(smollm2: Policy) -> None:
    cached = TransformersEngine(smollm2, prefix_cache_tokens=100_000)
    plain = TransformersEngine(smollm2, prefix_cache_tokens=0)
    assert plain.prefix_cache is None
    first = [_chat(smollm2, f"Task {i}: save the file.\nWindow: notes.txt") for i in range(3)]
    requests = [GenerationRequest(p, [], GREEDY) for p in first]
    turn1 = cached.generate_sync(requests)
    _same(turn1, plain.generate_sync(requests))
    assert cached.prefix_cache.hits == 0  # distinct prompts, nothing cached yet
    assert cached.prefix_cache.tokens > 0
    hits = cached.prefix_cache.hits
    # Turn 2 of each: its whole first prompt and response are cached, only the rest is new.
    second = [
        [*p, *r.token_ids, *smollm2.processor.tokenizer.encode("\nWindow: saved")]
        for p, r in zip(first, turn1, strict=True)
    ]
    requests = [GenerationRequest(p, [], GREEDY) for p in second]
    _same(cached.generate_sync(requests), plain.generate_sync(requests))
    reused = cached.prefix_cache.hits - hits
    assert reused >= sum(len(p) + len(r.token_ids) - 1 for p, r in zip(first, turn1, strict=True))


def test_a_groups_duplicate_prompts_are_computed_once(smollm2: Policy) -> None:
    cached = TransformersEngine(smollm2, prefix_cache_tokens=100_000)
    plain = TransformersEngine(smollm2, prefix_cache_tokens=0)
    prompt = _chat(smollm2, "Append the line 'done' to todo.txt in the terminal.")
    sampled = SamplingParams(temperature=1.0, max_tokens=6)
    requests = [GenerationRequest(prompt, [], sampled) for _ in range(4)]
    out = cached.generate_sync(requests)
    # Three of the four rows took the shared prompt (all but its last token) from the cache.
    assert cached.prefix_cache.hits >= 3 * (len(prompt) - 1)
    # Each row's sampled logprobs are those of a full recompute (the rows are not mixed up).
    for r in out:
        ids = [*prompt, *r.token_ids]
        again = recompute_logprobs(
            smollm2.model, smollm2.processor, ids, [], 1.0, range(len(prompt), len(ids))
        )
        assert max(abs(a - b) for a, b in zip(again, r.logprobs, strict=True)) <= 1e-4
    greedy = [GenerationRequest(prompt, [], GREEDY) for _ in range(4)]
    _same(cached.generate_sync(greedy), plain.generate_sync(greedy))


def test_a_weight_load_forgets_the_cache(smollm2: Policy, tmp_path) -> None:
    engine = TransformersEngine(smollm2, prefix_cache_tokens=100_000)
    engine.generate_sync([GenerationRequest(_chat(smollm2, "hello"), [], GREEDY)])
    assert engine.prefix_cache.tokens > 0
    smollm2.model.save_pretrained(tmp_path)
    asyncio.run(engine.load_weights(str(tmp_path), policy_version=1))
    assert engine.prefix_cache.tokens == 0 and engine.policy_version == 1


def test_a_full_round_is_one_batch(smollm2: Policy) -> None:
    engine = TransformersEngine(smollm2, max_batch=8, batch_wait_s=5.0)
    engine.expected = lambda: 4  # four agents are playing

    async def play() -> int:
        before = engine.batches

        async def agent(i: int) -> None:
            await asyncio.sleep(0.1 * i)  # they finish their turns a moment apart
            await engine.generate([GenerationRequest(_chat(smollm2, f"task {i}"), [], GREEDY)])

        await asyncio.gather(*(agent(i) for i in range(4)))
        return engine.batches - before

    assert asyncio.run(play()) == 1
