"""Inside the sandbox, as an unprivileged user: run one judge function and print its verdict.

Reads `{"source", "function", "artifacts", "workdir"}` as JSON on stdin, runs
`function(artifacts)` from `source`, and writes one JSON verdict to the original stdout
(the judge's own prints go to stderr). An audit hook records attempts to open sockets,
start processes or write outside the working directory; any such attempt makes the
verdict `forbidden`. The hook only names what happened and ends the run at once, so a
judge cannot swallow the error and go on; it does not see what a judge does through
ctypes, so the containment itself is the kernel's (see `_jail.py`: namespaces, a
minimal read-only root, a cgroup, rlimits, an unprivileged uid, seccomp). A judge that
fills its work folder gets `disk`; one whose call the kernel refuses gets `forbidden`.
"""

import errno
import json
import math
import os
import sys

_BLOCKED_EVENTS = {
    "socket.__new__": "opened a socket",
    "socket.connect": "connected a socket",
    "socket.bind": "bound a socket",
    "socket.getaddrinfo": "resolved a host name",
    "os.fork": "forked",
    "os.forkpty": "forked",
    "os.exec": "executed a program",
    "os.posix_spawn": "spawned a process",
    "os.spawn": "spawned a process",
    "os.system": "ran a shell command",
    "subprocess.Popen": "started a process",
}
# Path-taking events that modify the file system; the first argument is the path.
_WRITE_EVENTS = {
    "os.remove",
    "os.rename",
    "os.mkdir",
    "os.rmdir",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "shutil.rmtree",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# errno values the sandbox's kernel limits produce when a judge tries something forbidden.
_DENIED_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENETUNREACH, errno.ENETDOWN}
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}  # its work folder is a size-capped tmpfs

_out = {"fd": 1}  # where the verdict goes, once stdout is handed to the judge's prints


def _inside(path, root):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return True  # a file descriptor, not a path
    return real == root or real.startswith(root + os.sep)


def _emit(verdict):
    os.write(_out["fd"], json.dumps(verdict).encode())
    os._exit(0)


def _install_guard(root):
    def forbid(why):
        _emit({"status": "forbidden", "detail": why})

    def hook(event, args):
        if event in _BLOCKED_EVENTS:
            forbid(_BLOCKED_EVENTS[event])
        if event == "open" and args and not isinstance(args[0], int):
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and not _inside(args[0], root):
                forbid(f"wrote outside its directory: {args[0]!r}")
        elif event in _WRITE_EVENTS and args and not _inside(args[0], root):
            forbid(f"changed a path outside its directory: {args[0]!r}")

    sys.addaudithook(hook)


def _verdict(spec):
    namespace = {"__name__": "judge"}
    try:
        code = compile(spec["source"], "<judge>", "exec")
    except (SyntaxError, ValueError) as exc:
        return {"status": "bad_source", "detail": f"does not compile: {exc}"}
    try:
        exec(code, namespace)
        fn = namespace.get(spec["function"])
        if not callable(fn):
            return {"status": "bad_source", "detail": f"no function {spec['function']!r}"}
        value = fn(spec["artifacts"])
    except MemoryError:
        return {"status": "memory", "detail": "ran out of its memory limit"}
    except BaseException as exc:  # the judge is untrusted: anything it raises is its failure
        detail = f"{type(exc).__name__}: {exc}"[:500]
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS:
            return {"status": "disk", "detail": detail}
        if isinstance(exc, BlockingIOError | PermissionError) or (
            isinstance(exc, OSError) and exc.errno in _DENIED_ERRNOS
        ):
            return {"status": "forbidden", "detail": detail}
        return {"status": "crash", "detail": detail}
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
        return {
            "status": "bad_return",
            "detail": f"returned {repr(value)[:200]}, not a score in [0, 1]",
        }
    return {"status": "ok", "score": float(value)}


def main():
    """Run the judge named on stdin and write its verdict to the original stdout."""
    spec = json.loads(sys.stdin.read())
    _out["fd"] = os.dup(1)
    os.dup2(2, 1)  # the judge's prints must not mix with the verdict
    me = os.getpid()
    sys.dont_write_bytecode = True  # an import caching bytecode is not the judge writing
    if spec.get("guard", True):
        _install_guard(os.path.realpath(spec["workdir"]))
    try:
        verdict = _verdict(spec)
    finally:
        if os.getpid() != me:  # a forked copy of the judge must never speak for it
            os._exit(1)
    _emit(verdict)


if __name__ == "__main__":
    main()
