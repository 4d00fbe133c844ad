"""The `scalecua` program runs with two malloc arenas (threads' arenas kept freed tensors)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import os; print(os.environ.get('MALLOC_ARENA_MAX'))"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def test_the_process_is_run_again_with_two_arenas_unless_they_are_set() -> None:
    code = f"from runtime.process_memory import few_malloc_arenas; few_malloc_arenas(); {SHOW}"
    run = subprocess.run([sys.executable, "-c", code, "an-argument"], env=_env(),
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert run.stdout.split() == ["2"]
    chosen = subprocess.run([sys.executable, "-c", code], env=_env(MALLOC_ARENA_MAX="4"),
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert chosen.stdout.split() == ["4"]  # an operator's own choice stays


def test_python_dash_m_runtime_cli_survives_the_re_execution() -> None:
    run = subprocess.run([sys.executable, "-m", "cli", "--help"], env=_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "scalecua" in run.stdout
