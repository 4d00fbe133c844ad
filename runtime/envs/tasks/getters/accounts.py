"""Getters that need an online account (see runtime.envs.tasks.accounts): they raise
`AccountRequired` naming the account."""

from __future__ import annotations

from typing import Any

from runtime.envs.tasks.accounts import account_error
from runtime.envs.tasks.getters.context import EvalContext, Getter

__all__ = ["GETTERS", "get_googledrive_file"]


async def get_googledrive_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """Refused: downloading from Google Drive needs the task's Google account."""
    raise account_error("getter", "googledrive_file")


GETTERS: dict[str, Getter] = {"googledrive_file": get_googledrive_file}
