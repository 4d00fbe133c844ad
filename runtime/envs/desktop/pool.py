"""A pool that keeps N desktops warm and hands each out freshly reset.

    async with DesktopPool(4) as pool:
        async with pool.acquire() as desktop:
            async with desktop.controller() as ctl:
                ...

A desktop is reset when it comes back (in the background, so the next `acquire` does not
wait for it); one that fails to reset or has died is stopped and replaced by a new one.
Desktops are native (host namespaces, lifecycle.py) or Docker containers (docker.py), by
`kind` or else `$SCALECUA_DESKTOPS_KIND`; both serve the same API and reset the same way.

A replacement that fails to start (the Docker daemon gone, the machine out of memory) is
retried with a doubling wait, at most `retry_max_s` apart, for as long as the pool is open:
each failure is a warning naming its cause, `healthy` is False and `stats()` counts the
missing desktops until every one is back, and `acquire` then hands them out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.envs.desktop.lifecycle import Desktop
from runtime.errors import ConfigError, DesktopError

__all__ = [
    "DesktopPool",
    "KINDS",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "START_CONCURRENCY",
    "desktop_provider",
    "desktops_kind",
    "use_desktops_kind",
]

if TYPE_CHECKING:
    from runtime.envs.desktop.docker import DockerDesktop

log = logging.getLogger(__name__)

START_CONCURRENCY = 4  # desktops booting at once: each boot is a burst of CPU
RETRY_FIRST_S = 1.0  # wait before retrying a replacement desktop that failed to start
RETRY_MAX_S = 30.0  # the longest wait between retries (the wait doubles up to it)
KINDS = ("native", "docker")


def desktops_kind(kind: str | None = None) -> str:
    """The desktop provider to use: `kind`, else $SCALECUA_DESKTOPS_KIND, else native."""
    kind = kind or os.environ.get("SCALECUA_DESKTOPS_KIND") or "native"
    if kind not in KINDS:
        raise ConfigError(f"unknown desktops kind {kind!r}: one of {', '.join(KINDS)}")
    return kind


def use_desktops_kind(kind: str | None) -> None:
    """Make `kind`, when given, the default desktop provider of this process and its children."""
    if kind:
        os.environ["SCALECUA_DESKTOPS_KIND"] = desktops_kind(kind)


def desktop_provider(kind: str | None = None) -> type[Desktop] | type[DockerDesktop]:
    """The class whose `start()`/`started()` make desktops of `kind` (see `desktops_kind`)."""
    if desktops_kind(kind) == "docker":
        from runtime.envs.desktop.docker import DockerDesktop

        return DockerDesktop
    return Desktop


class DesktopPool:
    """Keeps `size` desktops warm; `acquire()` lends one out, reset, and takes it back."""

    def __init__(
        self,
        size: int,
        *,
        width: int = 1280,
        height: int = 800,
        root: Path | None = None,
        kind: str | None = None,
        retry_first_s: float = RETRY_FIRST_S,
        retry_max_s: float = RETRY_MAX_S,
    ) -> None:
        if size < 1:
            raise DesktopError(f"a desktop pool needs at least one desktop, not {size}")
        self.size = size
        self.kind = desktops_kind(kind)
        self.retry_first_s = retry_first_s
        self.retry_max_s = retry_max_s
        self.start_failures = 0  # replacement starts that failed (each was retried)
        self.last_error: str | None = None  # why the latest start failed
        self._provider = desktop_provider(self.kind)
        self._start_kwargs = {"width": width, "height": height, "root": root}
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        self._all: set[Any] = set()
        self._tasks: set[asyncio.Task] = set()
        self._boot = asyncio.Semaphore(START_CONCURRENCY)
        self._failing = 0  # replacements waiting to retry a failed start
        self._closed = False

    async def start(self) -> DesktopPool:
        """Start every desktop; raise DesktopError (after stopping the rest) if one fails."""
        results = await asyncio.gather(
            *(self._new() for _ in range(self.size)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        for desktop in results:
            if not isinstance(desktop, BaseException):
                self._idle.put_nowait(desktop)
        if errors:
            await self.close()
            raise DesktopError(f"{len(errors)} of {self.size} desktops failed: {errors[0]}")
        return self

    async def __aenter__(self) -> DesktopPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def desktops(self) -> list[Desktop]:
        """Every desktop of the pool, idle or lent out."""
        return list(self._all)

    @property
    def idle(self) -> int:
        """How many desktops are ready to hand out now."""
        return self._idle.qsize()

    @property
    def healthy(self) -> bool:
        """Whether no desktop is missing because starting its replacement keeps failing."""
        return self._failing == 0

    def stats(self) -> dict[str, float]:
        """The pool's health for a service's metrics: desktops held, idle, failing to start."""
        return {
            "desktops": len(self._all),
            "desktops_idle": self.idle,
            "desktops_failing": self._failing,
            "desktop_start_failures": self.start_failures,
            "desktops_healthy": int(self.healthy),
        }

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Desktop]:
        """Lend a freshly reset desktop for one episode; it is reset again when returned."""
        if self._closed:
            raise DesktopError("the desktop pool is closed")
        desktop = await self._idle.get()
        try:
            yield desktop
        finally:
            task = asyncio.create_task(self._recycle(desktop))
            self._tasks.add(task)
            task.add_done_callback(self._recycled)

    async def close(self) -> None:
        """Stop every desktop, including ones still lent out."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(d.stop() for d in list(self._all)), return_exceptions=True)
        self._all.clear()

    async def _new(self) -> Desktop:
        async with self._boot:
            desktop = await self._provider.start(**self._start_kwargs)  # type: ignore[arg-type]
        self._all.add(desktop)
        return desktop

    def _recycled(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A bug, not a failed start (those are retried): say so, never drop it silently.
            exc = task.exception()
            log.error("recycling a desktop failed; the pool is one desktop short: %r", exc,
                      exc_info=exc)  # fmt: skip

    async def _recycle(self, desktop: Desktop) -> None:
        if self._closed:
            return
        try:
            await desktop.reset()
        except (DesktopError, OSError) as exc:
            log.warning("desktop %s failed to reset (%s); replacing it", desktop.desktop_id, exc)
            self._all.discard(desktop)
            await desktop.stop()
            replacement = await self._replacement()
            if replacement is None:
                return
            desktop = replacement
        if self._closed:
            await desktop.stop()
            return
        self._idle.put_nowait(desktop)

    async def _replacement(self) -> Desktop | None:
        """A new desktop, retried with a doubling wait while starting fails; None once closed."""
        wait = self.retry_first_s
        failures = 0
        try:
            while not self._closed:
                try:
                    desktop = await self._new()
                except Exception as exc:  # noqa: BLE001 - every failed start is retried
                    self.start_failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    failures += 1
                    if failures == 1:
                        self._failing += 1
                    log.warning("a replacement %s desktop failed to start (%s); retrying in "
                                "%.3g s, %d of %d desktops missing", self.kind, self.last_error,
                                wait, self._failing, self.size)  # fmt: skip
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, self.retry_max_s)
                    continue
                if failures:
                    log.info("a replacement %s desktop started after %d failed tries; "
                             "%d of %d desktops missing now", self.kind, failures,
                             self._failing - 1, self.size)  # fmt: skip
                return desktop
            return None
        finally:
            if failures:
                self._failing -= 1
