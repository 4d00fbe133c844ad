"""`scalecua broker` as a process of its own, for tests that stop and restart the broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCALECUA = [sys.executable, "-m", "cli"]


def start_broker(port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start `scalecua broker` on `port` (its stderr appended to `log`) and wait until it serves."""
    proc = subprocess.Popen(
        [*SCALECUA, "broker", "--port", str(port)], env=env, stdout=subprocess.PIPE,
        stderr=open(log, "a"), text=True, start_new_session=True,  # noqa: SIM115
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == f"127.0.0.1:{port}", (proc.wait(10), log.read_text()[-3000:])
    return proc
