"""An archived run into a DashboardState: the same panels as live, read from Parquet."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from consumers.dashboard.state import DashboardConfig, DashboardState
from runtime.archive.layout import table_to_events
from runtime.archive.store import ArchiveStore
from runtime.errors import ConfigError
from topics.registry import TOPICS

__all__ = ["load_archived_run", "resolve_run"]


def resolve_run(store: ArchiveStore, run: str | None) -> str:
    """Return the run id `run` names ("latest" or None: the newest), or raise ConfigError."""
    runs = store.runs()
    if not runs:
        raise ConfigError(f"the archive at {store.root} holds no run")
    if run in (None, "", "latest"):
        return runs[-1]
    if run not in runs:
        raise ConfigError(f"no run {run!r} in {store.root}; runs: {', '.join(runs[-10:])}")
    return run


def load_archived_run(
    store: ArchiveStore, run: str | None, config: DashboardConfig | None = None
) -> DashboardState:
    """Fold one archived run (the newest for None or "latest") into a new state."""
    run_id = resolve_run(store, run)
    state = DashboardState(config, source=f"archive {store.root}")
    for name in ("runs", "policy-updates", "task-stats", "reward"):
        _apply(state, name, store.read(name, runs=[run_id]))
    completes = store.read("trajectory-complete", runs=[run_id])
    _apply(state, "trajectory-complete", completes)
    shown = [t["trajectory_id"] for t in state.panel("filmstrip")["trajectories"]]
    if shown:
        # Steps are co-partitioned with their completion: read only those partitions.
        parts = completes.filter(pc.is_in(completes["trajectory_id"], pa.array(shown)))
        steps = store.read(
            "rollout-step", partitions=sorted(set(parts["_partition"].to_pylist())), runs=[run_id]
        )
        if steps is not None:
            _apply(
                state,
                "rollout-step",
                steps.filter(pc.is_in(steps["trajectory_id"], pa.array(shown))),
            )
    totals = {
        name: sum(
            last - first + 1
            for p in range(spec.partitions)
            for first, last in store.ranges(name, p, run_id)
        )
        for name, spec in TOPICS.items()
    }
    state.set_topic_totals(totals)
    state.set_status("archive")
    return state


def _apply(state: DashboardState, topic_name: str, table: pa.Table | None) -> None:
    if table is None or len(table) == 0:
        return
    for event in table_to_events(TOPICS[topic_name].event_type, table):
        state.apply(topic_name, event)
