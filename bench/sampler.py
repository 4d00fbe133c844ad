"""Frontier Sampling: how fast it selects, and whether it spends rollouts where learning happens.

1. Selection time of one batch (B = 32) from pools of 3K, 24K and 1M tasks, for the
   vectorised `select_frontier`, against two baselines measured in the same run: numpy
   uniform selection, and a direct pure-Python transcription of the same rule (sort by
   weight, then weighted draws one by one).
2. A simulation with a synthetic learner, comparing Frontier, uniform, DAPO (uniform draws,
   zero-variance groups filtered, drawing on until B useful groups) and a fixed easy-to-hard
   curriculum under one rollout budget. The pool looks like a fresh VeriGen pool for a base
   model (the paper's base model passes ~13% of generated tasks): ~60% of tasks start
   unsolved (p < 0.05), ~10% always solved (p > 0.95), the rest spread between. A task's
   true success probability rises (in logit space, by `--task-lr`, default 0.1: one GRPO
   step moves a task a little) when a group on it has non-zero advantage — an all-equal
   group teaches GRPO nothing — and by `--transfer` (0.0003) on every task for each useful
   group. The advantage depends on how fast tasks are learned: with 0.6 per group, tasks
   are solved within a few groups, the EMA lags behind and the ratio shrinks to ~1.1. Every strategy starts from the same initial pass (one
   group per task, which seeds the estimates) and then spends the same number of rollouts.
   Reported: the fraction of rollout groups with non-zero advantage, and the pool's mean
   true pass rate at the end; paper settings B = 32, n = 8, μ = 0.5, σ = 0.25, γ = 0.2,
   α = 0.2.

    python bench/sampler.py --quick --json bench-sampler.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consumers.sampler.frontier import (  # noqa: E402
    FrontierConfig,
    PoolState,
    ema_update,
    select,
    select_frontier,
    select_uniform,
    useful_group,
)

B, N_ROLLOUTS = 32, 8


def random_pool(n: int, rng: np.random.Generator) -> PoolState:
    """A pool of n tasks with estimated pass rates drawn like a fresh VeriGen pool."""
    p = rng.random(n)
    return PoolState(
        [str(i) for i in range(n)], p, p.copy(), np.ones(n, np.int64), np.ones(n, bool)
    )


def naive_frontier(
    state: PoolState, batch: int, config: FrontierConfig, rng: random.Random
) -> list:
    """The same rule written directly in Python: the baseline for the vectorised version."""
    import math

    weights = [
        (math.exp(-((p - config.mu) ** 2) / (2 * config.sigma**2)), i)
        for i, p in enumerate(state.pass_rate.tolist())
    ]
    weights.sort(reverse=True)
    pool = weights[: config.pool_factor * batch]
    outside = [i for _, i in weights[config.pool_factor * batch :]]
    n_out = round(config.gamma * batch)
    chosen = []
    candidates = list(pool)
    for _ in range(batch - n_out):
        total = sum(w for w, _ in candidates)
        x, acc = rng.random() * total, 0.0
        for j, (w, i) in enumerate(candidates):
            acc += w
            if acc >= x:
                chosen.append(i)
                del candidates[j]
                break
    return chosen + rng.sample(outside, n_out)


def time_selection(sizes: list[int], repeats: int) -> list[dict]:
    """Median milliseconds to pick one batch, per pool size and method."""
    rows = []
    config = FrontierConfig()
    for n in sizes:
        rng = np.random.default_rng(n)
        state = random_pool(n, rng)
        prng = random.Random(n)
        methods = {
            "frontier (numpy)": lambda s=state, r=rng: select_frontier(s, B, config, r),
            "uniform (numpy)": lambda s=state, r=rng: select_uniform(s, B, r),
            "frontier (pure Python)": lambda s=state, r=prng: naive_frontier(s, B, config, r),
        }
        for name, fn in methods.items():
            reps = max(3, repeats // 20) if "Python" in name and n >= 1_000_000 else repeats
            fn()
            samples = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t) * 1000)
            rows.append({"tasks": n, "method": name, "ms": statistics.median(samples)})
    return rows


def initial_pool(n: int, rng: np.random.Generator) -> np.ndarray:
    """True success probabilities: ~60% unsolved, ~10% always solved, the rest in between."""
    kind = rng.random(n)
    return np.where(
        kind < 0.6, rng.uniform(0.0, 0.05, n), np.where(kind < 0.7, rng.uniform(0.95, 1.0, n),
                                                          rng.uniform(0.05, 0.95, n)),
    )  # fmt: skip


def simulate(
    strategy: str,
    truth0: np.ndarray,
    budget_groups: int,
    seed: int,
    task_lr: float = 0.1,
    transfer: float = 0.0003,
) -> dict:
    """Spend the budget with one strategy; return the useful-group fraction and final pass rate."""
    rng = np.random.default_rng(seed)
    truth = truth0.copy()
    n = truth.size
    logit = np.log(truth.clip(1e-4, 1 - 1e-4) / (1 - truth.clip(1e-4, 1 - 1e-4)))
    config = FrontierConfig(strategy=strategy)
    state = PoolState([str(i) for i in range(n)], np.full(n, np.nan), np.full(n, np.nan),
                      np.zeros(n, np.int64), np.ones(n, bool))  # fmt: skip

    def play(task: int) -> np.ndarray:
        return (rng.random(N_ROLLOUTS) < truth[task]).astype(float)

    def learn(task: int) -> None:
        nonlocal truth
        logit[task] += task_lr  # training on a group with signal makes the task likelier
        logit[:] += transfer  # ...and a little of it transfers to every task
        truth = 1 / (1 + np.exp(-logit))

    for task in range(n):  # the initial pass, the same for every strategy
        successes = play(task)
        state.pass_rate[task] = state.initial[task] = ema_update(0, successes, config.alpha, True)
        state.attempts[task] = 1
    groups = useful = 0
    step = 0
    while groups < budget_groups:
        batch = select(state, B, config, rng, step=step)
        step += 1
        trained = 0
        for task in batch:
            if groups >= budget_groups:
                break
            successes = play(task)
            groups += 1
            state.pass_rate[task] = ema_update(
                state.pass_rate[task], successes, config.alpha, False
            )
            if useful_group(successes):
                useful += 1
                trained += 1
                learn(task)
        if strategy == "dapo":  # dynamic sampling: draw on until the batch has B useful groups
            while trained < B and groups < budget_groups:
                task = int(rng.integers(n))
                successes = play(task)
                groups += 1
                state.pass_rate[task] = ema_update(
                    state.pass_rate[task], successes, config.alpha, False
                )
                if useful_group(successes):
                    useful += 1
                    trained += 1
                    learn(task)
    return {
        "strategy": strategy,
        "useful_fraction": useful / groups,
        "final_mean_pass_rate": float(truth.mean()),
        "initial_mean_pass_rate": float(truth0.mean()),
    }


def main() -> int:
    """Run both parts and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller pool and budget (< 1 min)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--task-lr", type=float, default=0.1, help="logit gain per useful group")
    parser.add_argument("--transfer", type=float, default=0.0003, help="logit gain of every task")
    args = parser.parse_args()

    repeats = 20 if args.quick else 100
    rows = time_selection([3_000, 24_000, 1_000_000], repeats)
    print("selection of one batch (B = 32), median ms")
    print(
        f"{'tasks':>9}  {'frontier (numpy)':>17}  {'uniform (numpy)':>16}  {'frontier (Python)':>18}"
    )
    by = {(r["tasks"], r["method"]): r["ms"] for r in rows}
    for n in (3_000, 24_000, 1_000_000):
        print(f"{n:>9}  {by[(n, 'frontier (numpy)')]:>17.3f}  {by[(n, 'uniform (numpy)')]:>16.3f}"
              f"  {by[(n, 'frontier (pure Python)')]:>18.3f}")  # fmt: skip

    pool_size = 600 if args.quick else 3000
    budget = 40 * B if args.quick else 200 * B  # groups after the initial pass
    seeds = [0, 1] if args.quick else [0, 1, 2, 3, 4]
    results: dict[str, list[dict]] = {s: [] for s in ("frontier", "uniform", "dapo", "curriculum")}
    for seed in seeds:
        truth0 = initial_pool(pool_size, np.random.default_rng(100 + seed))
        for strategy in results:
            results[strategy].append(
                simulate(strategy, truth0, budget, seed, args.task_lr, args.transfer)
            )
    print(f"\nsimulation: {pool_size} tasks, {budget} groups of {N_ROLLOUTS} after the initial "
          f"pass, mean of {len(seeds)} seeds")  # fmt: skip
    print(f"{'strategy':>11}  {'useful groups':>13}  {'vs uniform':>10}  {'final pass rate':>15}")
    summary = {}
    for strategy, rs in results.items():
        useful = statistics.mean(r["useful_fraction"] for r in rs)
        final = statistics.mean(r["final_mean_pass_rate"] for r in rs)
        summary[strategy] = {"useful_fraction": useful, "final_mean_pass_rate": final}
    base = summary["uniform"]["useful_fraction"]
    for strategy, s in summary.items():
        print(f"{strategy:>11}  {s['useful_fraction']:>13.3f}  {s['useful_fraction'] / base:>9.2f}x"
              f"  {s['final_mean_pass_rate']:>15.3f}")  # fmt: skip
    initial = statistics.mean(r["initial_mean_pass_rate"] for r in results["uniform"])
    print(f"(initial mean pass rate {initial:.3f})")
    if args.json:
        args.json.write_text(json.dumps({
            "select_ms_3k": by[(3_000, "frontier (numpy)")],
            "select_ms_24k": by[(24_000, "frontier (numpy)")],
            "select_ms_1m": by[(1_000_000, "frontier (numpy)")],
            "select_vs_python_24k": by[(24_000, "frontier (pure Python)")] / by[(24_000, "frontier (numpy)")],
            "frontier_vs_uniform_useful_ratio": summary["frontier"]["useful_fraction"] / base,
            "simulation": summary,
            "initial_mean_pass_rate": initial,
        }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
