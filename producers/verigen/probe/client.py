"""`ProbeClient`: a ProbeServer's HTTP client, with the same methods as Probe (`ProbeAPI`)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from producers.verigen.probe.api import ProbeError, SessionInfo
from runtime.errors import TaskError

__all__ = ["ProbeClient"]


class ProbeClient:
    """The HTTP client of a ProbeServer, with the same methods as Probe."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.calls = 0
        self.transport_ms = 0.0  # client wall time minus the server's own time, summed
        self.lease_waits_ms: list[float] = []  # how long each open() queued for a desktop

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> ProbeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict:
        started = time.monotonic()
        try:
            response = await self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ProbeError(f"the probe at {self.url} is unreachable: {exc!r}") from exc
        if response.status_code == 400:
            raise TaskError(response.json().get("error", response.text))
        if response.status_code != 200:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise ProbeError(f"probe {method} {path}: {response.status_code} {message}")
        data = response.json()
        self.calls += 1
        self.transport_ms += (time.monotonic() - started) * 1000 - float(data.get("server_ms", 0))
        return data

    async def open(self, task: dict[str, Any], *, purpose: str = "") -> SessionInfo:
        """Lease a fresh desktop and run the task's setup on it."""
        data = await self._call("POST", "/v1/sessions", {"task": task, "purpose": purpose})
        info = SessionInfo(**data)
        self.lease_waits_ms.append(info.lease_wait_ms)
        return info

    async def observe(
        self, session_id: str, *, a11y: bool = True, screenshot: bool = False
    ) -> dict[str, Any]:
        """The screen as text and optionally a base64 PNG."""
        body = {"a11y": a11y, "screenshot": screenshot}
        return await self._call("POST", f"/v1/sessions/{session_id}/observe", body)

    async def act(self, session_id: str, action: dict[str, Any]) -> dict[str, Any]:
        """Execute one action."""
        return await self._call("POST", f"/v1/sessions/{session_id}/act", {"action": action})

    async def evaluate(
        self,
        session_id: str,
        actions: list[dict[str, Any]],
        evaluator: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score the desktop's state."""
        body = {"actions": actions, "evaluator": evaluator}
        return await self._call("POST", f"/v1/sessions/{session_id}/evaluate", body)

    async def close(self, session_id: str) -> None:
        """Give the desktop back."""
        await self._call("DELETE", f"/v1/sessions/{session_id}")

    async def stats(self) -> dict[str, Any]:
        """The probe's stats."""
        return await self._call("GET", "/v1/stats")
