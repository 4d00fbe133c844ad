"""A cgroup (v1 `memory` + `pids`, or v2) that caps a whole process tree.

rlimits are per process (six processes at 512 MiB each pass a 1 GiB `RLIMIT_AS`) and root
ignores `RLIMIT_NPROC`; a cgroup caps the sum over every process put in it, and children
inherit it, so a tree cannot escape. Groups are created under the caller's own cgroup,
so whatever limits the caller already has still apply above them.

Where the `cpu` controller is available the group joins it too, under one `scalecua` parent
of the default weight: when the CPU is contended, all the groups together get the share of
one session of the host (of the caller's own processes, when the caller has a cgroup of its
own, as a systemd service has) and use whatever the rest leave idle. Outside a cpu group
the kernel's autogroup schedules each session as an equal — a desktop is one, and so is
every session its agent makes with `setsid` — so busy desktops left their caller a sliver
of the CPU: at 48 Chromium desktops on 2 cores a rollout worker's event loop woke 6 s late
and the broker expelled it from its consumer group; an agent's 40 spinning sessions left the
host 4% of a core.

    cg = Cgroup.create("judge-1234", memory_bytes=1 << 30, pids=64)
    cg.add(pid)            # before the process starts the untrusted code
    ...
    cg.oom_killed()        # did the kernel kill something for memory?
    cg.destroy()           # kill what is left and remove the group
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import InfrastructureError

log = logging.getLogger(__name__)

__all__ = ["Cgroup", "CgroupError"]

_ROOT = Path("/sys/fs/cgroup")


class CgroupError(InfrastructureError):
    """The cgroup could not be created or configured on this machine."""


def _own_path(controller: str) -> str:
    """Return the caller's cgroup path in a v1 controller's hierarchy ('' for v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path.lstrip("/")
    return ""


def _v2() -> bool:
    return (_ROOT / "cgroup.controllers").exists()


def _v1_cpu_group(name: str) -> list[Path]:
    """The group's folder in the v1 `cpu` hierarchy, made; none where there is no such
    controller or it is not the caller's to write (a container's read-only mount)."""
    cpu = _ROOT / "cpu"
    if not (cpu / "cgroup.procs").exists():
        return []
    d = cpu / _own_path("cpu") / "scalecua" / name
    try:
        d.mkdir(parents=True)
    except OSError as exc:
        if not _warned:
            _warned.append(True)
            log.warning("no cpu cgroups (%s): sandboxes share the CPU as sessions do", exc)
        return []
    return [d]


_warned: list[bool] = []  # said once per process that there are no cpu groups


@dataclass
class Cgroup:
    """One group per controller folder; every folder gets the same processes."""

    name: str
    dirs: list[Path]
    memory_dir: Path
    pids_dir: Path

    @classmethod
    def create(cls, name: str, *, memory_bytes: int, pids: int) -> Cgroup:
        """Create the group with its caps (swap counted with memory where possible)."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"bad cgroup name {name!r}")
        try:
            if _v2():
                base = _ROOT / _own_path("") / "scalecua"
                base.mkdir(exist_ok=True)
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+memory +pids")
                with contextlib.suppress(OSError):  # only where the cpu controller is delegated
                    (base / "cgroup.subtree_control").write_text("+cpu")
                d = base / name
                d.mkdir()
                (d / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(pids))
                return cls(name, [d], d, d)
            mem = _ROOT / "memory" / _own_path("memory") / "scalecua" / name
            pid = _ROOT / "pids" / _own_path("pids") / "scalecua" / name
            mem.mkdir(parents=True)
            pid.mkdir(parents=True)
            group = cls(name, [mem, pid, *_v1_cpu_group(name)], mem, pid)
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (pid / "pids.max").write_text(str(pids))
            return group
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {name}: {exc}") from exc

    def add(self, pid: int) -> None:
        """Move a process (and so its future children) into the group."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """Return the processes in the group now."""
        text = (self.pids_dir / "cgroup.procs").read_text()
        return [int(p) for p in text.split()]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for its memory cap."""
        with contextlib.suppress(OSError):
            if (self.memory_dir / "memory.events").exists():  # v2
                for line in (self.memory_dir / "memory.events").read_text().splitlines():
                    key, value = line.split()
                    if key == "oom_kill" and int(value) > 0:
                        return True
                return False
            for line in (self.memory_dir / "memory.oom_control").read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill" and int(value) > 0:
                    return True
            return int((self.memory_dir / "memory.failcnt").read_text()) > 0
        return False

    def kill_all(self, patience_s: float = 5.0) -> None:
        """SIGKILL every process in the group until it is empty (a fork loop included)."""
        deadline = time.monotonic() + patience_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)

    def destroy(self) -> None:
        """Kill what is left and remove the group's folders (idempotent)."""
        with contextlib.suppress(FileNotFoundError):
            self.kill_all()
        for d in self.dirs:
            for _ in range(100):  # rmdir fails while the last killed task is still exiting
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
