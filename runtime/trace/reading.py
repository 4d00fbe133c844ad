"""The records a trace reads, from the live log or from one archived run.

Only what a timeline needs is kept: segments lose their token lists on the way in
(`SegmentFact`), and with `group` given, steps and segments of other groups are left out.
Reading is a replay (runtime/replay.py): a reader outside every consumer group, so it never
commits and takes nothing from a running service.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.compute as pc

from runtime.archive.layout import table_to_events
from runtime.archive.store import ArchiveStore
from runtime.config import BusSettings
from runtime.errors import ConfigError
from runtime.replay import read_live
from runtime.runs import current_run
from runtime.trace.timeline import SegmentFact, TraceLog
from topics.events import SegmentReady
from topics.registry import TOPICS

__all__ = ["TRACE_TOPICS", "archived_run", "read_archived_log", "read_live_log"]

# topic -> the TraceLog field its records go to
TRACE_TOPICS = {
    "rollout-requests": "requests",
    "rollout-step": "steps",
    "trajectory-complete": "completes",
    "reward": "rewards",
    "segment-ready": "segments",
    "task-stats": "task_stats",
    "policy-updates": "updates",
}
_BY_GROUP = ("rollout-step", "segment-ready")  # the big topics, cut to one group when asked


def archived_run(store: ArchiveStore, run: str | None) -> str:
    """Return the run id `run` names in the archive ("latest" or None: the newest)."""
    runs = store.runs()
    if not runs:
        raise ConfigError(f"the archive at {store.root} holds no run")
    if run in (None, "", "latest"):
        return runs[-1]
    if run not in runs:
        raise ConfigError(f"no run {run!r} in {store.root}; runs: {', '.join(runs[-10:])}")
    return run


def _segment_facts(table: pa.Table) -> list[SegmentFact]:
    """Segment facts from archive rows, counting list lengths without building the lists."""
    tokens = pc.list_value_length(table["input_ids"]).to_pylist()
    images = pc.list_value_length(table["image_refs"]).to_pylist()
    names = ("trajectory_id", "segment_index", "ts_ms", "trained_tokens", "policy_version",
             "num_segments", "mode", "group_id", "task_id")  # fmt: skip
    rows = table.select(list(names)).to_pylist()
    return [
        SegmentFact(tokens=n or 0, images=m or 0, **{k: v for k, v in row.items() if v is not None})
        for row, n, m in zip(rows, tokens, images, strict=True)
    ]


def read_archived_log(root: str, run: str | None = None, group: str | None = None) -> TraceLog:
    """Read one archived run's trace records (the newest run for None or "latest")."""
    store = ArchiveStore(root)
    run_id = archived_run(store, run)
    log = TraceLog(run_id=run_id)
    for name, attr in TRACE_TOPICS.items():
        table = store.read(name, runs=[run_id])
        if table is None or len(table) == 0:
            continue
        if group is not None and name in _BY_GROUP:
            table = table.filter(pc.equal(table["group_id"], group))
        if name == "segment-ready":
            log.segments = _segment_facts(table)
        else:
            setattr(log, attr, table_to_events(TOPICS[name].event_type, table))
    return log


async def _read_topic(settings: BusSettings, name: str, group: str | None) -> list:
    out = []
    async for record in read_live(settings, name):
        event = record.event
        if event is None or (group is not None and name in _BY_GROUP and event.group_id != group):
            continue
        out.append(SegmentFact.of(event) if isinstance(event, SegmentReady) else event)
    return out


async def read_live_log(settings: BusSettings, group: str | None = None) -> TraceLog:
    """Read the live log's trace records, up to its end as of now."""
    run = await current_run(settings)
    names = list(TRACE_TOPICS)
    found = await asyncio.gather(*(_read_topic(settings, name, group) for name in names))
    log = TraceLog(run_id=run.run_id if run else "")
    for name, events in zip(names, found, strict=True):
        setattr(log, TRACE_TOPICS[name], events)
    return log
