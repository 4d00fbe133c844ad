"""Frontier Sampling against the paper's definitions (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from consumers.sampler.frontier import (
    FrontierConfig,
    PoolState,
    ema_update,
    frontier_weights,
    select,
    select_curriculum,
    select_frontier,
    useful_group,
)
from consumers.sampler.pool import TaskPool


def _state(rates: list[float]) -> PoolState:
    n = len(rates)
    p = np.array(rates, float)
    return PoolState(
        [f"t{i}" for i in range(n)], p, p.copy(), np.ones(n, np.int64), np.ones(n, bool)
    )


def test_weight_and_ema_follow_the_paper() -> None:
    p = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    w = frontier_weights(p, 0.5, 0.25)
    assert w == pytest.approx([math.exp(-((x - 0.5) ** 2) / (2 * 0.25**2)) for x in p])
    assert w.argmax() == 2 and w[0] == pytest.approx(w[4])
    assert ema_update(0.0, np.array([1, 1, 0, 0]), 0.2, first=True) == 0.5  # the first group seeds
    assert ema_update(0.5, np.array([1, 1, 1, 1]), 0.2, first=False) == pytest.approx(0.6)


def test_a_frontier_batch_is_pool_by_weight_plus_gamma_uniform_outside() -> None:
    rng = np.random.default_rng(0)
    rates = list(np.linspace(0, 1, 400))
    state = _state(rates)
    config = FrontierConfig(sigma=0.05)  # a narrow band: weights differ inside the pool
    batch = 20
    w = frontier_weights(state.pass_rate, 0.5, 0.05)
    pool = set(np.argsort(-w)[: 3 * batch].tolist())
    counts = np.zeros(400)
    for _ in range(3000):
        chosen = select_frontier(state, batch, config, rng)
        assert len(chosen) == batch == len(set(chosen.tolist()))  # without replacement
        outside = [i for i in chosen if i not in pool]
        assert len(outside) == round(0.2 * batch)  # γB from outside the top-3B pool
        counts[chosen] += 1
    inside = sorted(pool)
    # Within the pool, tasks nearer the frontier are drawn more often.
    assert np.corrcoef(w[inside], counts[inside])[0, 1] > 0.9
    # Outside the pool, uniform: every task outside is drawn at a similar rate.
    out = [i for i in range(400) if i not in pool]
    assert counts[out].std() / counts[out].mean() < 0.3


def test_inactive_and_unseen_tasks_are_never_chosen_and_baselines_work() -> None:
    rng = np.random.default_rng(1)
    state = _state([0.5] * 10 + [0.4] * 10)
    state.active[:5] = False
    state.pass_rate[5:8] = np.nan
    for strategy in ("frontier", "uniform", "dapo"):
        for _ in range(200):
            chosen = select(state, 4, FrontierConfig(strategy=strategy), rng)
            assert not set(chosen.tolist()) & set(range(8))
    order = [select_curriculum(state, 4, step).tolist() for step in range(3)]
    assert order[0] == [8, 9, 10, 11] and order[1] == [12, 13, 14, 15]  # easy (0.5) first
    with pytest.raises(ValueError, match="strategy"):
        select(state, 4, FrontierConfig(strategy="psychic"), rng)
    assert useful_group(np.array([1.0, 0.0])) and not useful_group(np.array([0.0, 0.0]))


def test_the_first_pass_drops_tasks_outside_the_band_and_stats_round_trip() -> None:
    pool = TaskPool(FrontierConfig(p_min=0.05, p_max=0.95))
    for t in ("never", "always", "sometimes"):
        pool.add(t)
    assert pool.unseen() == ["never", "always", "sometimes"]
    pool.record_group("never", [0.0, 0.0, -0.2, 0.0])
    pool.record_group("always", [1.0, 1.0, 1.0, 1.0])
    stats = pool.record_group("sometimes", [1.0, 0.0, 0.0, 0.0])
    assert stats.ema_pass_rate == 0.25 and stats.state == "active" and stats.attempts == 1
    assert pool.stats("never").state == "excluded" and pool.stats("always").state == "excluded"
    assert pool.record_group("sometimes", []) is None  # all environment failures: no attempt
    again = pool.record_group("sometimes", [1.0, 1.0, 1.0, 1.0])
    assert again.ema_pass_rate == pytest.approx(0.8 * 0.25 + 0.2 * 1.0) and again.attempts == 2
    restored = TaskPool(FrontierConfig())
    for t in ("never", "always", "sometimes"):
        restored.restore(pool.stats(t))
    envelope = {"event_id", "ts_ms", "producer_id"}
    fields = [f for f in restored.stats("sometimes").__struct_fields__ if f not in envelope]
    a, b = restored.stats("sometimes"), pool.stats("sometimes")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert restored.unseen() == [] and restored.stats("never").state == "excluded"
