"""A pool that keeps N desktops warm and hands each out freshly reset.

    async with DesktopPool(4) as pool:
        async with pool.acquire() as desktop:
            async with desktop.controller() as ctl:
                ...

A desktop is reset when it comes back (in the background, so the next `acquire` does not
wait for it); one that fails to reset or has died is stopped and replaced by a new one.
Desktops are native (host namespaces, lifecycle.py) or Docker containers (docker.py), by
`kind` or else `$SCALECUA_DESKTOPS_KIND`; both serve the same API and reset the same way.
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

if TYPE_CHECKING:
    from runtime.envs.desktop.docker import DockerDesktop

log = logging.getLogger(__name__)

START_CONCURRENCY = 4  # desktops booting at once: each boot is a burst of CPU
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
    ) -> None:
        if size < 1:
            raise DesktopError(f"a desktop pool needs at least one desktop, not {size}")
        self.size = size
        self.kind = desktops_kind(kind)
        self._provider = desktop_provider(self.kind)
        self._start_kwargs = {"width": width, "height": height, "root": root}
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        self._all: set[Any] = set()
        self._tasks: set[asyncio.Task] = set()
        self._boot = asyncio.Semaphore(START_CONCURRENCY)
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
            task.add_done_callback(self._tasks.discard)

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

    async def _recycle(self, desktop: Desktop) -> None:
        if self._closed:
            return
        try:
            await desktop.reset()
        except (DesktopError, OSError) as exc:
            log.warning("desktop %s failed to reset (%s); replacing it", desktop.desktop_id, exc)
            self._all.discard(desktop)
            await desktop.stop()
            while not self._closed:
                try:
                    desktop = await self._new()
                    break
                except DesktopError as start_exc:
                    log.error("replacement desktop failed to start: %s", start_exc)
                    await asyncio.sleep(1.0)
            else:
                return
        if self._closed:
            await desktop.stop()
            return
        self._idle.put_nowait(desktop)
