"""What the trainer's ranks exchange outside their collectives, and where they listen.

    RankStatus             how a rank above 0 finished a call, as JSON in the group's store;
    read_status            checked field by field on rank 0 (anything else: ValueError)
    loopback_store         the group's TCP store, listening on 127.0.0.1 only
    bind_collectives_to_loopback / bind_torchrun_collectives
                           gloo's (and NCCL's bootstrap) sockets on the interface the ranks need
    no_inherited_sockets   every socket of the process close-on-exec
    process_state          a process's state letter (T: stopped), for naming a late rank

The store is a key-value server any process reaching its port can write (torch's has no
authentication), so what is read from it is plain data, checked, never unpickled.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "RankStatus",
    "MESSAGE_CHARS",
    "read_status",
    "loopback_store",
    "bind_collectives_to_loopback",
    "bind_torchrun_collectives",
    "no_inherited_sockets",
    "process_state",
]

_STATUS_MAX_BYTES = 16_384  # a status is a class name and a message cut to MESSAGE_CHARS
MESSAGE_CHARS = 2_000
_LOOPBACK = "lo"  # the loopback interface gloo (and NCCL's bootstrap) bind on one machine


class RankStatus(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a rank above 0 finished call `seq`, as it writes it to the store (JSON)."""

    seq: int
    rank: int
    error_type: str | None = None  # the exception's class name; None: the call succeeded
    message: str = ""


_STATUS_DECODER = msgspec.json.Decoder(RankStatus)


def read_status(raw: bytes, seq: int, rank: int) -> RankStatus:
    """A rank's status of call `seq` as read from the store; ValueError saying what is wrong."""
    if len(raw) > _STATUS_MAX_BYTES:
        raise ValueError(f"{len(raw)} bytes, at most {_STATUS_MAX_BYTES}")
    try:
        status = _STATUS_DECODER.decode(raw)
    except msgspec.DecodeError as exc:  # not JSON, or not the status's fields and types
        raise ValueError(f"{exc}; starts {bytes(raw[:40])!r}") from None
    if (status.seq, status.rank) != (seq, rank):
        raise ValueError(f"it reports call {status.seq} of rank {status.rank}")
    if status.error_type is not None and not (
        status.error_type.isidentifier() and len(status.error_type) <= 200
    ):
        raise ValueError(f"error type {status.error_type[:80]!r} is not a class name")
    return status


def loopback_store(world_size: int) -> Any:
    """A TCP store (the server) listening on 127.0.0.1 only.

    torch's TCPStore binds every interface whatever host it is given; the listening socket
    is made here, bound to loopback, and handed over (the store owns and closes it).
    """
    import torch.distributed as dist

    listener = socket.create_server(("127.0.0.1", 0), backlog=max(64, 4 * world_size))
    fd = listener.detach()
    try:
        return dist.TCPStore("127.0.0.1", 0, world_size, is_master=True,
                             wait_for_workers=False, timeout=timedelta(minutes=30),
                             master_listen_fd=fd)  # fmt: skip
    except BaseException:
        os.close(fd)
        raise


def bind_collectives_to_loopback() -> None:
    """Make gloo's (and NCCL's bootstrap) sockets of this process listen on loopback only."""
    os.environ["GLOO_SOCKET_IFNAME"] = _LOOPBACK
    os.environ["NCCL_SOCKET_IFNAME"] = _LOOPBACK


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_torchrun_collectives() -> None:
    """Under torchrun on one machine (a loopback MASTER_ADDR), gloo listens on loopback too;
    across hosts it is the interface the operator names in GLOO_SOCKET_IFNAME."""
    if _is_loopback(os.environ.get("MASTER_ADDR", "")):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", _LOOPBACK)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", _LOOPBACK)


def no_inherited_sockets() -> None:
    """Mark every socket of this process close-on-exec.

    gloo opens its listening socket and its connections without the flag, so a child this
    process starts (a desktop under `scalecua up`, a shell) would hold them across exec.
    """
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue


def process_state(pid: int) -> str | None:
    """The state letter of a process (R, S, D, T for stopped, ...), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]
