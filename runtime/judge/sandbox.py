"""Run an untrusted judge function in a sandbox and get a score or a named failure.

VeriGen's judges are Python written by an LLM. `run_judge(source, function, artifacts)`
runs `function(artifacts)` in a separate process tree that the kernel contains on its
own (an in-process audit hook only names violations):

- namespaces: its own PID namespace (killing its PID 1 kills every descendant), network
  namespace (no network, and no host abstract Unix socket), IPC namespace (SysV and POSIX
  IPC die with it) and mount namespace;
- a minimal root (pivot_root): /usr, /etc, the interpreter's prefixes and the runner,
  bind-mounted read-only recursively; a /dev of null, zero, full, random, urandom; its
  own read-only /proc; no host /tmp, /run, /var, /home, /sys or /dev/shm. The only
  writable place is its work folder, a tmpfs of `disk_bytes` holding copies of the
  artifacts;
- an unprivileged uid leased for the run (`runtime.isolation.ids`), with no_new_privs and a
  seccomp filter that refuses AF_UNIX sockets and io_uring;
- a cgroup (memory + pids) around the whole tree: together its processes and files hold
  at most `memory_bytes + disk_bytes` of RAM and `processes` tasks; per process, rlimits
  on address space, CPU time, processes, file size and open files;
- a wall-clock timeout enforced by the parent.

A file artifact becomes a path inside the work folder, any other artifact is passed as
its JSON value. The caller always gets a JudgeResult back, never an exception from the
judge.

Failure statuses: `timeout`, `memory` (hit its address-space limit, or the cgroup killed
part of its tree), `disk` (its work folder filled up, or the artifacts did not fit),
`forbidden` (network, Unix sockets, processes, writes outside its folder), `crash`
(raised or died), `bad_return` (not a number in [0, 1]), `bad_source` (does not compile
or lacks the function), `sandbox_error` (the sandbox could not be built on this machine).
"""

from __future__ import annotations

import asyncio
import json
import marshal
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runtime.isolation import Cgroup, CgroupError, lease_ids
from runtime.isolation.ids import JUDGE_UIDS

__all__ = [
    "FileArtifact",
    "JudgeLimits",
    "JudgeResult",
    "arun_judge",
    "run_judge",
    "SANDBOX_UIDS",
    "WORKDIR",
]

_HERE = Path(__file__).resolve().parent
SANDBOX_UIDS = JUDGE_UIDS  # unprivileged uids with no account, one leased per run
WORKDIR = "/judge"  # the work folder's path inside the sandbox


@dataclass(frozen=True)
class JudgeLimits:
    """Resource limits for one judge run."""

    wall_seconds: float = 10.0  # wall-clock budget, enforced by the parent
    cpu_seconds: int = 10  # RLIMIT_CPU; the kernel stops a spinning judge at this
    memory_bytes: int = 1 << 30  # RLIMIT_AS per process (a 50 GB allocation fails); see disk_bytes
    processes: int = 32  # RLIMIT_NPROC for the run's uid, and the cgroup's task cap
    file_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file it may write
    open_files: int = 64  # RLIMIT_NOFILE
    output_bytes: int = 8 << 10  # how much of the judge's stderr to keep
    # Size of the work folder (a tmpfs, so RAM): the cgroup caps the whole tree's
    # processes and files together at memory_bytes + disk_bytes.
    disk_bytes: int = 256 << 20


@dataclass(frozen=True)
class FileArtifact:
    """A file to copy into the sandbox, from host bytes or a host path."""

    data: bytes | None = None
    path: str | Path | None = None


@dataclass
class JudgeResult:
    """A judge's score, or the reason it has none."""

    status: str  # "ok" or one of the failure statuses in the module docstring
    score: float | None = None  # in [0, 1] when status is "ok"
    detail: str = ""
    seconds: float = 0.0
    stderr: str = ""  # the tail of what the judge printed

    @property
    def ok(self) -> bool:
        """True when the judge returned a valid score."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


def run_judge(
    source: str,
    function: str,
    artifacts: Mapping[str, Any] | None = None,
    limits: JudgeLimits | None = None,
    guard: bool = True,
) -> JudgeResult:
    """Run `function(artifacts)` from untrusted `source` in the sandbox and report the outcome.

    `guard=False` leaves out the in-process audit hook, so that only the kernel's limits
    stand between the judge and the machine (used by tests to prove they hold alone).
    """
    limits = limits or JudgeLimits()
    started = time.monotonic()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return JudgeResult("sandbox_error", detail="the judge sandbox needs root and unshare(1)")
    try:
        # A uid no other live run holds: RLIMIT_NPROC counts processes per uid, and
        # nothing of another judge may run (or be killed) under it.
        lease = lease_ids(JUDGE_UIDS)
    except RuntimeError as exc:
        return JudgeResult("sandbox_error", detail=str(exc))
    with lease:
        try:
            group = Cgroup.create(
                f"judge-{lease.first}-{secrets.token_hex(4)}",
                memory_bytes=_group_bytes(limits),
                pids=limits.processes + 1,  # and the jail, its PID 1
            )
        except CgroupError as exc:
            return JudgeResult("sandbox_error", detail=str(exc))
        box = Path(tempfile.mkdtemp(prefix="scalecua-judge-"))
        try:
            values, copies = _stage(box / "in", dict(artifacts or {}))
            job = {
                "source": source,
                "function": function,
                "artifacts": values,
                "workdir": WORKDIR,
                "guard": guard,
            }
            spec = _spec(box, group, lease.first, copies, limits, job)
            return _execute(box, spec, group, limits, started)
        finally:
            group.destroy()  # kill what is left and wait for it, before the uid goes back
            shutil.rmtree(box, ignore_errors=True)


async def arun_judge(
    source: str,
    function: str,
    artifacts: Mapping[str, Any] | None = None,
    limits: JudgeLimits | None = None,
) -> JudgeResult:
    """`run_judge` for asyncio callers, off the event loop."""
    return await asyncio.to_thread(run_judge, source, function, artifacts, limits)


def _group_bytes(limits: JudgeLimits) -> int:
    """The cgroup's memory cap: the judge's processes plus its work folder's files."""
    return limits.memory_bytes + limits.disk_bytes


def _interpreter_paths() -> tuple[str, list[str]]:
    """The interpreter to run and the host folders it needs, at their real paths."""
    python = sys.executable
    # bin/python stays a path inside the venv, so the interpreter finds its pyvenv.cfg.
    exe = os.path.join(os.path.realpath(os.path.dirname(python)), os.path.basename(python))
    folders = (
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(python),
        os.path.dirname(os.path.realpath(python)),
        _HERE / "_runner.py",
    )
    return exe, sorted({os.path.realpath(p) for p in folders})


def _spec(
    box: Path,
    group: Cgroup,
    uid: int,
    copies: list[list[str]],
    limits: JudgeLimits,
    job: dict[str, Any],
) -> dict[str, Any]:
    """What the jail needs to build the sandbox and start the runner."""
    python, needed = _interpreter_paths()
    (box / "root").mkdir()  # the jail mounts the judge's new root here, in its namespace
    return {
        "root": str(box / "root"),
        "workdir": WORKDIR,
        "disk_bytes": limits.disk_bytes,
        "uid": uid,
        "gid": uid,
        "cgroup_procs": [str(d / "cgroup.procs") for d in group.dirs],
        "python": python,
        "runner": str(_HERE / "_runner.py"),
        "needed_paths": needed,
        "copies": copies,
        "limits": {
            "memory_bytes": limits.memory_bytes,
            "cpu_seconds": limits.cpu_seconds,
            "processes": limits.processes,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
        },
        "job": json.dumps(job).encode(),  # the runner's stdin
    }


def _execute(
    box: Path, spec: dict[str, Any], group: Cgroup, limits: JudgeLimits, started: float
) -> JudgeResult:
    """Start the jail in fresh namespaces, wait for it within the wall clock, classify."""
    spec_path = box / "spec.marshal"
    spec_path.write_bytes(marshal.dumps(spec))
    command = [
        "unshare", "--pid", "--fork", "--mount", "--ipc", "--net", "--kill-child",
        os.path.realpath(sys.executable), "-I", "-S", str(_HERE / "_jail.py"), str(spec_path),
    ]  # fmt: skip
    # The jail runs as root on the stdlib alone: -S keeps the .pth files of any
    # site-packages (code run at start-up) out of it, and saves their start-up time.
    # Output goes to files, not pipes: a judge that prints without end fills at most
    # RLIMIT_FSIZE on disk (and dies of SIGXFSZ) instead of the parent's memory.
    out_path, err_path = box / "verdict.out", box / "judge.err"
    with open(out_path, "wb") as out_file, open(err_path, "wb") as err_file:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out_file,
            stderr=err_file,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=limits.wall_seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.wait()
        timed_out = True
    oom = group.oom_killed()
    elapsed = time.monotonic() - started
    stderr = _tail(err_path, limits.output_bytes).decode("utf-8", "replace")
    if timed_out:
        detail = f"no verdict within {limits.wall_seconds:g} s"
        return JudgeResult("timeout", detail=detail, seconds=elapsed, stderr=stderr)
    if oom:  # part of its tree was killed, so whatever it returned is not a verdict
        detail = f"its processes and files together exceeded {_group_bytes(limits)} bytes"
        return JudgeResult("memory", detail=detail, seconds=elapsed, stderr=stderr)
    return _classify(proc.returncode, _head(out_path, 64 << 10), stderr, elapsed)


def _head(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def _tail(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        return f.read()


def _stage(folder: Path, artifacts: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    """Return what the judge receives and the (host source, name) files the jail copies in."""
    values: dict[str, Any] = {}
    copies: list[list[str]] = []
    folder.mkdir()
    for name, value in artifacts.items():
        if isinstance(value, FileArtifact):
            target = Path(name).name
            if not Path(target).suffix and value.path is not None:
                target += Path(value.path).suffix  # parsers look at it
            if value.data is not None:
                source = folder / target
                source.write_bytes(value.data)
            elif value.path is not None and Path(value.path).is_file():
                source = Path(value.path)
            else:
                values[name] = None  # a missing file reaches the judge as None
                continue
            copies.append([str(source), target])
            values[name] = f"{WORKDIR}/artifacts/{target}"
        else:
            values[name] = json.loads(json.dumps(value))  # only JSON crosses the boundary
    return values, copies


def _kill(proc: subprocess.Popen) -> None:
    """Kill the sandbox's process group; its PID namespace takes every descendant along."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _classify(code: int, out: bytes, stderr: str, elapsed: float) -> JudgeResult:
    """Turn the sandbox's exit and verdict into a JudgeResult."""
    try:
        verdict = json.loads(out.decode()) if out.strip() else None
    except ValueError:
        verdict = None
    if isinstance(verdict, dict) and verdict.get("status") == "ok":
        return JudgeResult("ok", float(verdict["score"]), "", elapsed, stderr)
    if isinstance(verdict, dict) and isinstance(verdict.get("status"), str):
        return JudgeResult(verdict["status"], None, str(verdict.get("detail", "")), elapsed, stderr)
    if code == 125:
        return JudgeResult("sandbox_error", detail=stderr.strip()[-500:], seconds=elapsed)
    if code == 128 + signal.SIGXCPU:
        return JudgeResult(
            "timeout", detail="hit its CPU-time limit", seconds=elapsed, stderr=stderr
        )
    if "MemoryError" in stderr:
        return JudgeResult(
            "memory", detail="ran out of its memory limit", seconds=elapsed, stderr=stderr
        )
    detail = f"exited with code {code} and no verdict"
    if code > 128:
        detail = f"killed by signal {signal.Signals(code - 128).name}"
    return JudgeResult("crash", detail=detail, seconds=elapsed, stderr=stderr)
