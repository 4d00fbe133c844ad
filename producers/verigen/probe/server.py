"""`ProbeServer`: a Probe served over HTTP on 127.0.0.1 with a bearer token."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web

from producers.verigen.probe.api import ProbeError
from producers.verigen.probe.scheduler import Probe
from runtime.errors import TaskError

__all__ = ["ProbeServer"]


class ProbeServer:
    """Serves a Probe over HTTP on 127.0.0.1 with a bearer token (see the package doc).

    POST /v1/sessions {task, purpose} · POST /v1/sessions/ID/observe {a11y, screenshot}
    · POST /v1/sessions/ID/act {action} · POST /v1/sessions/ID/evaluate {actions, evaluator}
    · DELETE /v1/sessions/ID · GET /v1/stats. Errors: 401 bad token, 400 bad request,
    404 unknown session, 503 desktop failure.
    """

    def __init__(
        self, probe: Probe, *, token: str | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.probe = probe
        self.token = token or secrets.token_urlsafe(24)
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """Where the probe answers."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> ProbeServer:
        """Start serving; port 0 picks a free one."""
        app = web.Application(middlewares=[self._auth], client_max_size=16 << 20)
        app.router.add_post("/v1/sessions", self._open)
        app.router.add_post("/v1/sessions/{sid}/observe", self._observe)
        app.router.add_post("/v1/sessions/{sid}/act", self._act)
        app.router.add_post("/v1/sessions/{sid}/evaluate", self._evaluate)
        app.router.add_delete("/v1/sessions/{sid}", self._close)
        app.router.add_get("/v1/stats", self._stats)
        # A worker that hangs up mid-call cancels the call (an open() then frees its desktop);
        # a stop waits at most a few seconds for calls in flight.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=5.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        """Stop serving (the probe's sessions stay its owner's to close)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ProbeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return web.json_response({"error": "bad or missing token"}, status=401)
        try:
            return await handler(request)
        except ProbeError as exc:
            gone = "no session" in str(exc)
            return web.json_response({"error": str(exc)}, status=404 if gone else 503)
        except (TaskError, ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad request: {exc}"}, status=400)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        return body

    async def _open(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        task = body["task"]
        if not isinstance(task, dict):
            raise ValueError("`task` must be an object")
        info = await self.probe.open(task, purpose=str(body.get("purpose", "")))
        return web.json_response(asdict(info))

    async def _observe(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        out = await self.probe.observe(
            request.match_info["sid"],
            a11y=bool(body.get("a11y", True)),
            screenshot=bool(body.get("screenshot", False)),
        )
        return web.json_response(out)

    async def _act(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return web.json_response(await self.probe.act(request.match_info["sid"], body["action"]))

    async def _evaluate(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        out = await self.probe.evaluate(
            request.match_info["sid"], list(body.get("actions") or []), body.get("evaluator")
        )
        return web.json_response(out)

    async def _close(self, request: web.Request) -> web.Response:
        await self.probe.close(request.match_info["sid"])
        return web.json_response({"closed": True})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.probe.stats())
