"""The processes of one desktop, started inside its namespace: Xvfb, dbus, AT-SPI, openbox.

`DesktopSession.start()` first makes the agent's side of the desktop (namespaces.py: the
agent's user namespace and the desktop's network, loopback only; every process it starts,
and every command the server runs, runs there as root inside), then brings them up with a
readiness check each (Xvfb reports its display through -displayfd; dbus prints
its address; openbox is ready once it sets _NET_SUPPORTING_WM_CHECK, and is retried
because about one start in ten fails on a fresh display). `kill_apps()` is the fast half
of a reset: it kills every process of the namespace except these services and the
server, which stay warm between episodes.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from Xlib import X, display

from runtime.envs.desktop.namespaces import AGENT_ROOT, AgentSide
from runtime.envs.desktop.wrappers import write_wrappers
from runtime.errors import DesktopError
from runtime.isolation.lifetime import alive

__all__ = ["DesktopSession", "write_xauthority"]

log = logging.getLogger(__name__)

_OPENBOX_TRIES = 5
_TERMINAL_KEY = "C-A-t"  # ctrl+alt+t opens a terminal, as on the Ubuntu image OSWorld uses


@dataclass
class DesktopSession:
    """Xvfb + dbus + AT-SPI + openbox for one desktop; run inside the desktop's namespace."""

    desktop_id: str
    run_dir: Path  # the server's: wrappers and settings the agent reads but may not change
    width: int = 1280
    height: int = 800
    display: str = ""
    env: dict[str, str] = field(default_factory=dict)
    agent: AgentSide | None = None  # the agent's namespace and network, once started
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self) -> None:
        """Start every service and fill `display` and `env`; raise DesktopError on failure."""
        self.run_dir.mkdir(parents=True, mode=0o755, exist_ok=True)
        # The agent's runtime folder (sockets, sudo's stamps) is the agent's own.
        xdg = self.run_dir / "xdg"
        xdg.mkdir(mode=0o700, exist_ok=True)
        os.chown(xdg, AGENT_ROOT, AGENT_ROOT)
        # The X server admits only clients that present this desktop's cookie.
        xauth = self.run_dir / "Xauthority"
        write_xauthority(xauth)
        os.chown(xauth, AGENT_ROOT, AGENT_ROOT)
        os.environ["XAUTHORITY"] = str(xauth)
        write_wrappers(self.run_dir / "bin")
        self.agent = AgentSide.create()
        self._start_xvfb(xauth)
        self.env = self._build_env()
        self._start_dbus()
        self._start_atspi()
        self._start_openbox()

    def enter(self) -> None:
        """Become the agent, root inside, in the desktop's network (a child's `preexec_fn`)."""
        if self.agent is None:
            raise DesktopError("the desktop's session is not started")
        self.agent.enter()

    def core_pids(self) -> set[int]:
        """Return the pids of the services that survive a reset."""
        return {p.pid for p in self._procs.values() if p.poll() is None}

    def alive(self) -> dict[str, bool]:
        """Return whether each service is still running."""
        return {name: p.poll() is None for name, p in self._procs.items()}

    def kill_apps(self, keep: set[int]) -> int:
        """SIGKILL every process in the namespace but the services and `keep`; return the count."""
        protected = self.core_pids() | keep | {1, os.getpid()}
        parents = _parent_map()
        # The bus daemons' own children (AT-SPI registry, activated services) are services too;
        # the window manager's children (a terminal from ctrl+alt+t) are apps.
        roots = {self._procs[n].pid for n in ("dbus", "atspi") if n in self._procs}
        victims = [
            pid
            for pid in parents
            if pid not in protected and not _descends_from(pid, roots, parents) and pid != 0
        ]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(alive(pid) for pid in victims):
            time.sleep(0.01)
        return len(victims)

    def stop(self) -> None:
        """Terminate the services (Xvfb last, so it removes its lock file) and let the
        namespaces go."""
        for name in ("openbox", "atspi", "dbus", "xvfb"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.agent is not None:
            self.agent.close()
            self.agent = None

    # -- services -----------------------------------------------------------------------
    def _start_xvfb(self, xauth: Path) -> None:
        read_fd, write_fd = os.pipe()
        # Listen only on the socket in this desktop's own /tmp: not on TCP, and not on the
        # abstract socket ("local"), which every process of the host's network namespace
        # could reach. In a private /tmp, -displayfd picks :0 as on OSWorld's VM.
        argv = [
            "Xvfb", "-displayfd", str(write_fd), "-auth", str(xauth),
            "-screen", "0", f"{self.width}x{self.height}x24",
            "-nolisten", "tcp", "-nolisten", "local", "-dpi", "96", "-noreset",
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv,
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=self.enter,
        )
        os.close(write_fd)
        self._procs["xvfb"] = proc
        line = _read_line(read_fd, timeout=15.0)
        os.close(read_fd)
        if not line.strip().isdigit():
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
            raise DesktopError(f"Xvfb did not report a display: {err.strip()[-300:]}")
        proc.stderr.close()
        self.display = f":{line.strip()}"

    def _build_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("NO_AT_BRIDGE", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")
            and not k.startswith("SCALECUA_DESKTOP_TOKEN")
        }
        venv_bin = str(Path(sys.executable).parent)
        env.update(
            {
                "DISPLAY": self.display,
                "HOME": "/home/user",
                "USER": os.environ.get("USER", "root"),
                "XDG_RUNTIME_DIR": str(self.run_dir / "xdg"),
                "XDG_SESSION_TYPE": "x11",
                "XAUTHORITY": str(self.run_dir / "Xauthority"),
                "XDG_CURRENT_DESKTOP": "openbox",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "SAL_USE_VCLPLUGIN": "gtk3",
                "GTK_A11Y": "atspi",
                # Gecko (Thunderbird) exposes its accessibility tree only when asked to.
                "GNOME_ACCESSIBILITY": "1",
                "SCALECUA_DESKTOP_ID": self.desktop_id,
                # Our wrappers first (per-desktop LibreOffice profile), then the project's
                # Python, whose `python` has pyautogui, as OSWorld's VM image does.
                "PATH": os.pathsep.join(
                    [str(self.run_dir / "bin"), venv_bin, "/usr/local/sbin", "/usr/local/bin"]
                    + ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
                ),
            }
        )
        return env

    def _start_dbus(self) -> None:
        address = f"unix:path={self.run_dir / 'xdg' / 'bus'}"
        proc = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"]
            + [f"--address={address}"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=self.enter,
        )
        self._procs["dbus"] = proc
        line = _read_line(proc.stdout.fileno(), timeout=10.0)
        if not line.startswith("unix:"):
            raise DesktopError(f"dbus-daemon did not start (printed {line!r})")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = line.strip()

    def _start_atspi(self) -> None:
        launcher = "/usr/libexec/at-spi-bus-launcher"
        if not os.path.exists(launcher):
            log.warning("no %s: the accessibility tree will be empty", launcher)
            return
        self._procs["atspi"] = subprocess.Popen(
            [launcher, "--launch-immediately"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=self.enter,
        )
        # Ready once the launcher owns org.a11y.Bus on the session bus; apps started
        # before that still register later, so a slow start is logged, not fatal.
        probe = [
            "dbus-send", "--session", "--print-reply", "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", "string:org.a11y.Bus",
        ]  # fmt: skip
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            reply = subprocess.run(
                probe,
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
                preexec_fn=self.enter,
            )
            if "boolean true" in reply.stdout:
                return
            time.sleep(0.02)
        log.warning("the AT-SPI bus is not up after 5 s; accessibility trees may be empty")

    def _start_openbox(self) -> None:
        config = self._write_openbox_config()
        conn = display.Display(self.display)
        try:
            check = conn.intern_atom("_NET_SUPPORTING_WM_CHECK")
            for attempt in range(1, _OPENBOX_TRIES + 1):
                proc = subprocess.Popen(
                    ["openbox", "--config-file", str(config), "--sm-disable"],
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    preexec_fn=self.enter,
                )
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and proc.poll() is None:
                    prop = conn.screen().root.get_full_property(check, X.AnyPropertyType)
                    if prop is not None and len(prop.value):
                        self._procs["openbox"] = proc
                        return
                    time.sleep(0.02)
                log.info("openbox start %d/%d failed; retrying", attempt, _OPENBOX_TRIES)
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        finally:
            conn.close()
        raise DesktopError(f"openbox did not start on {self.display} in {_OPENBOX_TRIES} tries")

    def _write_openbox_config(self) -> Path:
        base = Path("/etc/xdg/openbox/rc.xml").read_text()
        binding = (
            f'<keybind key="{_TERMINAL_KEY}"><action name="Execute">'
            "<command>x-terminal-emulator</command></action></keybind>"
        )
        # Also open new windows on the one desktop we show, never on a hidden workspace.
        text = base.replace("<keyboard>", "<keyboard>\n  " + binding, 1)
        text = text.replace("<number>4</number>", "<number>1</number>", 1)
        path = self.run_dir / "openbox-rc.xml"
        path.write_text(text)
        return path


def write_xauthority(path: Path) -> None:
    """Write an X authority file holding a fresh MIT-MAGIC-COOKIE-1 for any local display.

    Xvfb (`-auth path`) admits the cookie; clients find it through XAUTHORITY. The entries
    name no display number, so they match whichever display -displayfd picks: one for this
    host's name (what python-xlib looks up) and one wildcard (libXau takes either).
    """

    def field(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    cookie = secrets.token_bytes(16)
    entries = b"".join(
        struct.pack(">H", family)
        + field(address)
        + field(b"")
        + field(b"MIT-MAGIC-COOKIE-1")
        + field(cookie)
        for family, address in ((256, socket.gethostname().encode()), (0xFFFF, b""))
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(entries)


def _read_line(fd: int, timeout: float) -> str:
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _parent_map() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields and fields[0] != b"Z":
            parents[int(entry)] = int(fields[1])
    return parents


def _descends_from(pid: int, roots: set[int], parents: dict[int, int]) -> bool:
    seen = 0
    while pid in parents and seen < 64:
        pid = parents[pid]
        if pid in roots:
            return True
        seen += 1
    return False
