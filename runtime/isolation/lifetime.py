"""A child process that cannot outlive the process that started it.

A parent killed with SIGKILL (the OOM killer, `kill -9`) runs no clean-up, so children it
started in their own session (desktops, the embedded broker) would keep running: an
interrupted bench once left a broker behind. The kernel's parent-death signal ends them.
"""

from __future__ import annotations

import ctypes
import signal

__all__ = ["alive", "die_with_parent"]

_PR_SET_PDEATHSIG = 1
# Looked up once, in the parent: a child forked from a threaded process calls it before
# exec, where a symbol lookup (the dynamic loader's lock) is best avoided.
_prctl = ctypes.CDLL(None).prctl


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (call in a child before exec).

    The kernel watches the thread that forked, so start such children from a thread that
    lives as long as they should (the event loop's).
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited and not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"
