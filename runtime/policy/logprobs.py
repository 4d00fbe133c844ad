"""Per-token logprobs of given token ids (with images), computed as the trainer computes them.

The rollout engine reports, for each sampled token, its log-probability under the
distribution it was sampled from (`sampling_logprobs`): logits divided by the temperature
(greedy counts as temperature 1) and, when top_p < 1, renormalised over the nucleus, as
vLLM's `processed_logprobs` mode does. `token_logprobs` computes the same quantity from one
full forward pass, so the trainer's importance ratio starts at exactly 1 for an unchanged
policy.

Qwen-VL models place image tokens with 3-D (M-RoPE) positions; the model derives them from
`image_grid_thw` and `mm_token_type_ids` (1 on image placeholder tokens). Without
`mm_token_type_ids` the positions silently fall back to 1-D and the logprobs drift by ~1e-3,
so `model_inputs` always builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.errors import PolicyError
from runtime.policy.processor import PolicyProcessor

__all__ = ["model_inputs", "sampling_logprobs", "token_logprobs", "recompute_logprobs"]


def model_inputs(
    processor: PolicyProcessor,
    ids: Sequence[Sequence[int]],
    images: Sequence[Sequence[Any]],
    pad_id: int,
    vision: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Left-padded model inputs for a batch of token id lists and their images.

    `vision`, when given, is the processor's output for the images already (at least
    `image_grid_thw`, in order): the images are then only counted, not processed again.
    """
    import torch

    if len(ids) != len(images):
        raise PolicyError(f"{len(ids)} id lists but {len(images)} image lists")
    width = max(len(row) for row in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        if row:
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention[i, width - len(row) :] = 1
    inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention}
    flat = [img for row in images for img in row]
    if not processor.is_multimodal:
        if flat:
            raise PolicyError("this policy is text-only but images were given")
        return inputs
    image_id = processor.image_token_id
    is_image = (input_ids == image_id) & (attention == 1)
    if flat:
        vision = processor.image_inputs(flat) if vision is None else vision
        merge = int(processor.image_processor.merge_size) ** 2
        per_image = (vision["image_grid_thw"].prod(-1) // merge).tolist()
        # Check per row: a mismatch anywhere would otherwise shift every later image.
        start = 0
        for i, row in enumerate(images):
            expected = sum(per_image[start : start + len(row)])
            start += len(row)
            found = int(is_image[i].sum())
            if found != expected:
                raise PolicyError(
                    f"image tokens and image features do not match in sequence {i}: "
                    f"{found} {processor.image_token} tokens, {expected} expected for "
                    f"{len(row)} image(s)"
                )
        inputs.update(vision)
    elif bool(is_image.any()):
        raise PolicyError(f"{int(is_image.sum())} {processor.image_token} tokens but no images")
    inputs["mm_token_type_ids"] = is_image.long()
    return inputs


def sampling_logprobs(logits: Any, temperature: float = 1.0, top_p: float = 1.0) -> Any:
    """Log-probabilities of the sampling distribution over the last dim of raw `logits`."""
    import torch

    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    if temperature > 0 and top_p < 1.0:
        # The nucleus as transformers' and vLLM's top-p define it: drop the least likely
        # tokens while their total mass stays <= 1 - top_p; the most likely always stays.
        ordered, order = torch.sort(scaled, dim=-1)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - top_p
        drop[..., -1] = False
        scaled = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def token_logprobs(
    model: Any,
    inputs: dict[str, Any],
    temperature: float = 1.0,
    targets: Any = None,
    top_p: float = 1.0,
) -> Any:
    """Logprobs of input tokens given their prefixes; keeps the autograd graph.

    Without `targets`: shape [batch, seq], column t is log p(ids[t] | ids[:t]), column 0 is 0.
    With `targets` (a 1-D tensor of positions >= 1): shape [batch, len(targets)], and only
    those positions go through the vocabulary projection, the costly part on long histories.
    """
    import torch

    if "pixel_values" in inputs:
        dtype = next(model.parameters()).dtype
        inputs = {**inputs, "pixel_values": inputs["pixel_values"].to(dtype)}
    ids = inputs["input_ids"]
    if targets is None:
        targets = torch.arange(1, ids.shape[1], device=ids.device)
        full = True
    else:
        targets = torch.as_tensor(targets, dtype=torch.long, device=ids.device)
        if targets.numel() and int(targets.min()) < 1:
            raise PolicyError("target positions must be >= 1: token 0 has no prefix")
        full = False
    logits = model(**inputs, use_cache=False, logits_to_keep=targets - 1).logits.float()
    logp = sampling_logprobs(logits, temperature, top_p)
    picked = logp.gather(-1, ids[:, targets].unsqueeze(-1)).squeeze(-1)
    if not full:
        return picked * inputs["attention_mask"][:, targets]
    first = torch.zeros_like(picked[:, :1])
    return torch.cat([first, picked], dim=1) * inputs["attention_mask"]


def recompute_logprobs(
    model: Any,
    processor: PolicyProcessor,
    ids: Sequence[int],
    images: Sequence[Any] = (),
    temperature: float = 1.0,
    positions: Sequence[int] | None = None,
    top_p: float = 1.0,
) -> list[float]:
    """Per-token logprobs of one sequence: at `positions` (each >= 1), or at every position.

    Entry t of the full list is log p(ids[t] | ids[:t]); entry 0 is 0.
    """
    import torch

    pad = processor.tokenizer.pad_token_id
    inputs = model_inputs(processor, [list(ids)], [list(images)], pad if pad is not None else 0)
    targets = None if positions is None else torch.tensor(list(positions), dtype=torch.long)
    with torch.no_grad():
        return token_logprobs(model, inputs, temperature, targets, top_p)[0].tolist()
