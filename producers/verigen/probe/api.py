"""The probe's interface, whichever side of HTTP a worker is on: `ProbeAPI`, what a session's
opening returns (`SessionInfo`), the one error (`ProbeError`) and `probe_session`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.errors import InfrastructureError

__all__ = ["ProbeAPI", "ProbeError", "SessionInfo", "probe_session"]


class ProbeError(InfrastructureError):
    """The probe or its desktop failed, or the session is gone (expired, closed)."""


@dataclass
class SessionInfo:
    """A session just opened: its id, or why its setup did not run."""

    session_id: str  # empty when the setup failed (the session is already closed)
    setup_error: str | None = None  # the setup raised (a bad step, a missing file, a timeout)
    failed_commands: list[str] = field(default_factory=list)  # setup commands that exited != 0
    lease_wait_ms: float = 0.0  # queued for a free desktop
    setup_ms: float = 0.0
    server_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the setup ran and every setup command succeeded."""
        return bool(self.session_id) and self.setup_error is None and not self.failed_commands


class ProbeAPI(Protocol):
    """What an agent worker can do with the probe, in-process or over HTTP."""

    async def open(self, task: dict[str, Any], *, purpose: str = "") -> SessionInfo:
        """Lease a fresh desktop and run the task's setup on it."""
        ...

    async def observe(
        self, session_id: str, *, a11y: bool = True, screenshot: bool = False
    ) -> dict[str, Any]:
        """The screen as text (a11y tree and terminal) and optionally a base64 PNG."""
        ...

    async def act(self, session_id: str, action: dict[str, Any]) -> dict[str, Any]:
        """Execute one action; the controller's StepResult as a dict."""
        ...

    async def evaluate(
        self,
        session_id: str,
        actions: list[dict[str, Any]],
        evaluator: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score the desktop's state with the task's (or another) evaluator."""
        ...

    async def close(self, session_id: str) -> None:
        """Give the desktop back (the pool resets it)."""
        ...


@contextlib.asynccontextmanager
async def probe_session(
    probe: ProbeAPI, task: dict[str, Any], *, purpose: str = ""
) -> AsyncIterator[SessionInfo]:
    """Open a session for the block and close it after (a failed setup is already closed)."""
    info = await probe.open(task, purpose=purpose)
    try:
        yield info
    finally:
        if info.session_id:
            with contextlib.suppress(ProbeError):
                await probe.close(info.session_id)
