"""The agent's side of a desktop, as its server holds it: a user namespace and a network.

The server runs as root of a user namespace of its own that init.py makes (host uid
`first + SERVER_ID`, an id no process of the agent ever has). Everything else of the
desktop runs on the agent's side, made here at start:

- **the agent's user namespace**, a child of the server's: ids 0..AGENT_IDS-1 inside are
  the server namespace's 1..AGENT_IDS, that is host uids `first`..: the agent is root
  inside, and holds no capability over the server's namespace, so it cannot signal,
  trace, or take a descriptor from the server, nor enter a namespace the server owns;
- **the desktop's network**, owned by the agent's namespace (so root inside may bind
  port 80 as on a VM), with only a loopback interface: each desktop has OSWorld's fixed
  ports (VLC's 8080, Chrome's 1337 and 9222) to itself and reaches nothing outside.

`AgentSide.enter` is the `preexec_fn` of every process the server starts (the services,
the apps, every command): join both, become root inside. `call` runs a function there
in a forked child (files the server writes for the agent are then the agent's, with the
agent's rights), and `socket` makes a socket inside the network for the server's own use
(the browser's gateway, the port forwards, the CDP relay), on a thread that ends after.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.errors import DesktopError

__all__ = ["AGENT_IDS", "AGENT_ROOT", "SERVER_ID", "AgentSide", "AgentSideError", "CALL_TIMEOUT"]

SERVER_ID = 65535  # the server's host uid is the leased block's first + SERVER_ID
AGENT_IDS = 65535  # ids 0..AGENT_IDS-1 inside the agent's namespace: host first..first+65534
AGENT_ROOT = 1  # the agent's root as the server's namespace numbers it (host uid `first`)
CALL_TIMEOUT = 60.0  # seconds a function on the agent's side may take
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_DUMPABLE = 4
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


class AgentSideError(DesktopError):
    """A function run on the agent's side failed: `args` are its message and its kind."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class AgentSide:
    """The agent's user namespace and the desktop's network, held by two descriptors."""

    def __init__(self, user_fd: int, net_fd: int) -> None:
        self.user_fd = user_fd
        self.net_fd = net_fd

    @classmethod
    def create(cls) -> AgentSide:
        """Make the agent's user namespace and, owned by it, the desktop's network."""
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # unshare the user namespace, wait for its maps, then the network
            status = 1
            try:
                os.close(to_child_w)
                os.close(to_parent_r)
                _check(_libc.unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
                os.write(to_parent_w, b"u")
                if os.read(to_child_r, 1) != b"m":
                    os._exit(1)
                _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
                _loopback_up()
                os.write(to_parent_w, b"n")
                os.read(to_child_r, 1)  # until the parent holds both
                status = 0
            except BaseException as exc:  # noqa: BLE001 - report anything, never return
                os.write(2, f"desktop namespaces: {exc}\n".encode())
            os._exit(status)
        os.close(to_child_r)
        os.close(to_parent_w)
        try:
            if os.read(to_parent_r, 1) != b"u":
                raise OSError("the agent's user namespace could not be made")
            # Written from the server's namespace, whose ids 1..AGENT_IDS they name.
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{name}", "w") as f:
                    f.write(f"0 {AGENT_ROOT} {AGENT_IDS}\n")
            os.write(to_child_w, b"m")
            if os.read(to_parent_r, 1) != b"n":
                raise OSError("the desktop's network namespace could not be made")
            user_fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.close(to_parent_r)
            os.close(to_child_w)  # lets the child exit; the descriptors keep the namespaces
            os.waitpid(pid, 0)
        return cls(user_fd, net_fd)

    def enter(self) -> None:
        """Join the agent's namespace and the desktop's network as root inside (a child,
        before exec: only a single-threaded process may change its user namespace)."""
        _check(_libc.setns(self.user_fd, _CLONE_NEWUSER), "setns(user)")
        _check(_libc.setns(self.net_fd, _CLONE_NEWNET), "setns(network)")
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        # Until it execs, this child is a copy of the server (its token in memory): the
        # agent, now the same uid, must not trace it, whatever fs.suid_dumpable says.
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)

    def enter_network(self) -> None:
        """Move the calling thread into the desktop's network (its sockets are made there)."""
        _check(_libc.setns(self.net_fd, _CLONE_NEWNET), "setns(network)")

    def socket(
        self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0
    ) -> socket.socket:
        """A new socket inside the desktop's network (made on a thread that ends after)."""

        def make() -> socket.socket:
            self.enter_network()
            return socket.socket(family, kind, proto)

        return _in_thread(make)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = CALL_TIMEOUT) -> Any:
        """Run `fn(*args)` as the agent (root inside, in the desktop's network) in a forked
        child; return its JSON-able result, or raise AgentSideError with its error."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_fd)
                self.enter()
                reply = {"value": fn(*args)}
            except BaseException as exc:  # noqa: BLE001 - handed back to the server
                reply = {"error": f"{exc}" or type(exc).__name__, "kind": type(exc).__name__}
            try:
                with os.fdopen(write_fd, "w") as out:
                    json.dump(reply, out)
            finally:
                os._exit(0)
        os.close(write_fd)
        try:
            text = _read_all(read_fd, timeout)
        finally:
            os.close(read_fd)
            if text is None:  # stuck on something the agent made (a FIFO, a lock): end it
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if text is None:
            raise AgentSideError(f"gave up after {timeout:g} s", "TimeoutError")
        try:
            reply = json.loads(text)
        except json.JSONDecodeError:
            raise AgentSideError("the agent-side child died without an answer") from None
        if "error" in reply:
            raise AgentSideError(reply["error"], reply.get("kind", ""))
        return reply["value"]

    def close(self) -> None:
        """Let both namespaces go once nothing else holds them."""
        for fd in (self.user_fd, self.net_fd):
            if fd >= 0:
                os.close(fd)
        self.user_fd = self.net_fd = -1


def _in_thread(fn: Callable[[], T]) -> T:
    """Run fn on a fresh thread that ends afterwards (it may leave this thread's network)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="desktop-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _read_all(fd: int, timeout: float) -> str | None:
    """Everything written to `fd` until its end, or None if that takes over `timeout` s."""
    deadline = time.monotonic() + timeout
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
