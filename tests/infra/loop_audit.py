"""An audit of a running loop from its log and its checkpoints: what was lost or trained twice.

    python -m tests.infra.loop_audit --bootstrap 127.0.0.1:19092 --checkpoints DIR

Reads every topic from the start (outside any group) and the trainer's checkpoint metadata,
and reports: rollout requests with no trajectory-complete, trajectories with no reward,
trajectories with steps but no segment, groups in two checkpoints, policy versions missing
or announced twice with different checkpoints. Used by tests/infra/test_compose_local.py and
by hand on a compose stack (docs/deploy.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.policy.checkpoint import CHECKPOINT_METADATA

TOPICS = ("rollout-requests", "trajectory-complete", "reward", "segment-ready", "policy-updates")


@dataclass
class Audit:
    """What the log and the checkpoints hold, and what is missing or doubled."""

    requests: set[tuple[str, int]] = field(default_factory=set)
    completed: dict[str, tuple[str, int, str, int]] = field(default_factory=dict)
    rewarded: set[str] = field(default_factory=set)
    segmented: set[str] = field(default_factory=set)
    updates: dict[int, set[str]] = field(default_factory=dict)
    trained: Counter[str] = field(default_factory=Counter)
    versions: list[int] = field(default_factory=list)

    def requests_unplayed(self) -> set[tuple[str, int]]:
        """Rollout requests no trajectory-complete answers (yet)."""
        played = {(group, index) for group, index, _, _ in self.completed.values()}
        return self.requests - played

    def unrewarded(self) -> set[str]:
        """Completed trajectories with no reward (yet)."""
        return set(self.completed) - self.rewarded

    def unsegmented(self) -> set[str]:
        """Completed trajectories that took steps but have no segment (yet)."""
        return {t for t, (_, _, status, steps) in self.completed.items()
                if steps > 0 and status != "error"} - self.segmented  # fmt: skip

    def trained_twice(self) -> set[str]:
        """Groups that went into more than one checkpoint."""
        return {g for g, n in self.trained.items() if n > 1}

    def summary(self) -> dict[str, object]:
        """Counts, and the problems found (empty lists when none)."""
        return {
            "requests": len(self.requests),
            "trajectories": len(self.completed),
            "rewards": len(self.rewarded),
            "segmented": len(self.segmented),
            "policy_versions": sorted(self.updates),
            "checkpoints": self.versions,
            "groups_trained": len(self.trained),
            "requests_unplayed": sorted(map(list, self.requests_unplayed())),
            "unrewarded": sorted(self.unrewarded()),
            "unsegmented": sorted(self.unsegmented()),
            "trained_twice": sorted(self.trained_twice()),
            "updates_conflicting": sorted(v for v, uris in self.updates.items() if len(uris) > 1),
        }


async def audit(bootstrap: str, checkpoints: Path | None) -> Audit:
    """Read the loop's topics to their current end, and its checkpoints' metadata."""
    found = Audit()
    settings = BusSettings(bootstrap=bootstrap)
    async with EventConsumer(settings, list(TOPICS), group_id=None) as consumer:
        async for batch in consumer.catch_up(*TOPICS, timeout_s=60):
            for record in batch:
                event, topic = record.event, record.topic
                if event is None:
                    continue
                if topic == "rollout-requests":
                    found.requests.add((event.group_id, event.sample_index))
                elif topic == "trajectory-complete":
                    found.completed[event.trajectory_id] = (
                        event.group_id, event.sample_index, event.status, event.num_steps
                    )  # fmt: skip
                elif topic == "reward":
                    found.rewarded.add(event.trajectory_id)
                elif topic == "segment-ready":
                    found.segmented.add(event.trajectory_id)
                elif topic == "policy-updates":
                    found.updates.setdefault(event.policy_version, set()).add(event.checkpoint_uri)
    if checkpoints is not None:
        for version, groups in await asyncio.to_thread(_checkpoint_groups, checkpoints):
            found.versions.append(version)
            found.trained.update(groups)
    return found


def _checkpoint_groups(checkpoints: Path) -> list[tuple[int, list[str]]]:
    """(version, groups trained into it) of every checkpoint in the folder."""
    out = []
    for meta in sorted(checkpoints.glob(f"v*/{CHECKPOINT_METADATA}")):
        data = json.loads(meta.read_text())
        if "groups" in data:
            out.append((int(meta.parent.name.lstrip("v")), data["groups"]))
    return out


def main() -> int:
    """Print the audit as JSON; exit 1 if anything was trained twice or announced twice."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--checkpoints", type=Path, default=None)
    args = parser.parse_args()
    summary = asyncio.run(audit(args.bootstrap, args.checkpoints)).summary()
    print(json.dumps(summary, indent=2))
    return 1 if summary["trained_twice"] or summary["updates_conflicting"] else 0


if __name__ == "__main__":
    sys.exit(main())
