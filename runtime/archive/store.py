"""Durable archive files on a local folder or any fsspec URL (s3://...), one folder per run.

Every storage failure surfaces as `StorageError` (an InfrastructureError), so the service
runner retries it or halts instead of dead-lettering the records being archived.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from runtime.archive.layout import (
    LEGACY_RUN,
    file_name,
    parse_file_name,
    parse_run_dir,
    partition_dir,
)
from runtime.blobstore import s3_filesystem
from runtime.errors import StorageError

__all__ = ["ArchiveStore"]


def _storage(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any failure of the underlying file system into StorageError."""

    @functools.wraps(fn)
    def wrapper(self: ArchiveStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except StorageError:
            raise
        except (OSError, ValueError, RuntimeError, pa.ArrowException) as exc:
            raise StorageError(f"archive {self.root}: {fn.__name__} failed: {exc}") from exc
        except Exception as exc:  # botocore and aiohttp errors from object stores
            if type(exc).__module__.split(".")[0] in ("botocore", "aiobotocore", "aiohttp", "s3fs"):
                raise StorageError(f"archive {self.root}: {fn.__name__} failed: {exc}") from exc
            raise

    return wrapper


class ArchiveStore:
    """Writes and lists archive files; a file becomes visible only once fully written."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        if self.root.startswith("s3://"):
            # Same endpoint and cache settings as the blob store (AWS_ENDPOINT_URL, ...).
            self.fs, self._base = s3_filesystem(), self.root[len("s3://") :]
        else:
            self.fs, self._base = fsspec.core.url_to_fs(self.root)
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.local = "file" in protocols

    def _dir(self, topic_name: str, partition: int, run_id: str) -> str:
        return f"{self._base}/{partition_dir(topic_name, partition, run_id)}"

    def _names(self, folder: str) -> list[str]:
        if not self.fs.exists(folder):
            return []
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]

    @_storage
    def ranges(self, topic_name: str, partition: int, run_id: str) -> list[tuple[int, int]]:
        """Return the (first, last) offset ranges archived for a partition of a run, sorted."""
        names = self._names(self._dir(topic_name, partition, run_id))
        return sorted(r for r in map(parse_file_name, names) if r is not None)

    @_storage
    def remove_partial(self, topic_name: str, partition: int, run_id: str) -> int:
        """Delete temp files a crashed writer left in a partition folder; return how many."""
        folder = self._dir(topic_name, partition, run_id)
        if not self.local or not os.path.isdir(folder):
            return 0  # object stores never expose a partial object
        stale = [n for n in os.listdir(folder) if n.startswith(".tmp-")]
        for name in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{folder}/{name}")
        return len(stale)

    def next_offset(self, topic_name: str, partition: int, run_id: str) -> int:
        """Return the first offset of a run's partition not yet archived."""
        ranges = self.ranges(topic_name, partition, run_id)
        return ranges[-1][1] + 1 if ranges else 0

    @_storage
    def write(
        self, topic_name: str, partition: int, run_id: str, first: int, last: int, table: pa.Table
    ) -> str:
        """Write one file durably (fsync + atomic rename locally, one PUT on object stores)."""
        folder = self._dir(topic_name, partition, run_id)
        final = f"{folder}/{file_name(first, last)}"
        if self.local:
            Path(folder).mkdir(parents=True, exist_ok=True)
            tmp = f"{folder}/.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as fh:
                pq.write_table(table, fh, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        else:
            buf = io.BytesIO()
            pq.write_table(table, buf, compression="zstd")
            self.fs.pipe_file(final, buf.getvalue())
        return final

    @_storage
    def runs(self, topic_name: str | None = None) -> list[str]:
        """Return the run ids in the archive (of one topic, or of any), oldest first."""
        topics = [topic_name] if topic_name else self._names(self._base)
        found: set[str] = set()
        for name in topics:
            for entry in self._names(f"{self._base}/{name}"):
                if entry.startswith("partition="):
                    found.add(LEGACY_RUN)
                elif (run_id := parse_run_dir(entry)) is not None:
                    found.add(run_id)
        # Run ids start with their UTC start time, so sorting them sorts by age.
        return sorted(found, key=lambda r: (r != LEGACY_RUN, r))

    def _read_file(self, path: str) -> pa.Table:
        """Return one archive file's table, parsed from memory Arrow owns."""
        # Arrow's pool threads may drop the last reference to what a read was given while
        # the interpreter exits; if that is a Python object (a file, a bytes buffer) its
        # destructor takes the GIL then and aborts the process ("terminate called without
        # an active exception", seen reading S3 archives). A copy Arrow owns has no such end.
        sink = pa.BufferOutputStream()
        sink.write(self.fs.cat_file(path))
        return pq.read_table(pa.BufferReader(sink.getvalue()))

    @_storage
    def read(
        self,
        topic_name: str,
        partitions: list[int] | None = None,
        runs: list[str] | None = None,
    ) -> pa.Table | None:
        """Read a topic's archived rows with a `_run` column, ordered by run, partition, offset."""
        tables = []
        for run_id in self.runs(topic_name):
            if runs is not None and run_id not in runs:
                continue
            run_dir = f"{self._base}/{partition_dir(topic_name, 0, run_id).rsplit('/', 1)[0]}"
            for leaf in sorted(self._names(run_dir)):
                if not leaf.startswith("partition="):
                    continue
                part = int(leaf.split("=", 1)[1])
                if partitions is not None and part not in partitions:
                    continue
                for first, last in self.ranges(topic_name, part, run_id):
                    table = self._read_file(f"{run_dir}/{leaf}/{file_name(first, last)}")
                    tables.append(table.append_column("_run", pa.array([run_id] * len(table))))
        if not tables:
            return None
        # Files of older versions lack newer columns (such as _dedup_id): they read as nulls.
        return pa.concat_tables(tables, promote_options="default")
