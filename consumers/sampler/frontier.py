"""Frontier Sampling (the paper's §3.3): pure and vectorised, no I/O.

Each task keeps an exponential moving average of its pass rate,

    p ← (1 − α) · p + α · mean(successes of a group)        (success: score ≥ threshold)

seeded by the first group's mean (the initial pass over all tasks); tasks whose initial rate
falls outside [p_min, p_max] leave the pool. A task's weight peaks where the policy is
uncertain,

    w = exp(−(p − μ)² / (2σ²)),

the top 3B tasks by weight form the candidate pool, and a batch of B tasks is (1 − γ)B drawn
from the pool with probability ∝ w plus γB drawn uniformly from outside it, all without
replacement. The paper's settings: μ = 0.5, σ = 0.25 (0.15 on ScienceBoard), γ = 0.2, α = 0.2,
batch B = 32 tasks of n = 8 rollouts.

Baselines behind the same interface (`select(state, rng)`), for ablations:
`uniform` (B tasks uniformly), `dapo` (uniform draws; groups with zero reward variance are
filtered after rollout — see `useful_group`), and `curriculum` (a fixed easy-to-hard order by
initial pass rate, B at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "FrontierConfig",
    "PoolState",
    "frontier_weights",
    "ema_update",
    "select_frontier",
    "select_uniform",
    "select_curriculum",
    "select",
    "useful_group",
    "STRATEGIES",
]

STRATEGIES = ("frontier", "uniform", "dapo", "curriculum")


@dataclass(frozen=True)
class FrontierConfig:
    """The paper's RL sampling hyperparameters."""

    mu: float = 0.5  # pass rate of the frontier (the weight's peak)
    sigma: float = 0.25  # width of the frontier band (0.15 on ScienceBoard)
    gamma: float = 0.2  # share of each batch drawn uniformly from outside the pool
    alpha: float = 0.2  # EMA rate of the pass-rate estimate
    pool_factor: int = 3  # the candidate pool is the top pool_factor × B tasks by weight
    p_min: float = 0.0  # after the first pass, tasks below this pass rate leave the pool
    p_max: float = 1.0  # ... and above this one
    threshold: float = 1.0  # a rollout succeeds when its score is at least this
    strategy: str = "frontier"  # or a baseline: uniform, dapo, curriculum


@dataclass
class PoolState:
    """Per-task arrays, aligned by index: the sampler's whole state."""

    task_ids: list[str]
    pass_rate: np.ndarray  # EMA pass rate; NaN until the first group is in
    initial: np.ndarray  # pass rate after the first group (for the curriculum); NaN before
    attempts: np.ndarray  # groups counted (environment failures excluded)
    active: np.ndarray  # bool: in the training pool (False: excluded after the first pass)

    @classmethod
    def empty(cls) -> PoolState:
        """A pool with no tasks."""
        return cls([], np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, bool))

    def __len__(self) -> int:
        return len(self.task_ids)


def frontier_weights(pass_rate: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    """w = exp(−(p − μ)² / 2σ²), elementwise."""
    return np.exp(-((pass_rate - mu) ** 2) / (2.0 * sigma**2))


def ema_update(previous: float, successes: np.ndarray, alpha: float, first: bool) -> float:
    """The EMA after one group: its mean seeds a first estimate, then p ← (1−α)p + α·mean."""
    mean = float(np.mean(successes))
    return mean if first else (1.0 - alpha) * previous + alpha * mean


def _weighted_without_replacement(
    candidates: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator
) -> np.ndarray:
    """k distinct candidates drawn with probability ∝ weights (Efraimidis–Spirakis keys)."""
    if k <= 0 or candidates.size == 0:
        return candidates[:0]
    k = min(k, candidates.size)
    w = np.maximum(weights, 1e-12)  # every candidate keeps a (tiny) chance
    keys = np.log(rng.random(candidates.size)) / w
    return candidates[np.argpartition(-keys, k - 1)[:k]]


def select_frontier(
    state: PoolState, batch: int, config: FrontierConfig, rng: np.random.Generator
) -> np.ndarray:
    """Indices of the next batch: (1−γ)B from the top-3B pool by weight, γB uniform outside."""
    live = np.flatnonzero(state.active & ~np.isnan(state.pass_rate))
    if live.size <= batch:
        return live
    w = frontier_weights(state.pass_rate[live], config.mu, config.sigma)
    pool_size = min(live.size, config.pool_factor * batch)
    order = np.argpartition(-w, pool_size - 1)[:pool_size]  # the top 3B by weight
    in_pool = np.zeros(live.size, bool)
    in_pool[order] = True
    outside = live[~in_pool]
    n_outside = min(int(round(config.gamma * batch)), outside.size)
    picked_pool = _weighted_without_replacement(live[in_pool], w[in_pool], batch - n_outside, rng)
    picked_out = rng.choice(outside, size=n_outside, replace=False) if n_outside else outside[:0]
    return np.concatenate([picked_pool, picked_out])


def select_uniform(state: PoolState, batch: int, rng: np.random.Generator) -> np.ndarray:
    """B active tasks uniformly at random, without replacement."""
    live = np.flatnonzero(state.active & ~np.isnan(state.pass_rate))
    return rng.choice(live, size=min(batch, live.size), replace=False)


def select_curriculum(state: PoolState, batch: int, step: int) -> np.ndarray:
    """A fixed easy-to-hard order by initial pass rate, B tasks per step, wrapping around."""
    live = np.flatnonzero(state.active & ~np.isnan(state.initial) & ~np.isnan(state.pass_rate))
    if live.size == 0:
        return live
    order = live[np.argsort(-state.initial[live], kind="stable")]
    start = (step * batch) % order.size
    return np.take(order, np.arange(start, start + min(batch, order.size)), mode="wrap")


def select(
    state: PoolState, batch: int, config: FrontierConfig, rng: np.random.Generator, step: int = 0
) -> np.ndarray:
    """The next batch's task indices under the configured strategy."""
    if config.strategy == "frontier":
        return select_frontier(state, batch, config, rng)
    if config.strategy in ("uniform", "dapo"):
        return select_uniform(state, batch, rng)
    if config.strategy == "curriculum":
        return select_curriculum(state, batch, step)
    raise ValueError(f"unknown sampling strategy {config.strategy!r}; choose one of {STRATEGIES}")


def useful_group(scores: np.ndarray) -> bool:
    """Whether a group's rewards differ at all (GRPO gives an all-equal group no gradient)."""
    return bool(scores.size) and bool(np.ptp(scores) > 0)
