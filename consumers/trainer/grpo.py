"""GRPO with DAPO clipping, dual-clip and a k3 KL penalty, plus SFT: pure math, no I/O.

The objective (the paper's appendix C; its RL hyperparameter table gives the constants).
For a task q, n rollouts o_1..o_n are sampled from the rollout policy π_old and scored
R_1..R_n by the judge. Rollouts with no score (environment failures) leave the group
before anything is computed. Over the remaining ones:

    Â_i     = (R_i − mean(R)) / (std(R) + eps)       the same for every token of o_i,
                                                     in every segment of o_i; 0 when all
                                                     R_i are equal (no signal)
    r_i,t   = π_θ(o_i,t | ctx) / π_old(o_i,t | ctx)  against the rollout's own logprobs
    ℓ_i,t   = min(r Â, clip(r, 1 − ε_l, 1 + ε_h) Â)  asymmetric clip (DAPO's clip-higher)
    ℓ_i,t   = max(ℓ_i,t, c Â)          when Â < 0:    dual-clip caps a negative-advantage
                                                      token's loss at −c·Â (ratio > c)
    KL_i,t  = exp(ref − logp) − (ref − logp) − 1      k3 estimator of KL(π_θ ‖ π_ref) at
                                                      the sampled token: unbiased, ≥ 0
    J(θ)    = 1/N Σ_i Σ_t w_i (ℓ_i,t − λ KL_i,t + β H_i,t)   over the N mask-1 tokens of
                                                              the whole batch (token-level,
                                                              DAPO)

and the loss is −J. Constants (paper): ε_l = 0.2, ε_h = 0.28, c = 3.0, λ = 1e-4, β = 0
(entropy bonus off), n = 8. `w_i` is 1 except for stale rollouts the trainer down-weights.
std is the unbiased sample std (as verl and TRL compute it). N is the token count of the
whole optimisation step, so splitting a batch into micro-batches and summing their losses
(gradient accumulation) gives exactly the full-batch loss.

SFT (warm starts from scripted or successful episodes): −1/N Σ mask · w · log π_θ(token),
cross-entropy on the mask-1 tokens of trajectories whose reward is at least a threshold.

Everything here takes tensors already aligned over trained positions ([rows, T] with a
0/1 mask), so it is independent of how a backend packs sequences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GRPOConfig",
    "GroupAdvantages",
    "group_advantages",
    "k3_kl",
    "grpo_token_loss",
    "sft_token_loss",
    "StepObjective",
    "finish_stats",
]


@dataclass(frozen=True)
class GRPOConfig:
    """The GRPO objective's constants (defaults: the paper's RL hyperparameter table)."""

    clip_low: float = 0.2  # ε_l: the ratio may fall to 1 − ε_l before clipping
    clip_high: float = 0.28  # ε_h: ...and rise to 1 + ε_h (clip-higher keeps exploring)
    dual_clip: float = 3.0  # c: a negative-advantage token's loss is capped at −c·Â
    kl_coef: float = 1e-4  # λ: weight of the k3 KL penalty against the frozen reference
    entropy_coef: float = 0.0  # β: entropy bonus (the paper uses none)
    adv_eps: float = 1e-6  # keeps Â finite when the std is tiny but not zero


@dataclass(frozen=True)
class GroupAdvantages:
    """One group's advantages: a value per rollout, None for the ones dropped."""

    advantages: list[float | None]  # aligned with the scores given
    kept: int  # rollouts with a score
    dropped: int  # rollouts without one (environment failures)
    all_equal: bool  # every kept score is the same (or fewer than two kept): no signal


def group_advantages(scores: Sequence[float | None], eps: float = 1e-6) -> GroupAdvantages:
    """Â_i = (R_i − mean) / (std + eps) over the scored rollouts; None scores are dropped first.

    Finite scores of any size give finite advantages; a non-finite score raises ValueError
    (rewards are checked on decode, so only a caller's bug gets here).
    """
    kept = [float(s) for s in scores if s is not None]
    dropped = len(scores) - len(kept)
    if not all(math.isfinite(s) for s in kept):
        raise ValueError(f"scores must be finite: {kept}")
    if len(kept) < 2 or max(kept) == min(kept):
        # One survivor or identical scores: nothing to prefer, so nothing to learn.
        zeros = [None if s is None else 0.0 for s in scores]
        return GroupAdvantages(zeros, len(kept), dropped, True)
    # Â is scale-invariant (with eps scaled alike): scores past 1 in magnitude are divided by
    # a power of two first, so sums and squares cannot overflow (1.7e308 twice) and, the
    # division being exact, ordinary scores give bit for bit the unscaled result.
    shift = max(0, math.frexp(max(abs(s) for s in kept))[1])  # scores / 2**shift lie in [-1, 1]
    kept = [math.ldexp(s, -shift) for s in kept]
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((s - mean) ** 2 for s in kept) / (len(kept) - 1))
    denominator = std + math.ldexp(eps, -shift)
    adv = [
        None if s is None else (math.ldexp(float(s), -shift) - mean) / denominator for s in scores
    ]
    return GroupAdvantages(adv, len(kept), dropped, False)


def k3_kl(logp: Any, ref_logp: Any) -> Any:
    """k3 estimate of KL(π_θ ‖ π_ref) per sampled token: exp(ref − logp) − (ref − logp) − 1."""
    import torch

    diff = ref_logp - logp
    return torch.exp(diff) - diff - 1.0


def grpo_token_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    config: GRPOConfig,
    *,
    num_tokens: float,
    ref_logp: Any = None,
    weights: Any = None,
    entropy: Any = None,
) -> tuple[Any, dict[str, float]]:
    """−J(θ) over one micro-batch, normalised by the whole step's `num_tokens`; and stat sums.

    Shapes: logp, old_logp, mask, ref_logp, entropy are [rows, T]; advantages and weights
    are [rows] (one value per segment, from its rollout). The stats are sums over mask-1
    tokens (see `finish_stats`), so micro-batches add up.
    """
    import torch

    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)[:, None].expand_as(logp)
    w = torch.ones_like(adv) if weights is None else weights.to(logp.dtype)[:, None].expand_as(adv)
    # -- the clipped surrogate -------------------------------------------------------------
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    surrogate = torch.minimum(ratio * adv, clipped_ratio * adv)
    # -- dual-clip: for Â < 0 the surrogate is unbounded below as the ratio grows; cap it --
    dual = torch.maximum(surrogate, config.dual_clip * adv)
    objective = torch.where(adv < 0, dual, surrogate)
    # -- KL penalty against the frozen reference, and the (off by default) entropy bonus ---
    per_token = objective
    kl = None
    if ref_logp is not None and config.kl_coef != 0.0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token - config.kl_coef * kl
    if entropy is not None and config.entropy_coef != 0.0:
        per_token = per_token + config.entropy_coef * entropy
    # -- token-level mean over the whole step (DAPO) --------------------------------------
    loss = -(per_token * w * mask).sum() / max(float(num_tokens), 1.0)
    with torch.no_grad():
        on = mask > 0
        stats = {
            "tokens": float(mask.sum()),
            "loss": float(loss.detach()),
            "pg_sum": float(-(objective * w * mask).sum()),
            "clip_low": float((on & (adv < 0) & (ratio < 1.0 - config.clip_low)).sum()),
            "clip_high": float((on & (adv > 0) & (ratio > 1.0 + config.clip_high)).sum()),
            "dual_clip": float((on & (adv < 0) & (ratio > config.dual_clip)).sum()),
            "ratio_sum": float((ratio * mask).sum()),
            "ratio_max": float(ratio[on].max()) if bool(on.any()) else 0.0,
            "ratio_min": float(ratio[on].min()) if bool(on.any()) else 0.0,
            "logp_diff_abs_max": float(log_ratio[on].abs().max()) if bool(on.any()) else 0.0,
            "kl_sum": float((kl * mask).sum()) if kl is not None else 0.0,
            "entropy_sum": float((entropy * mask).sum()) if entropy is not None else 0.0,
        }
    return loss, stats


def sft_token_loss(
    logp: Any, mask: Any, *, num_tokens: float, weights: Any = None, entropy: Any = None
) -> tuple[Any, dict[str, float]]:
    """Cross-entropy −1/N Σ w · mask · logp over one micro-batch, N the whole step's tokens."""
    import torch

    mask = mask.to(logp.dtype)
    w = (
        torch.ones_like(logp)
        if weights is None
        else weights.to(logp.dtype)[:, None].expand_as(logp)
    )
    loss = -(logp * w * mask).sum() / max(float(num_tokens), 1.0)
    with torch.no_grad():
        stats = {
            "tokens": float(mask.sum()),
            "loss": float(loss.detach()),
            "nll_sum": float(-(logp * mask).sum()),
            "entropy_sum": float((entropy * mask).sum()) if entropy is not None else 0.0,
        }
    return loss, stats


@dataclass(frozen=True)
class StepObjective:
    """The step's loss as a backend calls it per micro-batch: GRPO or SFT over `num_tokens`.

    A value, not a closure: every rank of a process group receives the same one.
    """

    objective: str  # "grpo" or "sft"
    num_tokens: float  # mask-1 tokens of the whole step (the token-level mean's N)
    config: GRPOConfig = GRPOConfig()

    def __call__(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """The loss and stat sums of one micro-batch (a backend's TokenBatch)."""
        if self.objective == "sft":
            return sft_token_loss(batch.logp, batch.mask, num_tokens=self.num_tokens,
                                  weights=batch.weights, entropy=batch.entropy)  # fmt: skip
        return grpo_token_loss(
            batch.logp, batch.old_logp, batch.advantages, batch.mask, self.config,
            num_tokens=self.num_tokens, ref_logp=batch.ref_logp, weights=batch.weights,
            entropy=batch.entropy,
        )  # fmt: skip


_SUMMED = ("tokens", "loss", "pg_sum", "clip_low", "clip_high", "dual_clip", "ratio_sum",
           "kl_sum", "entropy_sum", "nll_sum")  # fmt: skip


def finish_stats(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Combine micro-batch stat sums into the step's means and fractions."""
    total: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if key in _SUMMED:
                total[key] = total.get(key, 0.0) + value
            elif key.endswith("_max"):
                total[key] = max(total.get(key, value), value)
            elif key.endswith("_min"):
                total[key] = min(total.get(key, value), value)
    n = max(total.get("tokens", 0.0), 1.0)
    out = {"tokens": total.get("tokens", 0.0), "loss": total.get("loss", 0.0)}
    for key, name in (
        ("pg_sum", "pg_loss"),
        ("kl_sum", "kl"),
        ("entropy_sum", "entropy"),
        ("nll_sum", "nll"),
        ("ratio_sum", "ratio_mean"),
        ("clip_low", "clip_frac_low"),
        ("clip_high", "clip_frac_high"),
        ("dual_clip", "dual_clip_frac"),
    ):
        if key in total:
            out[name] = total[key] / n
    if "clip_low" in total:
        out["clip_frac"] = (total["clip_low"] + total["clip_high"] + total["dual_clip"]) / n
    for key in ("ratio_max", "ratio_min", "logp_diff_abs_max"):
        if key in total:
            out[key] = total[key]
    return out
