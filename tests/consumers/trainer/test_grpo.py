"""GRPO and SFT losses against a direct, token-by-token transcription of the equations."""

from __future__ import annotations

import math

import pytest
import torch

from consumers.trainer.grpo import (
    GRPOConfig,
    finish_stats,
    group_advantages,
    grpo_token_loss,
    k3_kl,
    sft_token_loss,
)

PAPER = GRPOConfig()  # ε_l 0.2, ε_h 0.28, c 3.0, λ 1e-4


def transcribed_loss(logp, old, adv, mask, ref, weights, cfg: GRPOConfig) -> torch.Tensor:
    """−J(θ) written as the paper writes it: one token at a time."""
    total = torch.zeros((), dtype=logp.dtype)
    n = 0
    rows, length = logp.shape
    for i in range(rows):
        a = adv[i]
        for t in range(length):
            if mask[i, t] == 0:
                continue
            n += 1
            r = torch.exp(logp[i, t] - old[i, t])
            clipped = torch.clamp(r, 1 - cfg.clip_low, 1 + cfg.clip_high)
            ell = torch.min(r * a, clipped * a)
            if a < 0:
                ell = torch.max(ell, cfg.dual_clip * a)
            kl = torch.exp(ref[i, t] - logp[i, t]) - (ref[i, t] - logp[i, t]) - 1
            total = total + weights[i] * (ell - cfg.kl_coef * kl)
    return -total / n


def _case(seed: int, rows: int = 4, length: int = 9, spread: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, length, generator=g, dtype=torch.float64) * 3
    logp = (old + torch.randn(rows, length, generator=g, dtype=torch.float64) * spread).detach()
    ref = old + torch.randn(rows, length, generator=g, dtype=torch.float64) * 0.2
    mask = (torch.rand(rows, length, generator=g) > 0.3).to(torch.float64)
    mask[:, 0] = 0
    mask[0, 1] = 1  # never an empty batch
    adv = torch.randn(rows, generator=g, dtype=torch.float64)
    weights = torch.ones(rows, dtype=torch.float64)
    return logp, old, adv, mask, ref, weights


def _both(logp, old, adv, mask, ref, weights, cfg: GRPOConfig = PAPER):
    a = logp.clone().requires_grad_(True)
    loss, stats = grpo_token_loss(
        a, old, adv, mask, cfg, num_tokens=float(mask.sum()), ref_logp=ref, weights=weights
    )
    loss.backward()
    b = logp.clone().requires_grad_(True)
    expected = transcribed_loss(b, old, adv, mask, ref, weights, cfg)
    expected.backward()
    return loss, a.grad, expected, b.grad, stats


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_loss_and_gradient_match_the_equation_on_random_tensors(seed: int) -> None:
    loss, grad, expected, expected_grad, _ = _both(*_case(seed, spread=0.5))
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-10, atol=1e-12)


def test_negative_advantages_hit_the_dual_clip() -> None:
    logp, old, _, mask, ref, weights = _case(7)
    mask[:] = 1
    mask[:, 0] = 0
    adv = -torch.tensor([0.5, 1.0, 2.0, 0.3], dtype=torch.float64)
    logp = old.clone()
    logp[:, 1:4] += math.log(5.0)  # ratio 5 > c = 3: capped
    logp[:, 4:6] += math.log(1.1)  # ratio 1.1: unclipped for Â < 0
    logp[:, 6:8] += math.log(0.5)  # ratio 0.5 < 1 − ε_l: the lower clip binds
    loss, grad, expected, expected_grad, stats = _both(logp, old, adv, mask, ref, weights)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-10, atol=1e-12)
    assert stats["dual_clip"] == 4 * 3 and stats["clip_low"] == 4 * 2 and stats["clip_high"] == 0
    # Capped and lower-clipped tokens get no policy gradient: only the KL term's.
    kl_only = _both(logp, old, torch.zeros(4, dtype=torch.float64), mask, ref, weights)[1]
    torch.testing.assert_close(grad[:, 1:4], kl_only[:, 1:4])
    torch.testing.assert_close(grad[:, 6:8], kl_only[:, 6:8])
    assert (grad[:, 4:6] - kl_only[:, 4:6]).abs().min() > 1e-3  # unclipped: it does learn
    # Without the dual clip the capped tokens' loss would grow with the ratio.
    no_dual = GRPOConfig(dual_clip=float("inf"))
    unbounded = _both(logp, old, adv, mask, ref, weights, no_dual)[0]
    assert unbounded > loss


def test_positive_advantages_clip_high_at_one_plus_eps_high() -> None:
    logp, old, _, mask, ref, weights = _case(8)
    adv = torch.ones(4, dtype=torch.float64)
    logp = old + math.log(1.27)  # inside 1 + ε_h = 1.28: not clipped
    stats = _both(logp, old, adv, mask, ref, weights)[4]
    assert stats["clip_high"] == 0
    stats = _both(old + math.log(1.29), old, adv, mask, ref, weights)[4]
    assert stats["clip_high"] == float(mask.sum())


def test_group_advantages_normalise_drop_failures_and_zero_equal_groups() -> None:
    result = group_advantages([1.0, 0.0, 1.0, 0.0, -0.2, 1.0, 0.0, 0.0])
    kept = [1.0, 0.0, 1.0, 0.0, -0.2, 1.0, 0.0, 0.0]
    mean = sum(kept) / 8
    std = math.sqrt(sum((x - mean) ** 2 for x in kept) / 7)
    assert result.advantages == pytest.approx([(x - mean) / (std + 1e-6) for x in kept])
    assert not result.all_equal and result.kept == 8 and result.dropped == 0
    # Environment failures leave the group before normalisation.
    failed = group_advantages([1.0, None, 0.0, None])
    assert failed.advantages[1] is None and failed.advantages[3] is None
    assert failed.advantages[0] == pytest.approx(1 / math.sqrt(2), rel=1e-5)
    assert failed.advantages[2] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)
    assert (failed.kept, failed.dropped) == (2, 2)
    # All equal (or one survivor): zero advantage, flagged so the trainer counts it.
    for scores in ([1.0, 1.0, 1.0], [-0.2, -0.2], [None, 0.5, None], [None, None]):
        result = group_advantages(scores)
        assert result.all_equal
        assert all(a in (0.0, None) for a in result.advantages)


def test_group_advantages_stay_finite_for_any_finite_scores() -> None:
    # The finding of issue 22: 1.7e308 twice overflowed the mean and the squares to NaN.
    huge = group_advantages([1.7e308, 1.7e308, 0.0]).advantages
    assert huge == pytest.approx([1 / math.sqrt(3), 1 / math.sqrt(3), -2 / math.sqrt(3)])
    assert group_advantages([1.7e308, -1.7e308, 0.0]).advantages == pytest.approx([1, -1, 0])
    assert all(math.isfinite(a) for a in group_advantages([5e-324, 0.0, 1e-300]).advantages)
    # Ordinary scores: exactly the formula, to the last bit.
    kept = [1.0, 0.0, -0.2, 0.37]
    mean = sum(kept) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in kept) / 3)
    assert group_advantages(kept).advantages == [(x - mean) / (std + 1e-6) for x in kept]
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            group_advantages([1.0, bad, 0.0])


def test_an_all_equal_group_trains_only_the_kl_term() -> None:
    logp, old, _, mask, ref, weights = _case(3)
    adv = torch.tensor(
        [a for a in group_advantages([1.0, 1.0, 1.0, 1.0]).advantages], dtype=torch.float64
    )
    loss, grad, expected, expected_grad, stats = _both(logp, old, adv, mask, ref, weights)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad)
    kl = k3_kl(logp, ref)
    assert float(loss.detach()) == pytest.approx(
        PAPER.kl_coef * float((kl * mask).sum() / mask.sum())
    )
    assert stats["pg_sum"] == 0.0


def test_environment_failures_leave_the_loss() -> None:
    scores = [1.0, None, 0.0, 0.5]
    adv_list = group_advantages(scores).advantages
    logp, old, _, mask, ref, weights = _case(5)
    keep = [i for i, a in enumerate(adv_list) if a is not None]
    adv = torch.tensor([adv_list[i] for i in keep], dtype=torch.float64)
    loss, grad, expected, expected_grad, _ = _both(
        logp[keep], old[keep], adv, mask[keep], ref[keep], weights[keep]
    )
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad)


def test_micro_batches_with_the_step_token_count_add_up_to_the_full_batch() -> None:
    logp, old, adv, mask, ref, weights = _case(11, rows=6)
    weights = torch.tensor([1, 1, 0.5, 1, 0.25, 1], dtype=torch.float64)
    n = float(mask.sum())
    full = logp.clone().requires_grad_(True)
    loss, _ = grpo_token_loss(
        full, old, adv, mask, PAPER, num_tokens=n, ref_logp=ref, weights=weights
    )
    loss.backward()
    parts, grads, total = [], [], 0.0
    for rows in (slice(0, 2), slice(2, 5), slice(5, 6)):
        part = logp[rows].clone().requires_grad_(True)
        micro, stats = grpo_token_loss(
            part, old[rows], adv[rows], mask[rows], PAPER, num_tokens=n, ref_logp=ref[rows],
            weights=weights[rows],
        )  # fmt: skip
        micro.backward()
        total += float(micro.detach())
        parts.append(stats)
        grads.append(part.grad)
    assert total == pytest.approx(float(loss.detach()), rel=1e-12)
    torch.testing.assert_close(torch.cat(grads), full.grad)
    # Down-weighted rows are the transcription with w_i.
    expected = transcribed_loss(logp, old, adv, mask, ref, weights, PAPER)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-12)
    merged = finish_stats(parts)
    assert merged["tokens"] == n and merged["loss"] == pytest.approx(
        float(loss.detach()), rel=1e-12
    )
    assert 0 <= merged["clip_frac"] <= 1 and merged["kl"] >= 0


def test_k3_is_a_nonnegative_unbiased_kl_estimate() -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(50, generator=g, dtype=torch.float64), 0)
    q = torch.softmax(torch.randn(50, generator=g, dtype=torch.float64), 0)
    tokens = torch.multinomial(p, 200_000, replacement=True, generator=g)
    estimate = k3_kl(p.log()[tokens], q.log()[tokens])
    exact = float((p * (p.log() - q.log())).sum())  # KL(π_θ ‖ π_ref), tokens drawn from π_θ
    assert float(estimate.min()) >= 0
    assert float(estimate.mean()) == pytest.approx(exact, rel=0.03)
    assert float(k3_kl(p.log(), p.log()).abs().max()) == 0.0


def test_sft_is_token_level_cross_entropy() -> None:
    logp, _, _, mask, _, _ = _case(2)
    weights = torch.tensor([1.0, 0.5, 1.0, 1.0], dtype=torch.float64)
    a = logp.clone().requires_grad_(True)
    loss, stats = sft_token_loss(a, mask, num_tokens=float(mask.sum()), weights=weights)
    loss.backward()
    b = logp.clone().requires_grad_(True)
    terms = [-weights[i] * b[i, t] for i in range(4) for t in range(9) if mask[i, t]]
    expected = torch.stack(terms).sum() / len(terms)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(a.grad, b.grad)
    assert stats["tokens"] == len(terms)
