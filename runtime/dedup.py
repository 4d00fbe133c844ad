"""Dropping redelivered duplicates by `dedup_id()`, in bounded memory.

Delivery is at-least-once: a record can arrive twice (a producer retry writes it again, a
crashed consumer re-reads what it had not committed). Events carry deterministic ids (a
step is `(trajectory, step)`, a reward `(trajectory, judge version)`), so a consumer that
remembers the ids it has handled can drop the second copy. `DedupWindow` remembers the
last `capacity` ids of one partition: records with the same key land in the same partition,
so a duplicate is always compared with its original's neighbours.

The service runner keeps one window per assigned partition and makes it restart-safe by
re-reading the `capacity` records before the committed offset when a partition is
assigned (their ids only, without processing them): a restarted or rebalanced consumer
remembers what its predecessor handled, with no state outside the log.
"""

from __future__ import annotations

__all__ = ["DedupWindow"]


class DedupWindow:
    """The last `capacity` dedup ids seen on one partition, oldest forgotten first."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("a dedup window holds at least one id")
        self.capacity = capacity
        self._ids: dict[str, None] = {}  # insertion-ordered: the first key is the oldest

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, dedup_id: str) -> bool:
        return dedup_id in self._ids

    def add(self, dedup_id: str) -> None:
        """Remember an id, forgetting the oldest one when full."""
        if dedup_id in self._ids:
            return
        self._ids[dedup_id] = None
        if len(self._ids) > self.capacity:
            del self._ids[next(iter(self._ids))]

    def seen_before(self, dedup_id: str) -> bool:
        """Return True if the id is a duplicate; otherwise remember it and return False."""
        if dedup_id in self._ids:
            return True
        self.add(dedup_id)
        return False
