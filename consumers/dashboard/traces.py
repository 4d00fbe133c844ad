"""The dashboard's trajectory page and latency panel: timelines built from the log on demand.

Routes: `/trajectory` the page (`?id=` a trajectory, request or group id; `?q=` a search),
`/api/trajectory?id=` one timeline as JSON (runtime/trace/timeline.py, with its stages),
`/api/trajectories?q=` the trajectories whose id or task contains `q`, newest first, and
`/api/latency` p50/p90/p99 of each stage gap per policy version. Each takes `run` (archive
mode). Live, they read the log with a replay outside every consumer group; archived, the
run's Parquet. A whole run's index is kept for a few seconds, so a page and its panel share
one read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from runtime.archive.store import ArchiveStore
from runtime.config import BusSettings
from runtime.trace.reading import archived_run, read_archived_log, read_live_log
from runtime.trace.summary import slowest, stage_summary
from runtime.trace.timeline import (
    LogIndex,
    Timeline,
    build_timeline,
    build_timelines,
    group_named,
    resolve_trajectory,
    timeline_dict,
)

__all__ = ["TraceReader", "trace_routes"]

_WEB = Path(__file__).resolve().parent / "web"
_SEARCH_LIMIT = 50


def _json(value: object, status: int = 200) -> Response:
    """JSON of the log's values (orjson: NaN and infinities become null, never an error)."""
    return Response(orjson.dumps(value), status_code=status, media_type="application/json",
                    headers={"Cache-Control": "no-store"})  # fmt: skip


class TraceReader:
    """Reads trace records from the live log or an archive; keeps a run's index `ttl_s`."""

    def __init__(
        self,
        settings: BusSettings | None = None,
        archive: str | None = None,
        default_run: str | None = None,
        ttl_s: float = 10.0,
    ) -> None:
        self.settings = settings
        self.archive = archive
        self.default_run = default_run
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, LogIndex]] = {}
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, source: Any) -> TraceReader:
        """A reader of what a dashboard source shows: its archive, or its live log."""
        if source.mode == "archive":
            return cls(archive=source.store.root, default_run=source.default_run)
        return cls(settings=source.follower.settings)

    async def _read(self, run: str | None, group: str | None) -> LogIndex:
        if self.archive is not None:
            log = await asyncio.to_thread(
                read_archived_log, self.archive, run or self.default_run, group
            )
        else:
            assert self.settings is not None
            log = await read_live_log(self.settings, group)
        return LogIndex(log)

    async def run_index(self, run: str | None) -> LogIndex:
        """The whole run's index (the newest archived run for None)."""
        key = run or ""
        if self.archive is not None:
            key = await asyncio.to_thread(
                archived_run, ArchiveStore(self.archive), run or self.default_run
            )
        async with self._lock:
            hit = self._cache.get(key)
            if hit is None or time.monotonic() - hit[0] > self.ttl_s:
                hit = (time.monotonic(), await self._read(key or None, None))
                self._cache = {key: hit}
            return hit[1]

    async def group_index(self, run: str | None, group: str) -> LogIndex:
        """An index of one group's steps and segments (and every smaller topic)."""
        return await self._read(run, group)


def _row(t: Timeline) -> dict[str, Any]:
    return {
        "trajectory_id": t.trajectory_id, "task_id": t.task_id, "group_id": t.group_id,
        "status": t.completion.status if t.completion else "running",
        "score": t.rewards[0].score if t.rewards else None,
        "policy_version": t.policy_version,
        "trained": t.training.version if t.training else None,
        "at_ms": t.completion.at_ms if t.completion else None,
    }  # fmt: skip


def trace_routes(reader: TraceReader, csp: str) -> list[Route]:
    """The trajectory page, its data and the latency panel's."""

    async def page(request: Request) -> Response:
        return FileResponse(_WEB / "trajectory.html", headers={"Content-Security-Policy": csp})

    async def one(request: Request) -> Response:
        run = request.query_params.get("run") or None
        name = request.query_params.get("id", "").strip()
        if not name:
            return _json({"error": "no trajectory id given"}, 400)
        group = group_named(name)
        index = await (reader.group_index(run, group) if group else reader.run_index(run))
        found = resolve_trajectory(index, name)
        if not found:
            return _json({"error": f"no trajectory {name!r} in this run"}, 404)
        timelines = [t for t in (build_timeline(index, tid) for tid in found) if t is not None]
        if len(timelines) > 1:
            return _json({"matches": [_row(t) for t in timelines]})
        return _json(timeline_dict(timelines[0]))

    async def search(request: Request) -> Response:
        run = request.query_params.get("run") or None
        query = request.query_params.get("q", "").strip().lower()
        index = await reader.run_index(run)
        rows = [_row(t) for t in reversed(build_timelines(index))]
        if query:
            rows = [r for r in rows if query in r["trajectory_id"].lower() or query in r["task_id"].lower()]  # fmt: skip
        return _json({"run": index.run_id, "total": len(rows), "rows": rows[:_SEARCH_LIMIT]})

    async def latency(request: Request) -> Response:
        index = await reader.run_index(request.query_params.get("run") or None)
        timelines = build_timelines(index)
        rows = stage_summary(timelines)
        versions = list(dict.fromkeys(r.version for r in rows))
        worst = {v: (w.gap if (w := slowest(rows, v)) else None) for v in versions}
        return _json({
            "run": index.run_id, "trajectories": len(timelines),
            "gaps": [asdict(r) for r in rows], "slowest": worst,
        })  # fmt: skip

    return [
        Route("/trajectory", page),
        Route("/api/trajectory", one),
        Route("/api/trajectories", search),
        Route("/api/latency", latency),
    ]
