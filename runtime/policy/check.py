"""The end-to-end policy self-check: a multi-turn rollout, then a recompute of its logprobs.

An episode of `turns` steps is played against synthetic screenshots: at each step the
history is extended by a token diff (`HistoryRenderer`), the engine samples a response and
reports its logprobs, and the sampled ids enter the history verbatim. The finished history
is then rendered once more from scratch (`render_history`, as the segmenter will) and its
response tokens' logprobs recomputed in one forward pass (as the trainer will). The check
reports the largest difference: if rendering, image placement or position ids disagreed
anywhere, it would show here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from runtime.engines.base import GenerationRequest, SamplingParams
from runtime.errors import PolicyError
from runtime.policy.logprobs import recompute_logprobs
from runtime.policy.prompts import system_prompt
from runtime.policy.render import HistoryRenderer, Turn, render_history

__all__ = ["synthetic_screenshot", "check_policy", "TOLERANCE_FP32"]

log = logging.getLogger(__name__)

TOLERANCE_FP32 = 1e-5


def synthetic_screenshot(step: int, size: tuple[int, int] = (640, 400)) -> Any:
    """A deterministic desktop-like image that differs per step."""
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("RGB", size, (236, 236, 236))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, 0, width, 24], fill=(48, 48, 64))  # a title bar
    x = (step * 97) % max(1, width - 120)
    y = 40 + (step * 53) % max(1, height - 100)
    draw.rectangle([x, y, x + 110, y + 40], fill=(40 + 30 * step % 200, 120, 200))
    draw.text((x + 8, y + 12), f"Button {step}", fill=(255, 255, 255))
    return image


def check_policy(
    engine: Any,
    turns: int = 5,
    max_tokens: int = 16,
    temperature: float = 1.0,
    image_size: tuple[int, int] = (640, 400),
    seed: int = 0,
    prompt: str | None = None,
    tolerance: float = TOLERANCE_FP32,
) -> dict[str, Any]:
    """Play a `turns`-step episode on the engine and compare its logprobs with a recompute."""
    policy = engine.policy
    processor = policy.processor
    prompt = system_prompt("osworld") if prompt is None else prompt
    instruction = "Open the file report.txt and save it as a PDF."
    multimodal = processor.is_multimodal
    renderer = HistoryRenderer(prompt, instruction, processor)
    history: list[Turn] = []
    sampled: list[float] = []
    started = time.perf_counter()
    for step in range(turns):
        screenshot = synthetic_screenshot(step, image_size) if multimodal else None
        observation = f"Step {step + 1}." if multimodal else f"[window] Editor - step {step + 1}"
        request_prompt = renderer.observe(screenshot, observation)
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + step)
        request = GenerationRequest(list(request_prompt.ids), list(request_prompt.images), sampling)
        (result,) = engine.generate_sync([request])
        if result.finish_reason == "error":
            raise PolicyError(f"generation failed at step {step}: {result.error}")
        renderer.respond(result.token_ids)
        history.append(
            Turn(screenshot, observation, response="", response_ids=tuple(result.token_ids))
        )
        sampled.extend(result.logprobs)
        log.info(
            "turn %d/%d: prompt %d tokens, sampled %d (%s)",
            step + 1,
            turns,
            len(request.prompt_ids),
            len(result.token_ids),
            result.finish_reason,
        )
    generate_s = time.perf_counter() - started
    full = render_history(prompt, instruction, history, processor)
    if full.ids != renderer.rendered.ids or full.loss_mask != renderer.rendered.loss_mask:
        raise PolicyError("the token-diff history differs from the full render")
    positions = [i for i, m in enumerate(full.loss_mask) if m]
    started = time.perf_counter()
    recomputed = recompute_logprobs(
        policy.model, processor, full.ids, full.images, temperature, positions
    )
    recompute_s = time.perf_counter() - started
    if len(recomputed) != len(sampled):
        raise PolicyError(f"{len(sampled)} sampled tokens but {len(recomputed)} in the history")
    diff = max((abs(a - b) for a, b in zip(sampled, recomputed, strict=True)), default=0.0)
    dtype = str(policy.dtype).removeprefix("torch.")
    return {
        "policy": str(policy.path),
        "dtype": dtype,
        "turns": turns,
        "images": len(full.images),
        "tokens": len(full.ids),
        "sampled_tokens": len(sampled),
        "max_abs_logprob_diff": diff,
        "ok": diff <= tolerance if dtype == "float32" else None,
        "generate_s": round(generate_s, 3),
        "recompute_s": round(recompute_s, 3),
    }
