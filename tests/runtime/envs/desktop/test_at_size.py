"""What many desktops on one host must not do to it (issue 32, found by bench/density.py).

Per-user kernel budgets: the kernel charges what runs in a user namespace (inotify instances
and watches, user namespaces, pending signals) to the namespace's owner on the host as well.
Owned by host root, all desktops shared root's `fs.inotify.max_user_instances` (128): 64
plain desktops spent it with their two dbus daemons, and the apps of every further desktop
got no inotify. Each desktop's namespace is now owned by its own ids.

CPU: outside a cpu cgroup the kernel's autogroup gives every session an equal share, and
each desktop (each session its agent makes, too) was one: with 48 Chromium desktops the
rollout worker's event loop woke 6 s late and the broker expelled it from its group. The
desktops now share one cpu group that weighs as much as one session of the host's.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import time
from pathlib import Path

import pytest

from runtime.envs.desktop.lifecycle import Desktop

pytestmark = pytest.mark.desktop

_NS_GET_OWNER_UID = 0xB704  # ioctl on a /proc/PID/ns/user descriptor
# Holds N inotify instances for a few seconds and prints how many it got.
_HOLD = (
    "import ctypes, sys, time; libc = ctypes.CDLL(None, use_errno=True); "
    "fds = [libc.inotify_init() for _ in range(int(sys.argv[1]))]; "
    "print(sum(fd >= 0 for fd in fds), flush=True); time.sleep(3)"
)


def _owner(pid: int) -> int | None:
    """The host uid owning the user namespace of `pid` (None if it is gone)."""
    try:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    except OSError:
        return None
    try:
        return struct.unpack("I", fcntl.ioctl(fd, _NS_GET_OWNER_UID, b"\0" * 4))[0]
    finally:
        os.close(fd)


def _servers(desktop: Desktop) -> list[int]:
    """Host pids of the desktop's server: the process with its id in its arguments that lives
    in a user namespace below the host's (`unshare` and init, which have it too, do not)."""
    host = os.readlink("/proc/self/ns/user")
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ns = os.readlink(f"/proc/{pid}/ns/user")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if ns != host and f"--id\0{desktop.desktop_id}\0".encode() in cmdline:
            pids.append(int(pid))
    return pids


def _inotify_instances_per_user() -> int:
    """The host's fs.inotify.max_user_instances."""
    return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())


async def test_a_desktops_user_namespace_is_owned_by_its_own_ids(desktop: Desktop) -> None:
    servers = await asyncio.to_thread(_servers, desktop)
    assert servers, "the desktop's server was not found"
    # The block's last id: root of the server's namespace, as init maps it.
    assert {_owner(pid) for pid in servers} == {desktop.uid + 65535}


async def test_desktops_do_not_share_roots_inotify_budget(desktop_root: Path) -> None:
    limit = _inotify_instances_per_user()
    if limit > 512:
        pytest.skip(f"fs.inotify.max_user_instances is {limit}: no small budget to share")
    # Together more than one user's budget, each well within its own (dbus holds two).
    each = limit // 2 + 4
    async with Desktop.started(root=desktop_root) as a, Desktop.started(root=desktop_root) as b:
        async with a.controller() as ca, b.controller() as cb:
            held = await asyncio.gather(
                *(c.execute(["python3", "-c", _HOLD, str(each)], timeout=60) for c in (ca, cb))
            )
    assert [int(h["output"].strip()) for h in held] == [each, each], held


def _cpu_share(seconds: float) -> float:
    """The share of one core this thread gets when it asks for all of it for `seconds`."""
    started, cpu = time.monotonic(), time.thread_time()
    while time.monotonic() - started < seconds:
        sum(range(1000))
    return (time.thread_time() - cpu) / (time.monotonic() - started)


async def test_an_agents_busy_sessions_leave_the_host_its_share(desktop_root: Path) -> None:
    # 40 sessions spinning, each its own autogroup were the desktop not in a cpu group: the
    # host's thread then got 2 cores / 42 sessions (0.04 measured); now about half a core or
    # more (0.73 measured; other programs' sessions on the host take their shares too).
    spin = "for i in $(seq 40); do setsid sh -c 'while :; do :; done' >/dev/null 2>&1 & done"
    async with Desktop.started(root=desktop_root) as d, d.controller() as ctl:
        assert (await ctl.execute(spin, shell=True))["returncode"] == 0
        await asyncio.sleep(1.0)
        share = await asyncio.to_thread(_cpu_share, 2.0)
        group = _cpu_group(_servers(d)[0])
    assert share > 0.2, share
    assert group.parent.name == "scalecua" and not group.exists()  # stopping removed it


def _cpu_group(pid: int) -> Path:
    """The v1 `cpu` cgroup folder of a process (skips the test where there is none)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "cpu" in names.split(","):
            return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
    pytest.skip("no v1 cpu controller here")
