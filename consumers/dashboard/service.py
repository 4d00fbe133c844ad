"""The dashboard's web server: one page, its panels over server-sent events, and thumbnails.

Run by `scalecua dashboard` (cli/dashboard_commands.py); `scalecua up` serves it too.

    async with serve_dashboard(settings, port=0) as url:     # live, from the broker
        ...
    async with serve_dashboard(archive="var/archive", run="latest") as url:
        ...

Routes: `/` the page, `/events` the panels as server-sent events (each event named after
its panel, sent again whenever the panel changes), `/api/panels` all panels as one JSON
document, `/api/runs` the runs one can open, `/blob/sha256:...?w=320` a screenshot from
the blob store (shrunk to `w` pixels wide as JPEG; content-addressed, so cached forever);
`/trajectory` one trajectory's page and the latency panel's data (consumers/dashboard/traces.py).
The chart library is Chart.js from `web/node_modules` (installed by `npm ci`, never fetched
from a CDN); without it the page says how to install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import socket
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import uvicorn
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from consumers.dashboard.archive import load_archived_run, resolve_run
from consumers.dashboard.follow import LogFollower
from consumers.dashboard.state import PANELS, DashboardConfig, DashboardState
from consumers.dashboard.thumbnails import thumbnail_routes
from consumers.dashboard.traces import TraceReader, trace_routes
from runtime.addresses import is_loopback
from runtime.archive.store import ArchiveStore
from runtime.blobstore import BlobStore, open_blob_store
from runtime.config import BusSettings
from runtime.errors import ConfigError, ScaleCUAError

__all__ = [
    "ArchiveSource",
    "LiveSource",
    "WEB",
    "bundle_problem",
    "create_app",
    "is_loopback",
    "serve_dashboard",
    "CHART_JS",
]

log = logging.getLogger(__name__)

WEB = Path(__file__).resolve().parent / "web"
CHART_JS = WEB / "node_modules" / "chart.js" / "dist" / "chart.umd.min.js"
_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css",
           "trajectory.js": "text/javascript", "trajectory.css": "text/css",
           "latency.js": "text/javascript"}  # fmt: skip
# The page loads nothing from elsewhere: a CDN reference would be blocked and show up.
_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"
_ARCHIVED_RUNS_KEPT = 4


def bundle_problem() -> str | None:
    """Return why the page cannot load its chart library, or None when it can."""
    if CHART_JS.is_file():
        return None
    return (
        f"The dashboard's chart library is not installed ({CHART_JS} is missing). "
        "Run `bash infra/install.sh`, or `npm ci` in consumers/dashboard/web."
    )


class LiveSource:
    """One state fed by the live log."""

    mode = "live"

    def __init__(self, settings: BusSettings, config: DashboardConfig, poll_s: float) -> None:
        self.state = DashboardState(config, source=f"broker {settings.bootstrap}")
        self.follower = LogFollower(settings, self.state, poll_s=poll_s)

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()

    async def state_for(self, run: str | None) -> DashboardState:
        return self.state

    async def runs(self) -> list[str]:
        return [r.run_id for r in self.state.runs]


class ArchiveSource:
    """Archived runs, each loaded into its own state when first asked for."""

    mode = "archive"

    def __init__(self, root: str, run: str | None, config: DashboardConfig) -> None:
        self.store = ArchiveStore(root)
        self.default_run = run
        self.config = config
        self._states: OrderedDict[str, DashboardState] = OrderedDict()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await self.state_for(None)  # a wrong --run fails before the URL is printed

    async def stop(self) -> None:
        self._states.clear()

    async def state_for(self, run: str | None) -> DashboardState:
        async with self._lock:
            run_id = await asyncio.to_thread(resolve_run, self.store, run or self.default_run)
            if run_id not in self._states:
                self._states[run_id] = await asyncio.to_thread(
                    load_archived_run, self.store, run_id, self.config
                )
                while len(self._states) > _ARCHIVED_RUNS_KEPT:
                    self._states.popitem(last=False)
            self._states.move_to_end(run_id)
            return self._states[run_id]

    async def runs(self) -> list[str]:
        return await asyncio.to_thread(self.store.runs)


class _Panels:
    """Each state's panels encoded once per version, shared by every client."""

    def __init__(self) -> None:
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def encoded(self, state: DashboardState, name: str) -> bytes:
        entries = self._cache.setdefault(state, {})
        version = state.versions[name]
        hit = entries.get(name)
        if hit is None or hit[0] != version:
            hit = (version, orjson.dumps(state.panel(name)))
            entries[name] = hit
        return hit[1]


def create_app(
    source: LiveSource | ArchiveSource,
    blobs: BlobStore | None,
    *,
    interval_s: float = 0.5,
) -> Starlette:
    """Build the dashboard's ASGI app over a live or archive source."""
    closing = asyncio.Event()
    app = Starlette(
        exception_handlers={ScaleCUAError: _refused},
        routes=[
            *_page_routes(),
            *_panel_routes(source, closing, interval_s),
            *thumbnail_routes(blobs),
            *trace_routes(TraceReader.of(source), _CSP),
            *_health_routes(source),
        ],
    )
    app.state.closing = closing
    return app


def _page_routes() -> list[Route]:
    """`/` the page and `/static/{name}` its script, style and chart library."""

    async def page(request: Request) -> Response:
        problem = bundle_problem()
        if problem is not None:
            body = f"<h1>Dashboard unavailable</h1><p>{html.escape(problem)}</p>"
            return HTMLResponse(f"<!doctype html><title>scalecua dashboard</title>{body}", 503)
        return FileResponse(WEB / "index.html", headers={"Content-Security-Policy": _CSP})

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "chart.umd.min.js":
            if bundle_problem() is not None:
                return Response(bundle_problem(), status_code=503, media_type="text/plain")
            return FileResponse(CHART_JS, media_type="text/javascript")
        if name not in _ASSETS:
            return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(WEB / name, media_type=_ASSETS[name], headers={"Cache-Control": "no-cache"})  # fmt: skip

    return [Route("/", page), Route("/static/{name}", asset)]


def _panel_routes(
    source: LiveSource | ArchiveSource, closing: asyncio.Event, interval_s: float
) -> list[Route]:
    """`/events` the panels as server-sent events, `/api/panels` as one JSON document, and
    `/api/runs` the runs one can open; a `run` query picks the run (archive mode)."""
    panels = _Panels()

    async def state_of(request: Request) -> DashboardState:
        return await source.state_for(request.query_params.get("run") or None)

    async def events(request: Request) -> Response:
        state = await state_of(request)

        async def stream() -> AsyncIterator[dict[str, str]]:
            sent: dict[str, int] = {}
            while not closing.is_set():
                for name in PANELS:
                    version = state.versions[name]
                    if sent.get(name) != version:
                        sent[name] = version
                        yield {"event": name, "data": panels.encoded(state, name).decode()}
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closing.wait(), interval_s)

        return EventSourceResponse(stream(), ping=15, send_timeout=30, headers={"Cache-Control": "no-store"})  # fmt: skip

    async def all_panels(request: Request) -> Response:
        state = await state_of(request)
        body = b"{" + b",".join(
            orjson.dumps(name) + b":" + panels.encoded(state, name) for name in PANELS
        ) + b"}"  # fmt: skip
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    async def runs(request: Request) -> Response:
        current = (await state_of(request)).runs
        return JSONResponse(
            {
                "mode": source.mode,
                "runs": await source.runs(),
                "current": current[-1].run_id if current else None,
            }
        )

    return [Route("/events", events), Route("/api/panels", all_panels), Route("/api/runs", runs)]


def _health_routes(source: LiveSource | ArchiveSource) -> list[Route]:
    """`/healthz`: the server answers, and in which mode."""

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "mode": source.mode})

    return [Route("/healthz", health)]


async def _refused(request: Request, exc: Exception) -> Response:
    # A run the archive does not have is the asker's mistake; storage failures are not.
    status = 404 if isinstance(exc, ConfigError) else 502
    return Response(str(exc), status_code=status, media_type="text/plain")


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: whoever owns the loop owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"the dashboard cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve_dashboard(
    settings: BusSettings | None = None,
    *,
    archive: str | None = None,
    run: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    config: DashboardConfig | None = None,
    blobs: BlobStore | None = None,
    poll_s: float = 2.0,
    interval_s: float = 0.5,
) -> AsyncIterator[str]:
    """Serve the dashboard on the running loop (live from `settings`, or an `archive` run).

    Yields the page's URL; on exit, ends every open stream and stops the server and the
    log reader. Raises ConfigError for a port in use or a run not in the archive.
    """
    config = config or DashboardConfig()
    if archive is not None:
        source: LiveSource | ArchiveSource = ArchiveSource(archive, run, config)
    elif settings is not None:
        source = LiveSource(settings, config, poll_s)
    else:
        raise ConfigError("the dashboard needs bus settings (live) or an archive")
    if blobs is None:
        blobs = open_blob_store()
    if bundle_problem() is not None:
        log.warning("%s", bundle_problem())
    sock = _listen(host, port)
    try:
        await source.start()
    except BaseException:
        sock.close()
        raise
    app = create_app(source, blobs, interval_s=interval_s)
    server = _Server(
        uvicorn.Config(
            app, log_config=None, log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=3,
        )
    )  # fmt: skip
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise ConfigError("the dashboard's server stopped while starting")
            await asyncio.sleep(0.02)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}/"
    finally:
        app.state.closing.set()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 10)
        await source.stop()
        sock.close()
