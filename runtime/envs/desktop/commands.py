"""Running commands for the desktop server: OSWorld's argv rules, timeouts, detached launches.

Everything runs with the desktop's environment and `cwd=/home/user` on the agent's side of
the desktop, as root inside, in its network (`enter`, the session's `enter`, is every
child's `preexec_fn`); a timed-out command is killed with its whole process group.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["HOME", "argv_of", "expand", "list_windows", "run", "spawn_detached"]

HOME = Path("/home/user")


def expand(path: str) -> str:
    """Expand ~ and $VARS in a path, as OSWorld's server does."""
    return os.path.expandvars(os.path.expanduser(path))


def argv_of(command: Any, shell: bool) -> Any:
    """Return what to run for an OSWorld command: a shell string, or an argv with ~/ expanded."""
    if shell:
        if not isinstance(command, str):
            if isinstance(command, list) and all(isinstance(c, str) for c in command):
                return shlex.join(command)
            raise ValueError("with shell=true, command must be a string")
        return command
    if isinstance(command, str):
        command = shlex.split(command)
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise ValueError("command must be a non-empty string or list of strings")
    return [os.path.expanduser(c) if c.startswith("~/") else c for c in command]


async def run(
    argv: Any,
    shell: bool,
    limit: float,
    env: dict[str, str],
    enter: Callable[[], None],
    cwd: str | None = None,
) -> dict:
    """Run a command to completion; return OSWorld's /execute shape."""
    options: dict[str, Any] = {
        "preexec_fn": enter,
        "stdin": asyncio.subprocess.DEVNULL,
        "stdout": asyncio.subprocess.PIPE,
        "stderr": asyncio.subprocess.PIPE,
        "env": env,
        "cwd": cwd or str(HOME),
        "start_new_session": True,
    }
    try:
        if shell:
            proc = await asyncio.create_subprocess_shell(argv, **options)
        else:
            proc = await asyncio.create_subprocess_exec(*argv, **options)
    except OSError as exc:
        return {"status": "error", "message": str(exc)}
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        # The whole process group: a shell's children must not outlive the timeout.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return {"status": "error", "message": f"command timed out after {limit:g} s"}
    return {
        "status": "success",
        "output": out.decode(errors="replace"),
        "error": err.decode(errors="replace"),
        "returncode": proc.returncode,
    }


async def spawn_detached(
    argv: Any, shell: bool, env: dict[str, str], enter: Callable[[], None]
) -> None:
    """Start a program in its own session, re-parented to the namespace's init (which reaps it)."""
    full = ["setsid", "-f", "/bin/sh", "-c", argv] if shell else ["setsid", "-f", *argv]
    proc = await asyncio.create_subprocess_exec(
        *full,
        preexec_fn=enter,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=str(HOME),
    )
    await proc.wait()


async def list_windows(
    env: dict[str, str], enter: Callable[[], None]
) -> list[tuple[str, str, str]]:
    """Return (id, WM_CLASS as "instance.class", title) of every window, from `wmctrl -lx`."""
    result = await run(["wmctrl", "-lx"], False, 10, env=env, enter=enter)
    # A WM_CLASS may hold spaces (Chromium's names its profile folder): the host column,
    # this machine's name, is what ends it.
    host = f" {os.uname().nodename} "
    windows = []
    for line in result.get("output", "").splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3:
            wm_class, _, title = parts[2].partition(host)
            windows.append((parts[0], wm_class.strip(), title))
    return windows
