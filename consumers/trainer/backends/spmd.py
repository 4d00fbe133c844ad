"""What the ranks of a process group agree on during a step (every rank makes the same calls).

A backend is SPMD: with a process group of N ranks, every rank calls `load`, `step`, `save`
... with the same arguments. Inside a step the ranks must also make the same collective
calls in the same order, whatever their own data does, or they wait on each other forever.
These helpers keep them in step:

    world          (rank, size) of the default process group; (0, 1) without one
    share          which micro-batches each data-parallel rank computes: equal counts
                   (one more at most), costs balanced; a rank short of one runs a filler
    raise_first    the first rank's failure raised on every rank (an input that failed to
                   load on one rank stops the step on all of them, with the same error)
    any_rank       whether a flag is set on any rank (a non-finite loss anywhere)
    gather         every rank's list of objects, concatenated, on every rank
    sum_over_ranks a count summed over ranks

Without a process group (or with one rank) every helper is local and free.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from runtime.errors import PolicyError

__all__ = ["world", "share", "raise_first", "any_rank", "gather", "sum_over_ranks"]


def world(group: Any = None) -> tuple[int, int]:
    """This process's rank and the group's size; (0, 1) without a process group."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def share(costs: Sequence[float], ranks: int) -> list[list[int]]:
    """Micro-batch indices per rank: costliest first, dealt out back and forth, each rank's
    list in step order. Counts differ by at most one; costs come out roughly even."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    out: list[list[int]] = [[] for _ in range(ranks)]
    for position, index in enumerate(order):
        lap, seat = divmod(position, ranks)
        out[seat if lap % 2 == 0 else ranks - 1 - seat].append(index)
    return [sorted(indices) for indices in out]


def _portable(error: BaseException) -> bytes:
    """The error pickled so that it unpickles as itself, else as a PolicyError naming it."""
    try:
        data = pickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:  # an exception whose constructor pickle cannot call again
        return pickle.dumps(PolicyError(f"{type(error).__name__}: {error}"))


def raise_first(error: BaseException | None, group: Any = None, device: Any = "cpu") -> None:
    """Raise the lowest failing rank's error on every rank (nothing if no rank failed)."""
    import torch.distributed as dist

    _, size = world(group)
    if size == 1:
        if error is not None:
            raise error
        return
    if not any_rank(error is not None, group, device):
        return
    found: list[Any] = [None] * size
    dist.all_gather_object(found, None if error is None else _portable(error), group=group)
    first = next(data for data in found if data is not None)
    if error is not None and _is_own(first, error):
        raise error
    raise pickle.loads(first)


def _is_own(data: bytes, error: BaseException) -> bool:
    """Whether pickled `data` is this rank's own `error` (re-raised with its traceback)."""
    return data == _portable(error)


def any_rank(flag: bool, group: Any = None, device: Any = "cpu") -> bool:
    """Whether `flag` is true on at least one rank (every rank must call)."""
    return sum_over_ranks(int(flag), device, group) > 0


def sum_over_ranks(count: int, device: Any = "cpu", group: Any = None) -> int:
    """A count summed over every rank (every rank must call)."""
    import torch
    import torch.distributed as dist

    if world(group)[1] == 1:
        return count
    total = torch.tensor([count], dtype=torch.long, device=device)
    dist.all_reduce(total, group=group)
    return int(total.item())


def gather(objects: list[Any], group: Any = None) -> list[Any]:
    """Every rank's list, concatenated in rank order, on every rank (objects are pickled)."""
    import torch.distributed as dist

    size = world(group)[1]
    if size == 1:
        return list(objects)
    lists: list[Any] = [None] * size
    dist.all_gather_object(lists, objects, group=group)
    return [o for part in lists for o in part]
