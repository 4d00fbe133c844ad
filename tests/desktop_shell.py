"""Waiting on a desktop in tests: until a shell check run inside it succeeds."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["until_shell"]


async def until_shell(controller: Any, check: str, timeout: float = 60.0) -> bool:  # noqa: ASYNC109
    """Whether the shell `check` succeeds on the desktop within `timeout` s (tried every 0.25 s)."""
    for _ in range(int(timeout / 0.25)):
        if (await controller.execute(check, shell=True)).get("returncode") == 0:
            return True
        await asyncio.sleep(0.25)
    return False
