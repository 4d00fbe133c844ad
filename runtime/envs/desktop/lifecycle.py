"""Start, reset and stop one isolated desktop from the host side.

A desktop is a process tree in its own PID and mount namespace, and below init in user
namespaces mapped onto an unprivileged host uid block leased for the desktop:

    unshare --mount --pid --fork --mount-proc --kill-child=SIGKILL        (host root)
      └─ init.py (PID 1: /home/user, private /tmp..., reaps orphans)      (host root)
           └─ server.py (HTTP on 127.0.0.1:PORT)          (host uid `Desktop.uid` + 65535)
                └─ Xvfb, dbus, AT-SPI, openbox, apps...  (the agent's user namespace and
                                                          network: uid 0 inside = host uid
                                                          `Desktop.uid`)

The whole tree sits in a cgroup that caps its memory and its number of tasks. The host
keeps the home folder (`Desktop.home`, seen inside as /home/user and owned by
`Desktop.uid`) and talks to the server over HTTP with a per-desktop token. Stopping asks
the server to shut its services down (SIGTERM through init); if that hangs, killing
`unshare` kills init, and the kernel kills everything left in the namespace. If the host
process dies, the same chain runs (PR_SET_PDEATHSIG on `unshare`), so no desktop outlives
its owner.

    async with Desktop.started() as desktop:          # or: desktop = await Desktop.start()
        async with desktop.controller() as ctl:
            await ctl.step({"action": "left_click", "coordinate": [500, 500]})
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from runtime.envs.desktop.controller import DesktopController
from runtime.errors import DesktopError
from runtime.isolation.cgroup import Cgroup, CgroupError
from runtime.isolation.ids import DESKTOP_UIDS, IdLease, lease_ids
from runtime.isolation.lifetime import die_with_parent

__all__ = [
    "DEFAULT_MEMORY_BYTES",
    "DEFAULT_PIDS",
    "DEFAULT_ROOT",
    "Desktop",
    "ID_COUNT",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
]

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path(os.environ.get("SCALECUA_DESKTOP_ROOT", "/tmp/scalecua-desktops"))
START_TIMEOUT = 60.0  # seconds for a desktop to report ready
STOP_TIMEOUT = 10.0  # seconds for a graceful stop before the namespace is killed
# Caps on a whole desktop (apps included): LibreOffice with a document takes ~300 MiB and
# ~60 tasks (threads count), so these leave room for several apps at once.
DEFAULT_MEMORY_BYTES = int(os.environ.get("SCALECUA_DESKTOP_MEMORY_MB", "2048")) << 20
DEFAULT_PIDS = int(os.environ.get("SCALECUA_DESKTOP_PIDS", "512"))
ID_COUNT = 65536  # ids per desktop: a user namespace's worth, as rootless containers take
_INIT = Path(__file__).with_name("init.py")
# The server imports `runtime` from the folder this process did, even when that folder was
# only on this process's path through its working directory: the folder goes first on the
# server's own path (not into its environment, which the desktop's apps inherit), and -P
# keeps its working directory, /home/user, which the agent writes, off the path.
_SOURCE = Path(__file__).resolve().parents[3]
_SERVER = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module('runtime.envs.desktop.server', run_name='__main__', alter_sys=True)"
)


class Desktop:
    """One isolated desktop: Xvfb 1280x800x24 + dbus/AT-SPI + openbox + own /home/user + server."""

    def __init__(
        self,
        *,
        desktop_id: str,
        state_dir: Path,
        proc: asyncio.subprocess.Process,
        base_url: str,
        token: str,
        display: str,
        size: tuple[int, int],
        lease: IdLease,
        cgroup: Cgroup,
    ) -> None:
        self.desktop_id = desktop_id
        self.state_dir = state_dir
        self.home = state_dir / "home"  # the host folder this desktop sees as /home/user
        self.uid = lease.first  # the host uid (and gid) that is root inside; owns the home
        self.base_url = base_url
        self.token = token
        self.display = display
        self.size = size
        self._proc = proc
        self._lease = lease
        self._cgroup = cgroup
        self._stopped = False

    def __repr__(self) -> str:
        return f"Desktop(id={self.desktop_id}, display={self.display}, url={self.base_url})"

    @classmethod
    async def start(
        cls,
        *,
        width: int = 1280,
        height: int = 800,
        root: Path | None = None,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        pids: int = DEFAULT_PIDS,
    ) -> Desktop:
        """Start a desktop and return it once its server answers; raise DesktopError.

        `memory_bytes` and `pids` cap the whole desktop (defaults: 2 GiB and 512 tasks,
        or `SCALECUA_DESKTOP_MEMORY_MB` / `SCALECUA_DESKTOP_PIDS`).
        """
        if not shutil.which("unshare") or not shutil.which("Xvfb"):
            raise DesktopError(
                "desktops need util-linux `unshare` and `Xvfb`: run infra/install.sh"
            )
        root = (root or DEFAULT_ROOT).resolve()
        desktop_id = uuid.uuid4().hex[:12]
        state_dir = root / desktop_id
        home = state_dir / "home"
        try:
            lease = lease_ids(DESKTOP_UIDS, count=ID_COUNT)
        except (RuntimeError, OSError) as exc:
            raise DesktopError(f"no host uid block for a desktop: {exc}") from exc
        try:
            cgroup = Cgroup.create(f"desktop-{desktop_id}", memory_bytes=memory_bytes, pids=pids)
        except CgroupError as exc:
            lease.release()
            raise DesktopError(f"desktops need cgroup memory and pids controllers: {exc}") from exc
        try:
            proc, ready = await _launch(state_dir, home, root, lease.first, cgroup, width, height)
        except BaseException:
            await asyncio.to_thread(cgroup.destroy)
            lease.release()
            await asyncio.to_thread(shutil.rmtree, state_dir, True)
            raise
        desktop = cls(
            desktop_id=desktop_id,
            state_dir=state_dir,
            proc=proc,
            base_url=f"http://127.0.0.1:{ready['port']}",
            token=ready["token"],
            display=ready["display"],
            size=(ready["width"], ready["height"]),
            lease=lease,
            cgroup=cgroup,
        )
        log.info("desktop %s up on %s at %s", desktop_id, desktop.display, desktop.base_url)
        return desktop

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, **kwargs: object) -> AsyncIterator[Desktop]:
        """`async with Desktop.started() as d:` starts a desktop and stops it on exit."""
        desktop = await cls.start(**kwargs)  # type: ignore[arg-type]
        try:
            yield desktop
        finally:
            await desktop.stop()

    async def __aenter__(self) -> Desktop:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def controller(self, **kwargs: object) -> DesktopController:
        """Return a new controller for this desktop (close it, or use `async with`)."""
        return DesktopController(self.base_url, self.token, **kwargs)  # type: ignore[arg-type]

    @property
    def alive(self) -> bool:
        """Whether the desktop's process tree is still running."""
        return self._proc.returncode is None and not self._stopped

    def memory(self) -> dict[str, int]:
        """Bytes of memory of every process of the desktop, server included: `pss` (shared
        pages split among their users, so other desktops move it) and `uss` (its own alone)."""
        total = {"pss": 0, "uss": 0}
        for pid in self._cgroup.pids():
            with contextlib.suppress(OSError):  # a process that just ended
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    name, _, value = line.partition(":")
                    if name == "Pss":
                        total["pss"] += int(value.split()[0]) * 1024
                    elif name in ("Private_Clean", "Private_Dirty"):
                        total["uss"] += int(value.split()[0]) * 1024
        return total

    async def reset(self) -> None:
        """Close every app and window and restore the home skeleton; services stay warm."""
        if not self.alive:
            raise DesktopError(f"desktop {self.desktop_id} is not running")
        async with self.controller(timeout=30.0, retries=1) as ctl:
            await ctl.reset_desktop()

    async def stop(self) -> None:
        """Stop the desktop and delete its state folder; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self._proc.returncode is None:
            # init forwards SIGTERM to the server, which stops its services (Xvfb last).
            init_pid = _child_pid(self._proc.pid)
            if init_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init_pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                log.warning("desktop %s did not stop in time; killing it", self.desktop_id)
                await _kill(self._proc)
        await asyncio.to_thread(self._cgroup.destroy)
        # Only now that no process runs under its ids may the block go to another desktop.
        self._lease.release()
        await asyncio.to_thread(shutil.rmtree, self.state_dir, True)


async def _launch(
    state_dir: Path,
    home: Path,
    root: Path,
    uid: int,
    cgroup: Cgroup,
    width: int,
    height: int,
) -> tuple[asyncio.subprocess.Process, dict]:
    """Start the namespace (init, then the server) in `cgroup`; return it and its ready line."""
    await asyncio.to_thread(_make_state_dir, state_dir, home, uid)
    token = secrets.token_urlsafe(24)
    argv = [
        "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
        "--kill-child=SIGKILL",
        sys.executable, str(_INIT), "--home", str(home), "--hide", str(root),
        "--uid", str(uid), "--count", str(ID_COUNT), "--",
        sys.executable, "-P", "-c", _SERVER, str(_SOURCE), "--id", state_dir.name,
        "--width", str(width), "--height", str(height),
    ]  # fmt: skip
    log_path = state_dir / "desktop.log"
    env = {**os.environ, "SCALECUA_DESKTOP_TOKEN": token, "PYTHONUNBUFFERED": "1"}

    def in_cgroup() -> None:
        # Runs in the forked child before exec: `unshare` dies with its parent, and it and
        # everything it starts are charged to the desktop's cgroup from the first fork on.
        die_with_parent()
        cgroup.add(os.getpid())

    with open(log_path, "ab") as log_file:  # noqa: ASYNC230 - a local file, opened once
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=log_file,
            env=env,
            start_new_session=True,  # a Ctrl-C meant for the host does not hit desktops
            preexec_fn=in_cgroup,
        )
    try:
        ready = await asyncio.wait_for(_read_ready(proc.stdout), START_TIMEOUT)
    except TimeoutError:
        ready = None
    if not ready:
        await _kill(proc)
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        raise DesktopError(f"desktop failed to start: {' | '.join(tail) or 'no output'}")
    return proc, {**ready, "token": token}


def _make_state_dir(state_dir: Path, home: Path, uid: int) -> None:
    # The state folder is host root's alone; the home belongs to the desktop's root.
    state_dir.mkdir(parents=True, mode=0o700)
    home.mkdir(mode=0o700)
    os.chown(home, uid, uid)


async def _read_ready(stream: asyncio.StreamReader) -> dict | None:
    """Return the server's ready line, skipping whatever else the desktop printed first."""
    while line := await stream.readline():
        try:
            ready = json.loads(line)
        except json.JSONDecodeError:
            log.debug("desktop said: %s", line.decode(errors="replace").rstrip())
            continue
        if isinstance(ready, dict) and "port" in ready:
            return ready
    return None


async def _kill(proc: asyncio.subprocess.Process) -> None:
    # SIGKILL on unshare fires --kill-child on init, and the namespace dies with it.
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


def _child_pid(pid: int) -> int | None:
    """Return the first child of `pid` (the namespace's init, for an `unshare` pid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            return int(entry)
    return None
