"""Archive files written before an event gained a field still read back, with its default."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from runtime.archive.layout import events_to_table, table_to_events
from runtime.archive.store import ArchiveStore
from topics.events import TaskStats


def test_files_without_a_newer_field_read_it_as_its_default(tmp_path: Path) -> None:
    old = TaskStats(task_id="a", ema_pass_rate=0.5, weight=0.9, attempts=2, last_score=None)
    new = TaskStats(task_id="b", ema_pass_rate=0.2, weight=0.6, attempts=1,
                    last_group_id="g1", folded_groups={"g1": 1_790_000_000_000})  # fmt: skip
    folder = tmp_path / "task-stats" / "run=r1" / "partition=0"
    folder.mkdir(parents=True)
    # The first file as an older scalecua wrote it: no last_group_id, no folded_groups.
    table = events_to_table(TaskStats, [(0, 0, 1, b"a", old)])
    pq.write_table(table.drop_columns(["last_group_id", "folded_groups"]),
                   folder / "00000000000000000000-00000000000000000000.parquet")  # fmt: skip
    pq.write_table(events_to_table(TaskStats, [(0, 1, 2, b"b", new)]),
                   folder / "00000000000000000001-00000000000000000001.parquet")  # fmt: skip

    mixed = ArchiveStore(str(tmp_path)).read("task-stats")  # one table: nulls for the old file
    assert mixed.num_rows == 2
    assert table_to_events(TaskStats, mixed) == [old, new]
