"""Fixtures for the task tests: real desktops (one alone, and a pool of three)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.envs.desktop.lifecycle import Desktop
from runtime.envs.desktop.pool import DesktopPool


@pytest.fixture(scope="module")
def task_desktop_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The state folder of the desktops these tests start."""
    return tmp_path_factory.mktemp("task-desktops")


@pytest.fixture(scope="module")
async def task_desktop(task_desktop_root: Path) -> AsyncIterator[Desktop]:
    """One real desktop for a test module."""
    async with Desktop.started(root=task_desktop_root) as desktop:
        yield desktop


@pytest.fixture(scope="module")
async def task_pool(task_desktop_root: Path) -> AsyncIterator[DesktopPool]:
    """Three warm desktops, reset between tasks (the pool test mostly waits on its apps: three
    take a third off its time for the CPU two used: 142 s -> 97 s alone)."""
    async with DesktopPool(3, root=task_desktop_root) as pool:
        yield pool
