"""The shape of a setup step handler: `await step(controller, parameters, task_folder)`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["Step"]

Step = Callable[[Any, dict[str, Any], Path | None], Awaitable[None]]
