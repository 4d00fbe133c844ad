"""The kernel alone (guard=False) keeps a judge off host sockets, IPC, memory, disk and mounts."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.isolation import Cgroup
from runtime.isolation.ids import JUDGE_UIDS, lease_dir
from runtime.judge import FileArtifact, JudgeLimits, run_judge

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (namespaces)")

LIMITS = JudgeLimits(wall_seconds=6, cpu_seconds=5)

# Plain libc calls through ctypes: the audit hook sees none of them.
CTYPES_JUDGES = """
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)

def _check(value):
    if value < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return value

def connect_unix(artifacts):
    fd = _check(libc.socket(1, 1, 0))  # AF_UNIX, SOCK_STREAM
    address = bytes.fromhex(artifacts["sockaddr"])
    _check(libc.connect(fd, address, len(address)))
    return 1.0

def leave_shared_memory(artifacts):
    _check(libc.shmget(artifacts["key"], 1 << 20, 0o1000 | 0o600))  # IPC_CREAT
    return 1.0
"""


def _sockaddr_un(path: bytes) -> str:
    """A struct sockaddr_un for path (a leading NUL names an abstract socket), as hex."""
    return (socket.AF_UNIX.to_bytes(2, sys.byteorder) + path).hex()


@contextlib.contextmanager
def _open_folder() -> Iterator[Path]:
    """A folder directly under the host's /tmp that any uid may enter (as /tmp/.X11-unix)."""
    folder = Path(tempfile.mkdtemp(prefix="judge-host-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_judge_cannot_reach_host_unix_sockets(kind):
    with _open_folder() as folder, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        if kind == "path":
            path = folder / "X0"
            server.bind(str(path))
            path.chmod(0o777)  # like an X server's socket: anyone may connect
            address = _sockaddr_un(os.fsencode(path) + b"\0")
        else:
            name = b"\0scalecua-judge-test-" + os.urandom(6).hex().encode()
            server.bind(name)
            address = _sockaddr_un(name)
        server.listen(8)
        server.setblocking(False)
        result = run_judge(CTYPES_JUDGES, "connect_unix", {"sockaddr": address}, LIMITS, False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
        assert result.status == "forbidden", result


def test_judge_runs_with_no_new_privs():
    source = (
        "def judge(artifacts):\n"
        "    status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "    return float(status['NoNewPrivs'].strip() == '1')\n"
    )
    result = run_judge(source, "judge", {}, LIMITS, guard=False)
    assert (result.status, result.score) == ("ok", 1.0), result


def _host_shm_keys() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


def test_sysv_shared_memory_does_not_outlive_the_judge():
    key = int.from_bytes(os.urandom(3), "big") + 0x5C000000
    try:
        result = run_judge(CTYPES_JUDGES, "leave_shared_memory", {"key": key}, LIMITS, False)
        assert (result.status, result.score) == ("ok", 1.0), result
        assert key not in _host_shm_keys()
    finally:
        if key in _host_shm_keys():  # the old sandbox leaked it into the host
            subprocess.run(["ipcrm", "-M", str(key)], check=False)


MANY_CHILDREN = """
import os
import time

def judge(artifacts):
    children = []
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            hoard = b"x" * (400 << 20)  # written, so every page is really held
            time.sleep(2.0)
            os._exit(0)
        children.append(pid)
    return float(all(os.waitpid(pid, 0)[1] == 0 for pid in children))
"""


def _peak_bytes(group: Cgroup) -> int:
    """The most memory the group (its descendants included) ever held, by the kernel's count."""
    for name in ("memory.max_usage_in_bytes", "memory.peak"):  # cgroup v1, v2
        if (group.memory_dir / name).exists():
            return int((group.memory_dir / name).read_text())
    raise AssertionError("no memory peak in this cgroup version")


def test_memory_cap_covers_the_whole_process_tree():
    # The caller runs in a group of its own, so the kernel records the peak of the caller
    # and of everything it starts, the judge's tree included (its group nests inside).
    host = Cgroup.create(f"test-judge-host-{os.getpid()}", memory_bytes=8 << 30, pids=512)
    caller = (
        "import json, sys\n"
        "sys.stdin.readline()\n"  # wait until it is in the group
        "from runtime.judge import JudgeLimits, run_judge\n"
        "limits = JudgeLimits(wall_seconds=10, cpu_seconds=8, memory_bytes=1 << 30)\n"
        "result = run_judge(sys.argv[1], 'judge', {}, limits, guard=False)\n"
        "print(json.dumps(result.to_dict()))\n"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", caller, MANY_CHILDREN],
            cwd=Path(__file__).resolve().parents[3],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        host.add(proc.pid)
        out, _ = proc.communicate("go\n", timeout=60)
        peak = _peak_bytes(host)
    finally:
        for d in host.dirs:  # the judge's group nested its own parent folder in here
            children = [p for p in d.rglob("*") if p.is_dir()]
            for child in sorted(children, key=lambda p: len(p.parts), reverse=True):
                child.rmdir()
        host.destroy()
        assert not any(d.exists() for d in host.dirs)
    result = json.loads(out)
    assert result["status"] == "memory", result
    # Five children would hold 2 GiB; the judge's cap is 1 GiB + its 256 MiB folder,
    # and the caller's own interpreter takes a few tens of MiB.
    assert peak < (1 << 30) + (256 << 20) + (128 << 20), peak


def test_work_folder_is_capped_in_size():
    source = (
        "def judge(artifacts):\n"
        "    for i in range(24):\n"  # 384 MiB, beyond the 256 MiB default
        "        with open(f'junk-{i}', 'wb') as f:\n"
        "            f.write(bytes(16 << 20))\n"
        "    return 1.0\n"
    )
    result = run_judge(source, "judge", {}, LIMITS, guard=False)
    assert result.status == "disk", result


def test_artifacts_larger_than_the_work_folder_are_a_disk_failure():
    limits = JudgeLimits(wall_seconds=6, cpu_seconds=5, disk_bytes=1 << 20)
    artifacts = {"big": FileArtifact(data=bytes(2 << 20))}
    result = run_judge("def judge(a):\n    return 1.0\n", "judge", artifacts, limits)
    assert result.status == "disk", result


def test_every_mount_the_judge_sees_is_read_only_but_its_folder():
    source = (
        "import os\n"
        "def judge(artifacts):\n"
        "    writable = []\n"
        "    for line in open('/proc/self/mountinfo'):\n"
        "        fields = line.split()\n"
        "        if 'ro' not in fields[5].split(',') and fields[4] != os.getcwd():\n"
        "            writable.append(fields[4])\n"
        "    if writable:\n"
        "        raise ValueError(f'writable mounts: {writable}')\n"
        "    return 1.0\n"
    )
    result = run_judge(source, "judge", {}, LIMITS, guard=False)
    assert (result.status, result.score) == ("ok", 1.0), result


@contextlib.contextmanager
def _host_submount(parent: Path) -> Iterator[Path]:
    """A world-writable tmpfs mounted under a fresh folder in parent, on the host."""
    folder = Path(tempfile.mkdtemp(prefix=".judge-submount-", dir=parent))
    folder.chmod(0o755)
    sub = folder / "sub"
    sub.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", sub], check=True)
    try:
        yield sub
    finally:
        subprocess.run(["umount", "-l", sub], check=False)
        sub.rmdir()
        folder.rmdir()


@pytest.mark.parametrize("parent", ["/tmp", sys.prefix], ids=["host-tmp", "interpreter-prefix"])
def test_judge_cannot_write_to_host_submounts(parent):
    source = "def judge(a):\n    open(a['target'], 'w').write('escaped')\n    return 1.0\n"
    with _host_submount(Path(parent)) as sub:
        target = sub / "escaped.txt"
        result = run_judge(source, "judge", {"target": str(target)}, LIMITS, guard=False)
        assert not target.exists()
        assert result.status in ("forbidden", "crash"), result


def _lease_is_held(uid: int) -> bool:
    """Whether some open file holds the lease lock of uid (runtime.isolation.ids's layout)."""
    import fcntl

    try:
        fd = os.open(lease_dir() / f"{uid}-1", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_concurrent_judges_run_under_distinct_leased_uids():
    source = (
        "import os, sys, time\n"
        "def judge(artifacts):\n"
        "    print(os.getuid(), file=sys.stderr, flush=True)\n"
        "    time.sleep(2.0)\n"
        "    return 1.0\n"
    )
    n = 4
    results: list = [None] * n

    def run(i: int) -> None:
        results[i] = run_judge(source, "judge", {}, LIMITS, guard=False)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    seen: dict[int, bool] = {}
    deadline = time.monotonic() + 5
    while len(seen) < n and time.monotonic() < deadline:
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError, ValueError):
                uid = entry.stat().st_uid if entry.name.isdigit() else -1
                if uid in JUDGE_UIDS and uid not in seen:
                    seen[uid] = _lease_is_held(uid)
        time.sleep(0.02)
    for t in threads:
        t.join()
    uids = [int(r.stderr.split()[0]) for r in results]
    assert [r.status for r in results] == ["ok"] * n, results
    assert len(set(uids)) == n, uids
    # Judges of tests on other xdist workers may show up too: only ours are checked.
    assert set(uids) <= set(seen), (uids, seen)
    assert all(seen[u] for u in uids), f"uids running without a lease: {seen}"
