"""Archive files written by older versions still read back: a field added since reads as its
default, and a row an older version let through but events now refuse is left out."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from runtime.archive.layout import events_to_table, indexed_events, table_to_events
from runtime.archive.store import ArchiveStore
from topics.events import Reward, TaskStats


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


def test_rows_an_older_version_let_through_are_left_out_not_fatal() -> None:
    good = Reward(trajectory_id="t0", task_id="a", group_id="g", group_size=2, score=1.0)
    also = Reward(trajectory_id="t1", task_id="a", group_id="g", group_size=2, score=0.0,
                  sample_index=1)  # fmt: skip
    table = events_to_table(Reward, [(0, 0, 1, b"t0", good), (0, 1, 2, b"t1", also)])
    # What an archive written before scores were checked can hold: a NaN score.
    scores = table.column("score").to_pylist()
    poisoned = table.set_column(
        table.schema.get_field_index("score"), "score", pa.array([scores[0], float("nan")])
    )
    assert table_to_events(Reward, poisoned) == [good]
    assert [i for i, _ in indexed_events(Reward, poisoned)] == [0]
