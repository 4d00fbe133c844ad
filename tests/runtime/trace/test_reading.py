"""A trace reads the same records from the live log and from the archive."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from runtime.archive.layout import events_to_table
from runtime.archive.store import ArchiveStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.trace.reading import read_archived_log, read_live_log
from runtime.trace.timeline import LogIndex, build_timeline, build_timelines
from tests.runtime.trace.story import ALPHA, RUN, TRAJECTORY, story
from topics.events import Event
from topics.registry import TOPICS


def write_archive(root: str, run_id: str, events: list[tuple[str, Event]]) -> None:
    """Write events as the archiver would: one file per topic, partition 0, offsets from 0."""
    store = ArchiveStore(root)
    by_topic: dict[str, list[Event]] = {}
    for name, event in events:
        by_topic.setdefault(name, []).append(event)
    for name, items in by_topic.items():
        rows = [(0, i, e.ts_ms, None, e) for i, e in enumerate(items)]
        store.write(
            name, 0, run_id, 0, len(items) - 1, events_to_table(TOPICS[name].event_type, rows)
        )


async def test_live_and_archived_records_give_one_timeline(
    bus_settings: BusSettings, tmp_path: Path
) -> None:
    events = story()
    async with EventProducer(bus_settings) as producer:
        await producer.wait_acks([await producer.send(name, e) for name, e in events])
    write_archive(str(tmp_path / "archive"), RUN, events)
    write_archive(str(tmp_path / "archive"), "20260101T000000Z-000000", events[:3])  # older run

    live = LogIndex(await read_live_log(bus_settings))
    archived = LogIndex(read_archived_log(str(tmp_path / "archive"), "latest"))
    assert archived.run_id == RUN
    for a, b in zip(build_timelines(live), build_timelines(archived), strict=True):
        assert {**asdict(a), "run_id": ""} == {**asdict(b), "run_id": ""}
    assert len(build_timelines(live)) == 5

    # One group's records are enough for its trajectories' timelines.
    one = LogIndex(read_archived_log(str(tmp_path / "archive"), RUN, group=ALPHA))
    full, cut = build_timeline(archived, TRAJECTORY), build_timeline(one, TRAJECTORY)
    assert full is not None and asdict(full) == asdict(cut)
    cut_live = build_timeline(LogIndex(await read_live_log(bus_settings, group=ALPHA)), TRAJECTORY)
    assert cut_live is not None and cut_live.segments == full.segments
