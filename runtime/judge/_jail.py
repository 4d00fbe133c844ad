"""PID 1 of a judge sandbox: build a minimal root, drop privileges, run the judge, reap.

Started by sandbox.py as root inside fresh PID, mount, IPC and network namespaces
(`unshare --pid --fork --mount --ipc --net --kill-child`). In order, it:

1. joins the run's cgroup (memory + pids), so everything after is charged to it;
2. builds a new root on a tmpfs holding only what the interpreter needs, bind-mounted
   read-only, recursively: /usr, /etc, the top-level /bin, /lib, ... (symlinks on a
   merged /usr), the interpreter's prefixes and the runner; a /dev with null, zero,
   full, random and urandom; a read-only /proc of its own PID namespace; and the work
   folder, a tmpfs capped at the disk limit (TMPDIR and HOME point at it). No /tmp,
   /run, /var, /home, /sys or /dev/shm of the host is in it, so no host Unix socket has
   a path there;
3. copies the artifacts into the work folder (too big for it: a `disk` verdict);
4. pivots into the new root and detaches the old one;
5. forks the runner: rlimits, an unprivileged uid/gid, no_new_privs, and a seccomp
   filter that refuses AF_UNIX sockets, io_uring (which could open them unseen) and
   every non-native system call ABI, then execs the interpreter.

When this process exits the kernel kills everything left in the PID namespace (a fork
bomb's children included). Exit code 125 means the sandbox itself could not be built.
"""

import ctypes
import errno
import marshal
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH, AT_FDCWD, AT_RECURSIVE = 2, -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 1, 2, 4, 8
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

# Per machine: system call numbers and the seccomp audit arch; x86_64 also has the x32
# ABI, whose calls carry this bit and must not slip past the native numbers.
_MACHINES = {
    "x86_64": {
        "arch": 0xC000003E,
        "x32_bit": 0x40000000,
        "pivot_root": 155,
        "mount_setattr": 442,
        "socket": 41,
        "socketpair": 53,
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "x32_bit": None,
        "pivot_root": 41,
        "mount_setattr": 442,
        "socket": 198,
        "socketpair": 199,
    },
}
_IO_URING = (425, 426, 427)  # io_uring_setup, _enter, _register: the same on both
# What any interpreter needs from the host, at the same paths; symlinks are copied.
_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

_libc = ctypes.CDLL(None, use_errno=True)
_machine = _MACHINES.get(os.uname().machine)


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    ok = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(ok, f"mount {source} on {target}")


def _set_attrs(path, set_=0, clear=0):
    """Change the flags of the mount at path and of every mount below it."""
    attr = _MountAttr(set_, clear, 0, 0)
    ok = _libc.syscall(
        ctypes.c_long(_machine["mount_setattr"]),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(ok, f"mount_setattr {path}")


def _join_cgroup(procs_files):
    for path in procs_files:
        with open(path, "w") as f:
            f.write("0")  # "0" is the writer itself, whatever its PID namespace


def _outermost(paths):
    """Drop every path that lies inside another one of paths or of the system folders."""
    kept = []
    for path in sorted(set(paths)):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in (*_SYSTEM, *kept)):
            kept.append(path)
    return kept


def _bind(root, path):
    """Bind host path (and its submounts) at the same place under root."""
    if os.path.dirname(path) == path:  # "/": the whole host, its sockets included
        raise OSError(errno.EINVAL, f"refusing to expose the host's root {path!r}")
    target = root + path
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(path, target, None, MS_BIND | MS_REC)


def _build_root(root, needed, workdir, disk_bytes, uid):
    """Populate root with the read-only host paths the interpreter needs and a capped work folder."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for top in _SYSTEM:
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            _bind(root, top)
    for path in _outermost(needed):
        _bind(root, path)
    dev = root + "/dev"
    os.mkdir(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in _DEVICES:
        open(f"{dev}/{name}", "w").close()
        _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    os.symlink("/proc/self/fd", f"{dev}/fd")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dev}/{name}")
    os.makedirs(root + workdir)
    os.mkdir(root + "/proc")
    # One pass makes every mount so far read-only, host submounts included; /dev keeps
    # its device nodes usable.
    _set_attrs(root, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    _set_attrs(dev, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NODEV)
    _mount("proc", root + "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    options = f"size={disk_bytes},mode=0700,uid={uid},gid={uid}"
    _mount("tmpfs", root + workdir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)


def _copy_in(folder, copies, uid):
    """Copy each (host source, name) into folder, owned by the judge's uid."""
    os.mkdir(folder)
    os.chown(folder, uid, uid)
    for source, name in copies:
        target = os.path.join(folder, name)
        # sendfile, not shutil: shutil would import re, slowing every jail's start.
        with open(source, "rb") as src, open(target, "wb") as dst:
            while os.sendfile(dst.fileno(), src.fileno(), None, 1 << 30):
                pass
        os.chown(target, uid, uid)


def _enter(root):
    """Make root the root of this mount namespace and let go of the host's."""
    os.chdir(root)
    _check(_libc.syscall(ctypes.c_long(_machine["pivot_root"]), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host root")
    os.chdir("/")


def _limit(limits):
    caps = {
        resource.RLIMIT_AS: limits["memory_bytes"],
        resource.RLIMIT_CPU: limits["cpu_seconds"],
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_bytes"],
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_CORE: 0,
    }
    for which, value in caps.items():
        # A soft CPU limit below the hard one delivers SIGXCPU (reported as a timeout)
        # before the SIGKILL the hard limit sends.
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))


def _seccomp_program():
    """BPF: refuse (EPERM) AF_UNIX socket/socketpair, io_uring and non-native ABIs."""
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, ...|JGE|K, BPF_RET
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, _ERRNO
    m = _machine
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, m["arch"]), (ret, 0, 0, deny), (ld, 0, 0, 0)]
    if m["x32_bit"]:
        prog += [(jge, 0, 1, m["x32_bit"]), (ret, 0, 0, deny)]
    for nr in _IO_URING:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny)]
    prog += [
        (jeq, 1, 0, m["socket"]),
        (jeq, 0, 3, m["socketpair"]),
        (ld, 0, 0, 16),  # the low half of args[0], the address family
        (jeq, 0, 1, 1),  # AF_UNIX
        (ret, 0, 0, deny),
        (ret, 0, 0, allow),
    ]
    return prog


def _confine():
    """Set no_new_privs and install the seccomp filter (inherited across fork and exec)."""
    zero = ctypes.c_ulong(0)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), zero, zero, zero), "no_new_privs")
    prog = _seccomp_program()
    filters = (_SockFilter * len(prog))(*(_SockFilter(*p) for p in prog))
    fprog = _SockFprog(len(prog), filters)
    flags = ctypes.c_ulong(SECCOMP_MODE_FILTER)
    _check(_libc.prctl(PR_SET_SECCOMP, flags, ctypes.byref(fprog), zero, zero), "seccomp")


def _run_runner(spec, read_end, write_end):
    """In the forked child: chdir, limit, drop to the judge's uid, confine, exec the runner."""
    workdir = spec["workdir"]
    try:
        os.close(write_end)
        os.dup2(read_end, 0)
        os.chdir(workdir)
        _limit(spec["limits"])
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
        _confine()
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        os.execve(spec["python"], [spec["python"], "-I", "-B", spec["runner"]], env)
    except (OSError, ValueError) as exc:
        print(f"sandbox: cannot start the judge: {exc}", file=sys.stderr)
    os._exit(125)


def main():
    """Build the sandbox from the spec file named in argv and run the judge in it."""
    # marshal, not json: the spec comes from the same interpreter, and importing json
    # would cost about a tenth of a trivial judge's run.
    with open(sys.argv[1], "rb") as f:
        spec = marshal.load(f)
    root, workdir = spec["root"], spec["workdir"]
    try:
        if _machine is None:
            raise OSError(errno.ENOSYS, f"no seccomp filter for {os.uname().machine}")
        _join_cgroup(spec["cgroup_procs"])
        _build_root(root, spec["needed_paths"], workdir, spec["disk_bytes"], spec["uid"])
    except OSError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        sys.exit(125)
    try:
        _copy_in(root + workdir + "/artifacts", spec["copies"], spec["uid"])
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            print(f"sandbox: cannot copy the artifacts in: {exc}", file=sys.stderr)
            sys.exit(125)
        detail = f"its artifacts do not fit in its {spec['disk_bytes']}-byte work folder"
        print(f'{{"status": "disk", "detail": "{detail}"}}')
        sys.exit(0)
    try:
        _enter(root)
    except OSError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        sys.exit(125)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        _run_runner(spec, read_end, write_end)
    os.close(read_end)
    try:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(spec["job"])  # JSON, encoded by the host
    except BrokenPipeError:
        pass  # the runner died before reading; its exit status tells the story
    while True:  # as PID 1, reap every orphan until the runner itself is done
        pid, status = os.wait()
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        sys.exit(128 + os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
