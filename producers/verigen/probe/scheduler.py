"""`Probe`: the in-process probe, which schedules sessions onto a few warm desktops.

Waiting sessions get the next free desktop by purpose, then arrival (`PRIORITY`); a session
runs its task's setup on a freshly reset desktop, then the worker's observations, actions
and evaluations, until the worker closes it or the reaper finds it idle too long.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import heapq
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from producers.verigen.probe.api import ProbeError, SessionInfo
from runtime.envs.desktop.controller import StepResult
from runtime.envs.desktop.wrappers import TERMINAL_LOG_DIR
from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.model import Evaluator, Task
from runtime.envs.tasks.setup import run_setup
from runtime.errors import DesktopError, TaskError
from runtime.policy.observation import linearize_a11y, text_observation

__all__ = ["PRIORITY", "Probe", "session_task"]

log = logging.getLogger(__name__)

# The newest terminal session's last bytes, while a terminal is open (xterm has no a11y tree).
_TERMINAL_TAIL = (
    f"pgrep -x xterm >/dev/null && f=$(ls -t {TERMINAL_LOG_DIR}/*.log 2>/dev/null | head -n 1) "
    '&& [ -n "$f" ] && tail -c 8192 "$f"'
)
_PLACEHOLDER_EVALUATOR = {"func": "infeasible"}  # a session opened only to look around


class _DesktopDied(DesktopError):
    """A desktop stopped answering during a task's setup."""


def session_task(task: dict[str, Any]) -> Task:
    """The Task a session runs: no folder, and a placeholder evaluator if it has none."""
    raw = {"id": "probe-session", "instruction": "", **task}
    raw.setdefault("evaluator", _PLACEHOLDER_EVALUATOR)
    return Task.from_dict(raw, base_dir=None, where="session task")


class _SetupRecorder:
    """A controller that notes every setup command exiting non-zero (run_setup only logs them)."""

    def __init__(self, controller: Any) -> None:
        self._controller = controller
        self.failed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)

    async def execute(
        self,
        command: Any,
        shell: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, as in OSWorld
    ) -> dict:
        result = await self._controller.execute(command, shell=shell, timeout=timeout)
        if result.get("returncode") != 0:
            shown = command if isinstance(command, str) else " ".join(command)
            error = (result.get("error") or "").strip()[-300:]
            self.failed.append(
                f"`{shown[:200]}` exited {result.get('returncode')}"
                + (f": {error}" if error else "")
            )
        return result


# Which waiting session gets the next free desktop (lower first): a candidate further along
# goes first, so the loop drains instead of every candidate queueing behind every
# proposer's look at the app (FIFO would make each stage wait for the whole queue).
PRIORITY = {"check": 0, "validate": 1, "observe": 2}


class _PriorityGate:
    """At most `slots` holders; waiters are served by (priority, arrival)."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._arrivals), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # granted as it was cancelled: pass the slot on
            else:
                self._waiters = [w for w in self._waiters if w[2] is not future]
                heapq.heapify(self._waiters)
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1


@dataclass(eq=False)
class _Session:
    session_id: str
    task: Task
    purpose: str
    stack: contextlib.AsyncExitStack
    controller: Any
    opened: float = field(default_factory=time.monotonic)
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _OpStats:
    count: int = 0
    total_ms: float = 0.0

    def add(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms


class Probe:
    """In-process probe over a desktop lease (a DesktopPool's `acquire`); see the package doc."""

    def __init__(
        self,
        lease: Callable[[], AbstractAsyncContextManager[Any]],
        *,
        desktops: int,
        idle_timeout_s: float = 300.0,
        max_session_s: float = 1800.0,
        setup_timeout_s: float = 180.0,
        evaluate_timeout_s: float = 180.0,
    ) -> None:
        self._lease = lease
        self.desktops = desktops
        self.idle_timeout_s = idle_timeout_s  # a worker that stopped talking loses its desktop
        self.max_session_s = max_session_s
        self.setup_timeout_s = setup_timeout_s
        self.evaluate_timeout_s = evaluate_timeout_s
        self._sessions: dict[str, _Session] = {}
        self._gate = _PriorityGate(desktops)
        self._lease_waits: list[float] = []  # ms, every lease so far
        self._ops: dict[str, _OpStats] = {}
        self.opened = 0
        self.expired = 0
        self.held_ms = 0.0  # desktop time lent out: closed sessions' lifetimes, summed
        self._reaper: asyncio.Task | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def with_pool(
        cls, desktops: int, *, root: Path | None = None, **kwargs: Any
    ) -> AsyncIterator[Probe]:
        """A probe over a pool of `desktops` warm desktops, with its idle-session reaper."""
        from runtime.envs.desktop.pool import DesktopPool

        async with DesktopPool(desktops, root=root) as pool:
            probe = cls(pool.acquire, desktops=desktops, **kwargs)
            probe.start()
            try:
                yield probe
            finally:
                await probe.shutdown()

    def start(self) -> None:
        """Start closing sessions idle for longer than idle_timeout_s."""
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())

    async def shutdown(self) -> None:
        """Close every session and stop the reaper."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for session_id in list(self._sessions):
            await self.close(session_id)

    # -- the API ------------------------------------------------------------------------
    async def open(self, task: dict[str, Any], *, purpose: str = "") -> SessionInfo:
        """Lease a fresh desktop and run the task's setup; a desktop that dies is retried once."""
        started = time.monotonic()
        parsed = session_task(task)  # TaskError: the caller sent a malformed task
        waited = 0.0
        last = ""
        for _attempt in range(2):
            session, wait_ms = await self._new_session(parsed, purpose)
            waited += wait_ms
            try:
                info = await self._setup(session, parsed)
            except _DesktopDied as exc:
                last = str(exc)
                await self.close(session.session_id)
                continue
            except BaseException:  # cancelled: the worker gave up or hung up; free the desktop
                await asyncio.shield(self.close(session.session_id))
                raise
            info.lease_wait_ms = waited
            if info.setup_error is not None:
                await self.close(session.session_id)
                info.session_id = ""
            info.server_ms = (time.monotonic() - started) * 1000
            self._op("open", info.server_ms - waited)
            return info
        return SessionInfo(
            "", f"{last} (twice)", lease_wait_ms=waited,
            server_ms=(time.monotonic() - started) * 1000,
        )  # fmt: skip

    async def _setup(self, session: _Session, task: Task) -> SessionInfo:
        """Run the setup; a bad step is the task's fault (setup_error), a dead desktop is not."""
        recorder = _SetupRecorder(session.controller)
        t0 = time.monotonic()
        error: str | None = None
        try:
            async with asyncio.timeout(self.setup_timeout_s):
                await run_setup(recorder, task)
        except TimeoutError:
            error = f"the setup did not finish within {self.setup_timeout_s:g} s"
        except TaskError as exc:
            error = str(exc)
        except DesktopError as exc:
            if not await self._healthy(session):
                raise _DesktopDied(f"the desktop died during setup: {exc}") from exc
            error = str(exc)  # the desktop refused a bad step (opening a missing file)
        return SessionInfo(
            session.session_id, error, recorder.failed, setup_ms=(time.monotonic() - t0) * 1000
        )

    async def observe(
        self, session_id: str, *, a11y: bool = True, screenshot: bool = False
    ) -> dict[str, Any]:
        """The screen as text (a11y elements and the terminal's last lines), optionally a PNG."""
        async with self._use(session_id, "observe") as (session, started):
            ctl = session.controller
            size = await ctl.screen_size()
            out: dict[str, Any] = {"size": list(size), "text": "", "screenshot": None}
            if a11y:
                tree, tail = await asyncio.gather(
                    ctl.accessibility_tree(), ctl.execute(_TERMINAL_TAIL, shell=True)
                )
                terminal = (tail.get("output") or "") if tail.get("returncode") == 0 else ""
                out["text"] = text_observation(
                    linearize_a11y(tree, size), terminal.encode() or None
                )
            if screenshot:
                out["screenshot"] = base64.b64encode(await ctl.screenshot()).decode()
            out["server_ms"] = (time.monotonic() - started) * 1000
            return out

    async def act(self, session_id: str, action: dict[str, Any]) -> dict[str, Any]:
        """Execute one action; returns ok, error, terminal, answer, output, action."""
        async with self._use(session_id, "act") as (session, started):
            try:
                result = await session.controller.step(action)
            except DesktopError as exc:
                if not await self._healthy(session):
                    raise
                # The desktop refused the action (write_file to a path it may not write).
                name = str(action.get("action", "")) if isinstance(action, dict) else ""
                result = StepResult(ok=False, error=str(exc), action=name)
            out = asdict(result)
            if isinstance(out["output"], bytes):  # a screenshot action: not JSON
                out["output"] = None
            out["server_ms"] = (time.monotonic() - started) * 1000
            return out

    async def evaluate(
        self,
        session_id: str,
        actions: list[dict[str, Any]],
        evaluator: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score the state: {"score", "reason", "funcs"} or {"task_error"} for a broken task."""
        async with self._use(session_id, "evaluate") as (session, started):
            task = session.task
            out: dict[str, Any]
            try:
                if evaluator is not None:
                    task = dataclasses.replace(task, evaluator=Evaluator.from_dict(evaluator))
                async with asyncio.timeout(self.evaluate_timeout_s):
                    evaluation = await evaluate(session.controller, task, list(actions))
                out = {**evaluation.to_dict(), "task_error": None}
            except TimeoutError:
                error = f"the evaluation did not finish within {self.evaluate_timeout_s:g} s"
                out = {"score": None, "reason": "", "funcs": [], "task_error": error}
            except TaskError as exc:
                out = {"score": None, "reason": "", "funcs": [], "task_error": str(exc)}
            out["server_ms"] = (time.monotonic() - started) * 1000
            return out

    async def close(self, session_id: str) -> None:
        """Give the session's desktop back to the pool (which resets it); idempotent."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        started = time.monotonic()
        async with session.lock:  # let an operation in flight finish first
            with contextlib.suppress(Exception):  # the pool replaces a desktop that is broken
                await session.stack.aclose()
        self._op("close", (time.monotonic() - started) * 1000)
        self.held_ms += (time.monotonic() - session.opened) * 1000

    def stats(self) -> dict[str, Any]:
        """Sessions, queue and lease waits (ms), and the mean time of each operation."""
        waits = sorted(self._lease_waits)
        return {
            "desktops": self.desktops,
            "sessions_open": len(self._sessions),
            "sessions_opened": self.opened,
            "sessions_expired": self.expired,
            "held_ms": round(self.held_ms, 1),
            "waiting": self._gate.waiting,
            "lease_wait_ms": _summary(waits),
            "ops": {
                k: {"count": v.count, "mean_ms": round(v.total_ms / max(1, v.count), 2)}
                for k, v in self._ops.items()
            },
        }

    # -- internals ----------------------------------------------------------------------
    async def _new_session(self, task: Task, purpose: str) -> tuple[_Session, float]:
        stack = contextlib.AsyncExitStack()
        t0 = time.monotonic()
        await self._gate.acquire(PRIORITY.get(purpose, 1))
        stack.callback(self._gate.release)  # runs last, once the desktop went back
        try:
            desktop = await stack.enter_async_context(self._lease())
        except BaseException:
            await stack.aclose()
            raise
        wait_ms = (time.monotonic() - t0) * 1000
        self._lease_waits.append(wait_ms)
        try:
            controller = await stack.enter_async_context(desktop.controller())
        except BaseException:
            await stack.aclose()
            raise
        session = _Session(uuid.uuid4().hex, task, purpose, stack, controller)
        self._sessions[session.session_id] = session
        self.opened += 1
        return session, wait_ms

    @contextlib.asynccontextmanager
    async def _use(self, session_id: str, op: str) -> AsyncIterator[tuple[_Session, float]]:
        session = self._sessions.get(session_id)
        if session is None:
            raise ProbeError(f"no session {session_id!r}: it was closed or expired")
        async with session.lock:
            started = time.monotonic()
            session.used = started
            try:
                yield session, started
            except DesktopError as exc:
                await self._drop(session)
                raise ProbeError(f"the desktop failed during {op}: {exc}") from exc
            finally:
                session.used = time.monotonic()
                self._op(op, (session.used - started) * 1000)

    async def _drop(self, session: _Session) -> None:
        """Forget a session whose desktop failed; its lease goes back (the pool replaces it)."""
        if self._sessions.pop(session.session_id, None) is not None:
            with contextlib.suppress(Exception):
                await session.stack.aclose()
            self.held_ms += (time.monotonic() - session.opened) * 1000

    async def _healthy(self, session: _Session) -> bool:
        try:
            health = await session.controller.health()
        except DesktopError:
            return False
        services = health.get("services", {}) if isinstance(health, dict) else {}
        return bool(services) and all(services.values())

    def _op(self, name: str, ms: float) -> None:
        self._ops.setdefault(name, _OpStats()).add(ms)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.idle_timeout_s / 2))
            now = time.monotonic()
            for session in list(self._sessions.values()):
                idle = now - session.used > self.idle_timeout_s and not session.lock.locked()
                if idle or now - session.opened > self.max_session_s:
                    log.warning("closing %s session %s: idle or over its time", session.purpose,
                                session.session_id)  # fmt: skip
                    self.expired += 1
                    await self.close(session.session_id)


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {
        "n": len(values),
        "mean": round(sum(values) / len(values), 2),
        "p50": round(values[len(values) // 2], 2),
        "p95": round(values[min(len(values) - 1, int(len(values) * 0.95))], 2),
        "max": round(values[-1], 2),
    }
