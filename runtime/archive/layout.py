"""The archive's layout and columns: pure functions, no I/O.

    DIR/<topic>/run=<run id>/partition=<p>/<first offset>-<last offset>.parquet

A run is one incarnation of the log (see runtime/runs.py): an in-memory broker starts
every run at offset 0, so offsets are only unique within a run, and each run has its own
folders. A file holds a contiguous offset range of one partition of one run (offsets with
no row were dead-lettered garbage or dropped duplicates). File names carry the range, so
a restarted archiver knows what is already on disk without reading any file. Columns are
the Kafka coordinates (`_partition`, `_offset`, `_timestamp_ms`, `_key`), the event's
`_dedup_id` (the identity consumers deduplicate by), then the event's fields; nested dict
fields are stored as JSON text so any task JSON fits one column. Readers add `_run`.
"""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import Any

import msgspec
import orjson
import pyarrow as pa

from topics.events import Event

__all__ = [
    "arrow_schema",
    "events_to_table",
    "table_to_events",
    "indexed_events",
    "file_name",
    "parse_file_name",
    "partition_dir",
    "run_dir_name",
    "parse_run_dir",
    "LEGACY_RUN",
    "META_COLUMNS",
]

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
_RUN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
META_COLUMNS = ("_partition", "_offset", "_timestamp_ms", "_key", "_dedup_id")
LEGACY_RUN = "legacy"  # archives written before runs existed: partition folders under the topic


def run_dir_name(run_id: str) -> str:
    """Return the folder name of one run, refusing ids that could escape the archive."""
    if not _RUN.match(run_id):
        raise ValueError(f"bad run id {run_id!r}")
    return f"run={run_id}"


def parse_run_dir(name: str) -> str | None:
    """Return the run id of a `run=<id>` folder name, or None."""
    if name.startswith("run="):
        run_id = name[len("run=") :]
        return run_id if _RUN.match(run_id) else None
    return None


def partition_dir(topic_name: str, partition: int, run_id: str) -> str:
    """Return the archive-relative folder of one topic partition in one run."""
    if run_id == LEGACY_RUN:
        return f"{topic_name}/partition={partition}"
    return f"{topic_name}/{run_dir_name(run_id)}/partition={partition}"


def file_name(first_offset: int, last_offset: int) -> str:
    """Return the file name for a contiguous offset range (inclusive)."""
    return f"{first_offset:020d}-{last_offset:020d}.parquet"


def parse_file_name(name: str) -> tuple[int, int] | None:
    """Return (first, last) offsets of an archive file name, or None if it is not one."""
    m = _FILE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _arrow_type(info: msgspec.inspect.Type) -> tuple[pa.DataType, bool]:
    """Map a msgspec type to (arrow type, stored-as-json)."""
    if isinstance(info, msgspec.inspect.UnionType):
        inner = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(inner) == 1:
            return _arrow_type(inner[0])
        return pa.string(), True
    simple = {
        msgspec.inspect.IntType: pa.int64(),
        msgspec.inspect.FloatType: pa.float64(),
        msgspec.inspect.StrType: pa.string(),
        msgspec.inspect.BoolType: pa.bool_(),
        msgspec.inspect.BytesType: pa.binary(),
    }
    for kind, arrow in simple.items():
        if isinstance(info, kind):
            return arrow, False
    if isinstance(info, msgspec.inspect.ListType):
        item, item_json = _arrow_type(info.item_type)
        if not item_json:
            return pa.list_(item), False
    return pa.string(), True


@cache
def _columns(event_type: type[Event]) -> tuple[tuple[str, pa.DataType, bool], ...]:
    info = msgspec.inspect.type_info(event_type)
    return tuple((f.name, *_arrow_type(f.type)) for f in info.fields)


@cache
def arrow_schema(event_type: type[Event]) -> pa.Schema:
    """Return the Parquet schema of a topic whose events are `event_type`."""
    meta = [
        pa.field("_partition", pa.int32()),
        pa.field("_offset", pa.int64()),
        pa.field("_timestamp_ms", pa.int64()),
        pa.field("_key", pa.binary()),
        pa.field("_dedup_id", pa.string()),
    ]
    return pa.schema(meta + [pa.field(name, t) for name, t, _ in _columns(event_type)])


def events_to_table(
    event_type: type[Event],
    rows: list[tuple[int, int, int, bytes | None, Event]],
) -> pa.Table:
    """Build a table from (partition, offset, timestamp_ms, key, event) rows."""
    cols = _columns(event_type)
    data: dict[str, list[Any]] = {name: [] for name in META_COLUMNS}
    for name, _, _ in cols:
        data[name] = []
    for partition, offset, ts, key, event in rows:
        data["_partition"].append(partition)
        data["_offset"].append(offset)
        data["_timestamp_ms"].append(ts)
        data["_key"].append(key)
        data["_dedup_id"].append(event.dedup_id())
        for name, _, as_json in cols:
            value = getattr(event, name)
            if as_json and value is not None:
                value = orjson.dumps(msgspec.to_builtins(value)).decode()
            data[name].append(value)
    return pa.Table.from_pydict(data, schema=arrow_schema(event_type))


@cache
def _defaulted(event_type: type[Event]) -> frozenset[str]:
    """Fields with a default that cannot be None: a null there is a column an older file lacks."""
    info = msgspec.inspect.type_info(event_type)
    return frozenset(
        f.name
        for f in info.fields
        if not f.required
        and not isinstance(f.type, msgspec.inspect.NoneType)
        and not (
            isinstance(f.type, msgspec.inspect.UnionType)
            and any(isinstance(t, msgspec.inspect.NoneType) for t in f.type.types)
        )
    )


def table_to_events(event_type: type[Event], table: pa.Table) -> list[Event]:
    """Rebuild events from archive rows (the inverse of events_to_table's event columns).

    A field added to the event after a file was written reads as its default. A row the
    event type now refuses (a value an older version let through, such as a NaN score) is
    left out: see `indexed_events` for which rows were kept.
    """
    return [event for _, event in indexed_events(event_type, table)]


def indexed_events(event_type: type[Event], table: pa.Table) -> list[tuple[int, Event]]:
    """Rebuild events from archive rows as (row index, event), leaving out rows now invalid."""
    cols = _columns(event_type)
    defaulted = _defaulted(event_type)
    out: list[tuple[int, Event]] = []
    refused: list[str] = []
    for i, row in enumerate(table.to_pylist()):
        fields = {}
        for name, _, as_json in cols:
            value = row.get(name)
            if value is None and name in defaulted:
                continue  # not in that file: the event's default applies
            if as_json and isinstance(value, str):
                value = orjson.loads(value)
            fields[name] = value
        try:
            out.append((i, msgspec.convert(fields, event_type)))
        except msgspec.ValidationError as exc:
            refused.append(str(exc))
    if refused:
        log.warning("%d archived %s row(s) are no longer valid events and were left out "
                    "(first: %s)", len(refused), event_type.__name__, refused[0])  # fmt: skip
    return out
