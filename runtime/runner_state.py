"""What the service runner (runtime/service.py) keeps: per partition, where it stands in the
log; for the whole service, the counters it logs and exports."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from runtime.dedup import DedupWindow

__all__ = ["PartitionState", "Partitions", "ServiceMetrics"]


@dataclass
class PartitionState:
    """Where the runner stands in one partition of the log it reads."""

    owned: bool = False  # assigned and not revoked since
    # Its records in the batch in hand were fetched before a seek or a revocation: the
    # consumer reads them again from the new position. Cleared at every fetch.
    stale: bool = False
    resume: int = 0  # below this offset the records were handled before: dedup warm-up only
    window: DedupWindow | None = None  # ids handled lately, when the processor dedups
    position: int | None = None  # next offset, once the outputs staged so far are acknowledged
    acked: int | None = None  # next offset whose outputs are acknowledged
    committed: int | None = None  # the offset last committed for it

    def reset(self) -> None:
        """Forget where it stood: on a revocation, or when the log it came from was replaced."""
        self.resume = 0
        self.window = None
        self.position = self.acked = self.committed = None


class Partitions(dict[TopicPartition, PartitionState]):
    """Every partition the runner was handed, by topic-partition (there are only a few).

    A revoked partition is kept, no longer owned, so that what is left of it in the batch in
    hand stays marked stale.
    """

    def of(self, tp: TopicPartition) -> PartitionState:
        """Return the state of `tp`, new if it was never handed over."""
        return self.setdefault(tp, PartitionState())

    def owns(self, tp: TopicPartition) -> bool:
        """Whether `tp` is assigned and not revoked since."""
        state = self.get(tp)
        return state is not None and state.owned

    def is_stale(self, tp: TopicPartition) -> bool:
        """Whether the records of `tp` in the batch in hand are to be read again."""
        state = self.get(tp)
        return state is not None and state.stale

    def owned(self) -> set[TopicPartition]:
        """Return the partitions assigned and not revoked since."""
        return {tp for tp, state in self.items() if state.owned}

    def acked(self) -> dict[TopicPartition, int]:
        """Return, per partition, the next offset whose outputs are acknowledged."""
        return {tp: state.acked for tp, state in self.items() if state.acked is not None}

    def acknowledged(self) -> None:
        """The outputs staged so far were acknowledged: their positions may be committed."""
        for state in self.values():
            if state.position is not None and state.owned:
                state.acked = state.position
            state.position = None

    def fetched(self) -> None:
        """A new batch is in hand: no partition's records in it are stale."""
        for state in self.values():
            state.stale = False

    def assign(self, assigned: Iterable[TopicPartition]) -> None:
        """Own newly assigned partitions."""
        for tp in assigned:
            self.of(tp).owned = True

    def revoke(self, revoked: Iterable[TopicPartition]) -> None:
        """Forget revoked partitions; what is left of them in the batch in hand is stale."""
        for tp in revoked:
            state = self.of(tp)
            state.reset()
            state.owned = False
            state.stale = True


@dataclass
class ServiceMetrics:
    """Counters a service logs periodically."""

    consumed: int = 0
    processed: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    produced: int = 0
    commits: int = 0
    retries: int = 0
    rebalances: int = 0
    started_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, float]:
        """Return the counters as a flat dict."""
        return {
            "consumed": self.consumed,
            "processed": self.processed,
            "dead_lettered": self.dead_lettered,
            "duplicates": self.duplicates,
            "produced": self.produced,
            "commits": self.commits,
            "retries": self.retries,
            "rebalances": self.rebalances,
            "uptime_s": round(time.time() - self.started_at, 1),
        }
