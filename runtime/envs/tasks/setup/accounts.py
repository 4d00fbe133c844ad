"""Setup steps that need an online account (see runtime.envs.tasks.accounts): they raise
`AccountRequired` naming the account, before touching the desktop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.envs.tasks.accounts import account_error
from runtime.envs.tasks.setup.step import Step

__all__ = ["STEPS"]


async def _googledrive(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    raise account_error("setup step", "googledrive")


async def _login(controller: Any, params: dict[str, Any], base_dir: Path | None) -> None:
    raise account_error("setup step", "login")


STEPS: dict[str, Step] = {"googledrive": _googledrive, "login": _login}
