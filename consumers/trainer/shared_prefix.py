"""Shared-prefix layout of a training step: compute a prompt the samples share once (pure).

The n rollouts of a GRPO group start from the same prompt: the system prompt, the task's
instruction and the first observation of a desktop that every rollout of the task resets
to. Trained as separate rows, that prompt goes through the model n times. Computed once,
its keys and values serve every rollout of the group: one forward computes the prefix, a
second one the rollouts' remainders (their branches) packed end to end into rows of a few
hundred tokens (`pack_branches`; the attention of a packed row is dense under its mask),
each attending to the prefix's keys and values and causally to its own tokens, at the
positions it has in its own sequence; backward sends each branch's gradient into the one
prefix. The logprobs and gradients are those of the separate rows (the same attention,
the same positions; equal to float rounding); only the tails of the packed rows are padding.

A run is a set of samples computed together around one shared prefix of `shared` tokens.
The prefix must hold no trained position and must leave at least one untrained token to
every branch, so each trained token is predicted from a position inside its own branch:

    shared ≤ first trained position − 1          for every member

Choosing runs: sort the step's samples by their token ids (samples with a common prefix
become neighbours, and the common prefix of a set of sorted samples is the smallest common
prefix of neighbours), then split the sorted list into consecutive runs, by dynamic
programming, to minimise the tokens computed,

    cost(run) = shared + Σ (length − shared)       (the prefix once, every branch unpadded)

with a singleton's cost its length. Runs that would exceed a forward pass's token budget
are cut into chunks that each keep the shared prefix; then runs are packed into passes
under the budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from consumers.trainer.backends.base import MicroBatch, PrefixRun, Sample

__all__ = [
    "common_prefix",
    "shareable",
    "prefix_runs",
    "run_cost",
    "batch_cost",
    "pack_shared",
    "pack_branches",
]


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens two id arrays have in common."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def shareable(sample: Sample) -> int:
    """How many leading tokens of a sample may be shared: all before its first trained
    position's predecessor (the whole sample less one token when nothing is trained)."""
    trained = np.flatnonzero(sample.mask)
    return int(trained[0]) - 1 if trained.size else max(len(sample.ids) - 1, 0)


def run_cost(lengths: Sequence[int], shared: int) -> int:
    """Tokens a run computes: the prefix once and every branch (rows padded to the longest
    when nothing is shared)."""
    if len(lengths) == 1 or shared <= 0:
        return len(lengths) * max(lengths)
    return shared + sum(lengths) - len(lengths) * shared


def prefix_runs(samples: Sequence[Sample], min_shared: int = 16) -> list[PrefixRun]:
    """Runs of samples (indices into `samples`) that minimise the tokens computed.

    A run shares fewer than `min_shared` tokens only as a singleton (`shared` 0): a short
    common prefix is not worth a forward pass of its own.
    """
    n = len(samples)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: samples[i].ids.tobytes())
    ids = [samples[i].ids.astype(np.int64) for i in order]
    lengths = [len(x) for x in ids]
    limits = [shareable(samples[i]) for i in order]
    neighbours = [common_prefix(ids[i], ids[i + 1]) for i in range(n - 1)]
    # best[b]: the least cost of the first b sorted samples; choice[b]: where its last run starts
    best = [0] + [0] * n
    choice = [0] * (n + 1)
    shared_of: dict[tuple[int, int], int] = {}
    for b in range(1, n + 1):
        best[b], choice[b] = best[b - 1] + lengths[b - 1], b - 1
        shared, total = limits[b - 1], lengths[b - 1]
        for a in range(b - 2, -1, -1):  # the run a..b-1, grown leftwards
            shared = min(shared, neighbours[a], limits[a])
            total += lengths[a]
            if shared < min_shared:
                break  # a longer run only shares less
            cost = best[a] + shared + total - (b - a) * shared
            if cost < best[b]:
                best[b], choice[b] = cost, a
                shared_of[(a, b)] = shared
    runs: list[PrefixRun] = []
    b = n
    while b > 0:
        a = choice[b]
        members = tuple(order[a:b])
        runs.append(PrefixRun(members, shared_of.get((a, b), 0) if b - a > 1 else 0))
        b = a
    runs.reverse()
    return runs


def pack_shared(
    samples: Sequence[Sample], max_tokens: int, max_rows: int, min_shared: int = 16
) -> list[MicroBatch]:
    """Micro-batches of one temperature/top-p whose runs fit `max_tokens` computed tokens.

    A run over the budget is cut into chunks that keep its prefix; singletons go
    `max_rows` at a time into one left-padded forward, as without sharing. A sample
    longer than the budget goes alone.
    """
    by_setting: dict[tuple[float, float], list[Sample]] = {}
    for s in samples:
        by_setting.setdefault((s.temperature, s.top_p), []).append(s)
    batches: list[MicroBatch] = []
    for (temperature, top_p), group in by_setting.items():
        units: list[tuple[list[Sample], int]] = []  # (members, shared) in packing order
        for run in prefix_runs(group, min_shared):
            members = [group[i] for i in run.members]
            units += _chunks(members, run.shared, max_tokens)
        current: list[tuple[list[Sample], int]] = []
        for unit in units:
            if current and _cost(current + [unit], max_rows) > max_tokens:
                batches.append(_micro_batch(current, temperature, top_p))
                current = []
            current.append(unit)
        if current:
            batches.append(_micro_batch(current, temperature, top_p))
    return batches


def pack_branches(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Branch indices packed into rows of at most `capacity` tokens (first fit, longest
    first); a branch longer than the capacity gets a row of its own."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, room in enumerate(free):
            if lengths[i] <= room:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(capacity - lengths[i])
    return rows


def _chunks(members: list[Sample], shared: int, max_tokens: int) -> list[tuple[list[Sample], int]]:
    """A run cut into chunks of members under the budget, each keeping the prefix."""
    if shared == 0:
        return [([m], 0) for m in members]
    chunks: list[tuple[list[Sample], int]] = []
    current: list[Sample] = []
    for m in members:
        lengths = [len(c.ids) for c in current] + [len(m.ids)]
        if current and run_cost(lengths, shared) > max_tokens:
            chunks.append((current, shared))
            current = []
        current.append(m)
    chunks.append((current, shared))
    # A chunk of one shares with nobody: it is a singleton.
    return [(c, s if len(c) > 1 else 0) for c, s in chunks]


def batch_cost(batch: MicroBatch) -> int:
    """Tokens a micro-batch computes laid out by its runs (its rows padded, without runs)."""
    in_runs = {i for r in batch.runs for i in r.members}
    units = [([batch.samples[i] for i in r.members], r.shared) for r in batch.runs]
    units += [([s], 0) for i, s in enumerate(batch.samples) if i not in in_runs]
    return _layout_cost(units)


def _layout_cost(units: list[tuple[list[Sample], int]]) -> int:
    single = [len(m[0].ids) for m, s in units if s == 0]
    shared = sum(run_cost([len(x.ids) for x in m], s) for m, s in units if s > 0)
    return shared + (len(single) * max(single) if single else 0)


def _cost(units: list[tuple[list[Sample], int]], max_rows: int) -> float:
    """Tokens a micro-batch of units computes; infinite when its singletons exceed max_rows."""
    if sum(1 for _, s in units if s == 0) > max_rows:
        return float("inf")
    return _layout_cost(units)


def _micro_batch(
    units: list[tuple[list[Sample], int]], temperature: float, top_p: float
) -> MicroBatch:
    samples: list[Sample] = []
    runs: list[PrefixRun] = []
    for members, shared in units:
        start = len(samples)
        samples += members
        if shared > 0:
            runs.append(PrefixRun(tuple(range(start, len(samples))), shared))
    return MicroBatch(tuple(samples), temperature, top_p, tuple(runs))
