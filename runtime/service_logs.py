"""Log records by the service that wrote them, for processes that run many services at once.

`scalecua up` runs every service of the loop in one process. Each service's work runs in
asyncio tasks (and threads started from them) that carry the service's name in a context
variable (`as_service`, which the service runner sets for its own task), so a handler can
send each record to that service's file and keep the console for people.

    with ServiceLogs() as logs:        # records wait in memory until a folder is known
        logs.open(run_dir / "logs")    # <dir>/<service>.log, up.log for the rest
        ...
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Self

__all__ = ["ServiceLogs", "as_service", "current_service", "child_log_path"]

_SERVICE: ContextVar[str | None] = ContextVar("scalecua_service", default=None)
_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@contextlib.contextmanager
def as_service(name: str) -> Iterator[None]:
    """Attribute what is logged inside the block (and tasks started in it) to service `name`."""
    token = _SERVICE.set(name)
    try:
        yield
    finally:
        _SERVICE.reset(token)


def current_service() -> str | None:
    """The service the running code belongs to, if one was named."""
    return _SERVICE.get()


def child_log_path(child: str) -> Path | None:
    """The file where a child process of the running service should write (None: its own
    stderr), `<folder>/<service>-<child>.log` when a `ServiceLogs` handler is installed."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, ServiceLogs) and handler.folder is not None:
            handler.folder.mkdir(parents=True, exist_ok=True)
            return handler.folder / f"{current_service() or handler.main}-{child}.log"
    return None


class ServiceLogs(logging.Handler):
    """A root log handler writing each record to `<folder>/<service>.log` (else `main`)."""

    def __init__(self, folder: Path | None = None, main: str = "up",
                 level: int = logging.DEBUG) -> None:  # fmt: skip
        super().__init__(level)
        self.folder = folder
        self.main = main
        self.setFormatter(logging.Formatter(_FORMAT))
        self._files: dict[str, logging.FileHandler] = {}
        self._early: list[tuple[str, logging.LogRecord]] = []  # before the folder is known

    def open(self, folder: Path) -> None:
        """Start writing to `folder` (what was logged before goes there first)."""
        self.folder = folder
        early, self._early = self._early, []
        for name, record in early:
            self._write(name, record)

    def path(self, service: str | None = None) -> Path | None:
        """The file a service's records go to (None until a folder is known)."""
        return None if self.folder is None else self.folder / f"{service or self.main}.log"

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record to its service's file."""
        name = _SERVICE.get() or self.main
        if self.folder is None:
            self._early.append((name, record))
        else:
            self._write(name, record)

    def _write(self, name: str, record: logging.LogRecord) -> None:
        handler = self._files.get(name)
        if handler is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(self.folder / f"{name}.log", encoding="utf-8")
            handler.setFormatter(self.formatter)
            self._files[name] = handler
        handler.emit(record)

    def close(self) -> None:
        """Close every file."""
        for handler in self._files.values():
            handler.close()
        self._files.clear()
        super().close()

    def __enter__(self) -> Self:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
        self.close()
