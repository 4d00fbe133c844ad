"""The console rules of every command that runs services in its own process (`up`, `eval`).

Each service's log lines go to its own file (`<folder>/<service>.log`, runtime/service_logs.py);
the console keeps the command's story for a person, and every warning or error one of our
services logs reaches it as one line naming the service. `-v` mirrors every line instead.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from runtime.service_logs import ServiceLogs, current_service

__all__ = ["ConsoleWarnings", "service_console"]

_OWN_LOGGERS = ("runtime", "consumers", "producers", "topics", "cli")


class ConsoleWarnings(logging.Handler):
    """Sends our services' warnings and errors to the console (their full logs go to files)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        """Say the record if it comes from scalecua's own code."""
        if not record.name.startswith(_OWN_LOGGERS):
            return
        where = current_service() or record.name.rsplit(".", 1)[-1]
        text = record.getMessage().splitlines()[0][:300]
        self.say(f"{record.levelname.lower()}: {where}: {text}")


@contextlib.contextmanager
def service_console(say: Callable[[str], None], verbose: bool, main: str) -> Iterator[ServiceLogs]:
    """Within the block, log lines go to their service's file (`main` for the command's own)
    and warnings and errors to `say`; with `verbose`, the console also keeps every line."""
    root = logging.getLogger()
    removed: list[logging.Handler] = []
    warnings = None
    if not verbose:
        removed = [h for h in root.handlers if type(h) is logging.StreamHandler]
        for handler in removed:
            root.removeHandler(handler)
        warnings = ConsoleWarnings(say)
        root.addHandler(warnings)
    try:
        with ServiceLogs(main=main) as logs:
            yield logs
    finally:
        if warnings is not None:
            root.removeHandler(warnings)
        for handler in removed:
            root.addHandler(handler)
