"""Two desktops side by side see neither each other's input, files nor display; and what
runs inside (the agent, a task's setup) is root only inside: on the host it is an
unprivileged uid that reads no root-only file.

The hostile tests act as an agent would: through /execute and by typing into a terminal."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from runtime.envs.desktop.lifecycle import Desktop
from runtime.isolation.ids import DESKTOP_UIDS

pytestmark = pytest.mark.desktop


def _exists(path: str) -> bool:
    return os.path.exists(path)


@pytest.fixture(scope="module")
async def other(desktop_root: Path) -> AsyncIterator[Desktop]:
    """A second desktop beside the session one."""
    async with Desktop.started(root=desktop_root) as d:
        yield d


async def test_each_desktop_has_its_own_home_and_display(desktop: Desktop, other: Desktop) -> None:
    await desktop.reset()
    assert desktop.home != other.home
    async with desktop.controller() as a, other.controller() as b:
        await a.upload_file("/home/user/Desktop/secret.txt", b"only on A")
        assert await b.get_file("/home/user/Desktop/secret.txt") is None
        assert (desktop.home / "Desktop/secret.txt").read_bytes() == b"only on A"
        # Nor through the host path of A's home, nor by listing the desktops' state root.
        leak = await b.execute(["cat", str(desktop.home / "Desktop/secret.txt")])
        assert leak["returncode"] != 0 and leak["output"] == ""
        listing = await b.execute(["ls", "-a", str(desktop.state_dir.parent)])
        assert desktop.desktop_id not in listing["output"]
        assert (await b.execute("echo $DISPLAY", shell=True))["output"].strip() == other.display
    # The host's own /home/user is untouched (and on this machine, absent).
    assert not _exists("/home/user/Desktop/secret.txt")


async def test_input_on_one_desktop_does_not_reach_the_other(
    desktop: Desktop, other: Desktop, wait_window, wait_file
) -> None:
    await desktop.reset()
    await other.reset()
    async with desktop.controller() as a, other.controller() as b:
        for ctl in (a, b):
            await ctl.launch(
                ["xterm", "-T", "catbox", "-e", "sh", "-c", "cat > /home/user/typed.txt"]
            )
        await wait_window(a, "catbox")
        await wait_window(b, "catbox")
        quiet_before = await _settled_screenshot(b)
        assert (await a.step({"action": "type", "text": "for A only\n"})).ok
        assert (await a.step({"action": "left_click", "coordinate": [500, 500]})).ok
        assert (await a.step({"action": "key", "text": "ctrl+d"})).ok
        assert await wait_file(a, "/home/user/typed.txt", "for A only\n", timeout=30)
        assert (await b.get_file("/home/user/typed.txt")) == b""
        assert await b.screenshot() == quiet_before
        assert await b.cursor_position() == (640, 400)


async def _settled_screenshot(ctl) -> bytes:
    """A screenshot once the screen has stopped changing (a new xterm draws for a while)."""
    previous = await ctl.screenshot()
    for _ in range(50):
        await asyncio.sleep(0.2)
        current = await ctl.screenshot()
        if current == previous:
            return current
        previous = current
    return previous


async def test_libreoffice_opens_on_its_own_desktop(
    desktop: Desktop, other: Desktop, wait_window
) -> None:
    # Both desktops see the same /home/user path; without a per-desktop profile the second
    # soffice would hand its file to the first desktop's instance.
    await desktop.reset()
    await other.reset()
    async with desktop.controller() as a, other.controller() as b:
        await a.upload_file("/home/user/a-book.csv", b"x\n")
        await b.upload_file("/home/user/b-book.csv", b"y\n")
        await a.launch(["soffice", "--norestore", "--calc", "/home/user/a-book.csv"])
        await wait_window(a, "a-book", timeout=60)
        await b.launch(["soffice", "--norestore", "--calc", "/home/user/b-book.csv"])
        await wait_window(b, "b-book", timeout=60)
        await asyncio.sleep(0.5)
        assert "b-book" not in (await a.execute(["wmctrl", "-l"]))["output"]
        assert "a-book" not in (await b.execute(["wmctrl", "-l"]))["output"]


def _status(pid: int | str) -> dict[str, str]:
    """The fields of /proc/PID/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _namespace_pids(desktop: Desktop) -> list[int]:
    """Host pids of every process in the desktop's PID namespace but its PID 1 (init)."""
    own_ns = os.readlink("/proc/self/ns/pid")
    server = next(
        pid
        for pid in filter(str.isdigit, os.listdir("/proc"))
        if f"--id\0{desktop.desktop_id}\0".encode() in _cmdline(pid)
        and b"runtime.envs.desktop.server" in _cmdline(pid)
        and os.readlink(f"/proc/{pid}/ns/pid") != own_ns  # not `unshare` (its argv has it too)
    )
    pid_ns = os.readlink(f"/proc/{server}/ns/pid")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != pid_ns:
                continue
            if _status(pid)["NSpid"].split()[-1] == "1":
                continue  # init: sets the namespace up as host root, then only reaps
        except OSError:
            continue
        found.append(int(pid))
    return found


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def _typed_in_a_terminal(ctl, wait_window, wait_file, command: str, out: str) -> str:
    """Open a terminal with ctrl+alt+t, type `command`, return what it wrote to `out`."""
    assert (await ctl.step({"action": "key", "text": "ctrl+alt+t"})).ok
    await wait_window(ctl, "xterm")
    await asyncio.sleep(0.5)
    assert (await ctl.step({"action": "type", "text": f"{command}; echo END >> {out}\n"})).ok
    for _ in range(100):
        data = (await ctl.get_file(out) or b"").decode(errors="replace")
        if data.endswith("END\n"):
            return data
        await asyncio.sleep(0.1)
    raise AssertionError(f"the terminal command did not finish: {data!r}")


@pytest.fixture(scope="module")
def host_secret() -> Iterator[Path]:
    """A world-readable file in a folder only host root may enter."""
    folder = Path(tempfile.mkdtemp(prefix="scalecua-secret-", dir="/run"))  # mode 0700
    secret = folder / "secret.txt"
    secret.write_text(f"host secret {secrets.token_hex(8)}\n")
    secret.chmod(0o644)
    yield secret
    shutil.rmtree(folder)


async def test_root_inside_is_an_unprivileged_uid_on_the_host(
    desktop: Desktop, other: Desktop, wait_window
) -> None:
    await desktop.reset()
    async with desktop.controller() as ctl:
        assert (await ctl.execute(["id", "-u"]))["output"] == "0\n"
        assert (await ctl.execute(["id", "-G"]))["output"] == "0\n"
        await ctl.launch(["mousepad"])
        await wait_window(ctl, "Mousepad")
    blocks = []
    for d in (desktop, other):
        pids = _namespace_pids(d)
        assert len(pids) >= 5, pids  # server, Xvfb, dbus, AT-SPI, openbox (+ mousepad)
        by_uid: dict[int, list[int]] = {}
        for pid in pids:
            status = _status(pid)
            (uid,) = {int(u) for u in status["Uid"].split()}  # real, effective, saved, fs
            assert {int(g) for g in status["Gid"].split()} == {uid} and not status["Groups"].strip()
            by_uid.setdefault(uid, []).append(pid)
        # The agent (inside's 0) is a block's first id; the server alone its last.
        first = min(by_uid)
        assert first in DESKTOP_UIDS and first % 65536 == 0, by_uid
        assert set(by_uid) == {first, first + 65535}, by_uid
        assert len(by_uid[first + 65535]) == 1, by_uid
        blocks.append(first)
    assert blocks[0] != blocks[1]  # each desktop has its own block


async def test_host_files_outside_the_desktop_are_unreadable(
    ctl, host_secret: Path, wait_window, wait_file
) -> None:
    token = (await asyncio.to_thread(host_secret.read_text)).split()[-1]
    for command in (
        ["cat", str(host_secret)],
        ["cat", "/etc/shadow"],
        ["ls", "-a", "/root"],
        ["sh", "-c", f"cp {host_secret} /home/user/stolen.txt"],
    ):
        result = await ctl.execute(command)
        assert result["returncode"] != 0, (command, result)
        assert token not in result["output"] and "root:" not in result["output"], result
    assert await ctl.get_file(str(host_secret)) is None  # the server reads as the desktop does
    typed = await _typed_in_a_terminal(
        ctl,
        wait_window,
        wait_file,
        f"(id -u; cat /etc/shadow {host_secret}; ls /root) > ~/leak.txt 2>&1",
        "/home/user/leak.txt",
    )
    assert typed.startswith("0\n"), typed
    assert token not in typed and not re.search(r"^root:", typed, re.M), typed
    assert "Permission denied" in typed


async def test_root_inside_cannot_uncover_another_desktops_home(
    desktop: Desktop, other: Desktop
) -> None:
    await desktop.reset()
    async with desktop.controller() as a, other.controller() as b:
        await a.upload_file("/home/user/Desktop/secret.txt", b"only on A")
        root = desktop.state_dir.parent
        attack = (
            f"for i in 1 2 3 4; do umount -l {root}; umount -l /home/user; umount -l /home;"
            f" umount -l /tmp; done 2>/dev/null; cat {desktop.home}/Desktop/secret.txt;"
            f" echo pwned > {desktop.home}/Desktop/pwned.txt"
        )
        result = await b.execute(attack, shell=True)
        assert "only on A" not in result["output"], result
        assert not (desktop.home / "Desktop/pwned.txt").exists()
        # Nor can it mount its own view of the host's filesystem.
        mounted = await b.execute(
            f"mount -t tmpfs none /mnt && ls {root}; mount --bind / /mnt && ls /mnt/root",
            shell=True,
        )
        assert mounted["returncode"] != 0 and desktop.desktop_id not in mounted["output"], mounted


def _listening_x_sockets(desktop: Desktop) -> list[str]:
    """Names of the Unix sockets the desktop's X server listens on ('@...' is abstract)."""
    xvfb = next(pid for pid in _namespace_pids(desktop) if _status(pid)["Name"] == "Xvfb")
    inodes = set()
    for fd in os.listdir(f"/proc/{xvfb}/fd"):
        with_target = os.readlink(f"/proc/{xvfb}/fd/{fd}")
        if with_target.startswith("socket:["):
            inodes.add(with_target[8:-1])
    names = []
    for line in Path(f"/proc/{xvfb}/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and fields[5] == "01":  # listening
            names.append(fields[7])
    return names


# Connect to a Unix socket ('@name' is abstract) and say hello in X's protocol without any
# authorisation; print whether the server accepted the connection.
_X_HELLO = """
import socket, sys
name = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect("\\0" + name[1:] if name.startswith("@") else name)
s.sendall(b"l\\0" + (11).to_bytes(2, "little") + bytes(8))
print("accepted" if s.recv(8)[:1] == b"\\x01" else "refused")
"""


async def test_a_desktop_cannot_reach_another_desktops_display(
    desktop: Desktop, other: Desktop
) -> None:
    await desktop.reset()
    await other.reset()
    marker = f"desktop-a-{secrets.token_hex(4)}"
    async with desktop.controller() as a, other.controller() as b:
        done = await a.execute(
            ["xprop", "-root", "-f", "SCALECUA_MARK", "8s", "-set", "SCALECUA_MARK", marker]
        )
        assert done["returncode"] == 0, done
        seen = await a.execute(["xprop", "-root", "SCALECUA_MARK"])
        assert marker in seen["output"], seen  # A sees its own mark
        number = desktop.display.lstrip(":")
        probes = [
            f"DISPLAY={desktop.display} xprop -root SCALECUA_MARK",
            f"XAUTHORITY=/dev/null DISPLAY={desktop.display} xprop -root SCALECUA_MARK",
            f"DISPLAY=unix:{number} xprop -root SCALECUA_MARK",
            f"DISPLAY=localhost:{number} xprop -root SCALECUA_MARK",
        ]
        for probe in probes:
            result = await b.execute(probe, shell=True)
            assert marker not in result["output"], (probe, result)
        sockets = _listening_x_sockets(desktop)
        assert sockets and not [s for s in sockets if s.startswith("@")], sockets
        for name in sockets + [f"@/tmp/.X11-unix/X{number}", f"/tmp/.X11-unix/X{number}"]:
            result = await b.execute(["python", "-c", _X_HELLO, name])
            assert "accepted" not in result["output"], (name, result)


async def test_each_desktop_has_its_own_tmp(desktop: Desktop, other: Desktop) -> None:
    await desktop.reset()
    await other.reset()
    async with desktop.controller() as a, other.controller() as b:
        name = f"/tmp/scalecua-{secrets.token_hex(4)}"
        assert (await a.execute(["touch", name]))["returncode"] == 0
        assert (await b.execute(["ls", name]))["returncode"] != 0
        assert not _exists(name)  # nor is it the host's /tmp
        for shared in ("/dev/shm", "/var/tmp", "/run/lock"):
            made = await a.execute(["touch", f"{shared}/scalecua-probe"])
            assert made["returncode"] == 0, (shared, made)
            assert (await b.execute(["ls", f"{shared}/scalecua-probe"]))["returncode"] != 0
            assert not _exists(f"{shared}/scalecua-probe")


# Inside a desktop: try to connect to 127.0.0.1:PORT; print what happened.
_CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused", exc)
"""


async def test_each_desktop_has_its_own_network(desktop: Desktop, other: Desktop) -> None:
    await desktop.reset()
    await other.reset()
    async with desktop.controller() as a, other.controller() as b:
        # Both serve on 8080 (VLC's port on OSWorld's VM) at once, each its own page, one
        # started as a command, one launched detached (the two ways apps start).
        for ctl, name in ((a, "A"), (b, "B")):
            await ctl.upload_file("/home/user/www/who.txt", f"desktop {name}\n".encode())
        serve = ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "-d", "www"]
        await a.launch(serve)
        await b.launch(f"{' '.join(serve)} > /dev/null 2>&1", shell=True)
        pages = {}
        async with httpx.AsyncClient(timeout=5) as http:
            for ctl, name in ((a, "A"), (b, "B")):
                host, port = await ctl.port_address(8080)
                assert port != 8080  # the host reaches it through the desktop's server
                for _ in range(50):
                    try:
                        pages[name] = (await http.get(f"http://{host}:{port}/who.txt")).text
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.2)
        assert pages == {"A": "desktop A\n", "B": "desktop B\n"}
        # Nothing inside reaches the host's loopback: not a desktop server, not a forward.
        b_forward = (await b.port_address(8080))[1]
        for port in (int(desktop.base_url.rsplit(":", 1)[1]), b_forward):
            probe = await a.execute(["python", "-c", _CONNECT, str(port)])
            assert probe["output"].startswith("refused"), (port, probe)
