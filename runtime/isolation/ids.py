"""Leases of host uid ranges, so concurrent sandboxes (in any process) never share a uid.

A pool of host uids that no account uses is cut into aligned blocks. Leasing a block takes
an exclusive `flock` on a file named after it; the kernel drops the lock when the holder
closes it or dies, so a crashed owner never leaks a block and no daemon is needed.

    with lease_ids(JUDGE_UIDS) as lease:        # one uid
        run_as(lease.first)
    lease = lease_ids(DESKTOP_UIDS, count=65536)  # a user namespace's worth
"""

from __future__ import annotations

import fcntl
import os
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IdLease", "lease_ids", "JUDGE_UIDS", "DESKTOP_UIDS", "lease_dir"]

# Unprivileged host uids with no account. Judges take one uid each; a desktop takes a
# 65536-id block that its user namespace maps to uids 0..65535 inside.
JUDGE_UIDS = range(200_000, 260_000)
DESKTOP_UIDS = range(1 << 20, (1 << 20) + 512 * 65536)


def lease_dir() -> Path:
    """Return the folder holding the lock files (`SCALECUA_ID_LEASES`, default /run/scalecua)."""
    return Path(os.environ.get("SCALECUA_ID_LEASES", "/run/scalecua/id-leases"))


@dataclass
class IdLease:
    """An exclusively held block of host ids `[first, first + count)`; release() or exit frees it."""

    first: int
    count: int
    _fd: int | None

    @property
    def ids(self) -> range:
        """Return the leased ids."""
        return range(self.first, self.first + self.count)

    def release(self) -> None:
        """Give the block back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> IdLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def lease_ids(pool: range, count: int = 1) -> IdLease:
    """Lease a free block of `count` ids from `pool`; raise RuntimeError if every block is taken."""
    if count < 1 or count > len(pool):
        raise ValueError(f"cannot lease {count} ids from a pool of {len(pool)}")
    folder = lease_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    blocks = len(pool) // count
    # Start at a random block so concurrent leasers rarely contend for the same lock file.
    start = random.randrange(blocks)
    for i in range(blocks):
        first = pool.start + ((start + i) % blocks) * count
        fd = os.open(folder / f"{first}-{count}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _in_use(first, count):  # a process of a dead owner still runs under these ids
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            continue
        return IdLease(first, count, fd)
    raise RuntimeError(f"all {blocks} id blocks of {pool} are leased")


def _in_use(first: int, count: int) -> bool:
    """Whether any process runs with a real uid in the block (a leftover of a killed owner)."""
    last = first + count
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
        except FileNotFoundError:
            continue
        if first <= uid < last:
            return True
    return False
