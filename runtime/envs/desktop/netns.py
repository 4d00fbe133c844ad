"""A desktop's own network: a network namespace with only a loopback interface.

Every process of a desktop but its server runs in it, so each desktop has the ports
OSWorld's VM has to itself (VLC's HTTP interface on 8080, Chrome's remote debugging on
1337 and 9222) and reaches nothing outside: not the internet, not the host's loopback
services, not another desktop. The server stays in the host's network to serve its API;
it reaches a port inside through `PortForwarder` (forward.py).

The namespace is made by a short-lived child (the server may not leave its own network
and come back), and held by an open file descriptor; `enter()` moves the calling thread
(or a child about to exec) into it.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_libc = ctypes.CDLL(None, use_errno=True)

__all__ = ["create_network", "enter"]


def create_network() -> int:
    """Make a new network namespace with loopback up; return a descriptor that holds it."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: unshare, bring lo up, then wait until the parent holds it
        status = 1
        try:
            os.close(ready_r)
            os.close(done_w)
            if _libc.unshare(_CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
            _loopback_up()
            os.write(ready_w, b"k")
            os.read(done_r, 1)
            status = 0
        except BaseException as exc:  # noqa: BLE001 - report anything, never return into the caller
            os.write(2, f"desktop network: {exc}\n".encode())
        os._exit(status)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"k":
            raise OSError("the desktop's network namespace could not be made")
        return os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)  # lets the child exit; the descriptor keeps the namespace
        os.waitpid(pid, 0)


def enter(fd: int) -> None:
    """Move the calling thread into the network namespace held by `fd`."""
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(network): {os.strerror(err)}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
