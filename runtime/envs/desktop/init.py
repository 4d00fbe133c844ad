"""PID 1 of one desktop's private PID and mount namespace.

Run as host root by `unshare --mount --pid --fork --mount-proc` (see lifecycle.py), with
the standard library only, so it starts in a few milliseconds. It builds the desktop's
view of the filesystem, then starts the desktop server as its only direct child in a
user namespace of its own, and from then on only reaps orphans (apps launched detached
end up here), forwards SIGTERM/SIGINT/SIGHUP to the server, and exits with the server's
status; the kernel then kills whatever is left in the namespace.

The view is a root of its own (pivot_root; nothing else of the host is in it): the
system read-only at its paths (/usr, /etc, /bin..., /var/lib, /var/cache, /sys); what the
server runs on, read-only at its paths (the interpreter's prefixes, the `runtime` package
this file belongs to, the folders on its import path), under parents that can be passed
but not listed (so /root and the project's checkout show nothing else); `/home/user`, a
bind mount of the desktop's home folder under a tmpfs `/home`; `/tmp`, `/var/tmp`,
`/dev/shm` and `/run/lock`, private tmpfs, so X sockets, LibreOffice's pipe and anything
else left there is this desktop's alone; `/run`, a tmpfs of the server's; a /dev of a few
devices and a devpts of its own; and its own /proc. No host daemon's socket, no other
desktop's files, no project data (archives, checkpoints, logs) has a path in it.

System settings of the apps as OSWorld's VM image has them (Thunderbird's first-run
defaults) are added to the system's folders in this view only: each folder under
`system/` beside this file (`system/etc/thunderbird/pref`) gets a read-only tmpfs holding
the host's files plus ours; the host's folders stay untouched.

The server runs as root of a user namespace of its own, mapped onto the host block
[uid, uid + count) leased by the host: its root is the block's last id, and its ids
1..count-1 are the block's first count-1, which the server maps again into the agent's
user namespace (namespaces.py), so that the agent's root is host `uid`. The agent is root
inside, and an unprivileged, unshared uid on the host, with no capability over any mount,
host file, other desktop, or the server (another uid, in a namespace above the agent's).
`/proc` shows a process only to whoever may trace it (`hidepid=invisible`): the agent sees
neither init nor the server, which both live in the host's network.

The desktop's token comes in `SCALECUA_DESKTOP_TOKEN`; init takes it out of the environment
the server and everything after inherit, and hands it to the server through a pipe
(`--token-fd N`, appended to the server's arguments).

    python init.py --home HOST_HOME --hide STATE_ROOT --uid FIRST --count N [--keep-root] \
        -- SERVER_ARGV...

In a container (`--keep-root`) the root is the image, which holds nothing of the host: the
desktop's own folders are mounted over it in place (a container may not pivot_root).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

__all__ = ["TOKEN_ENV", "main"]

_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 8, 32, 4096, 16384, 1 << 18
_MNT_DETACH, _AT_FDCWD, _AT_RECURSIVE = 2, -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 1, 2, 4
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_SYS_MOUNT_SETATTR = 442  # the same on both
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECUREBITS, _SECBIT_NO_SETUID_FIXUP = 28, 1 << 2
TOKEN_ENV = "SCALECUA_DESKTOP_TOKEN"
# What a desktop sees of the host, read-only, at the same paths: the system (programs,
# libraries, settings, the package database, caches such as fontconfig's) and sysfs.
# Merged-/usr symlinks (/bin -> usr/bin) are copied as symlinks.
_SYSTEM_FOLDERS = (
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/var/lib", "/var/cache", "/sys",
)  # fmt: skip
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
# A fresh tmpfs each, the agent's: what apps expect to write to, no desktop meets another.
_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_OWN = ("/home", "/run", "/proc", "/dev", *_SCRATCH)  # the desktop's own, never the host's
_SYSTEM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "system")
_PACKAGE = os.path.realpath(__file__).rsplit("/", 3)[0]  # <source>/runtime/envs/desktop/init.py
_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _server_folders() -> list[str]:
    """The folders the server needs: the interpreter's (venv, base install, the binary's real
    home), the package this file belongs to and every folder on the import path, without any
    that another contains."""
    real_home = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    package = _PACKAGE
    folders = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, real_home, package)}
    # The server runs this interpreter with the same environment, so it imports from the
    # same path: .pth entries and PYTHONPATH folders too, at the path it will use them by.
    folders |= {os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)}
    folders -= {"/", *_OWN}  # never a whole folder of the desktop's own
    for folder in folders:
        if folder == "/home/user" or folder.startswith("/home/user/"):
            raise OSError(f"{folder} is needed by the desktop server, but a desktop mounts its "
                          "own home at /home/user: install or clone the project elsewhere")  # fmt: skip
    return [f for f in sorted(folders) if not any(f.startswith(o + "/") for o in folders)]


def _makedirs(path: str, mode: int = 0o711) -> None:
    """Make `path` and its missing parents: traversable, not listable, by default."""
    if os.path.isdir(path):
        return
    _makedirs(os.path.dirname(path), mode)
    os.mkdir(path)
    os.chmod(path, mode)


def _bind(root: str, path: str) -> None:
    """Bind host `path` (and its submounts) at the same place under `root`."""
    target = root + path
    if os.path.isdir(path):
        _makedirs(target)
    else:
        _makedirs(os.path.dirname(target))
        open(target, "a").close()
    _mount(path, target, None, _MS_BIND | _MS_REC, None)


def _listable_source(root: str, bound: list[str]) -> None:
    """Let the folder holding the `runtime` package be listed (the server imports from it),
    where it is one this root made to hold the package alone."""
    source = os.path.dirname(_PACKAGE)
    if source not in bound and os.path.isdir(root + source):
        os.chmod(root + source, 0o755)


def _read_only(root: str) -> None:
    """Make every mount at or under `root` read-only, nosuid and nodev."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0)
    rc = _libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), root.encode(),
        ctypes.c_uint(_AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
    )  # fmt: skip
    if rc == 0:
        return
    # An engine whose seccomp profile predates mount_setattr: one remount per mount.
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    for point in points:
        if point == root or point.startswith(root + "/"):
            _mount(None, point, None, flags, None)


def _isolate(home: str, hide: str, uid: int, server_uid: int, keep_root: bool) -> None:
    """Build the desktop's root and make it this namespace's: the system read-only, what the
    server runs on read-only, its own /home, /tmp..., /run, /dev and /proc; no other host file.

    `keep_root`: the root already holds nothing of the host (a container's image); the
    desktop's own folders are mounted over it in place."""
    owned = f"uid={uid},gid={uid}"  # root inside owns its scratch folders
    server = f"uid={server_uid},gid={server_uid}"
    folders = _server_folders()
    later = [f for f in folders if any(f.startswith(o + "/") for o in _OWN)]
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)  # nothing here leaks to the host
    root = "" if keep_root else _new_root(home, [f for f in folders if f not in later])
    _mount("tmpfs", root + "/home", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,{owned}")
    os.mkdir(root + "/home/user", 0o755)
    _mount(home, root + "/home/user", None, _MS_BIND | _MS_REC, None)
    # /run is the server's (its run folder); no host daemon's socket or state is there.
    _mount("tmpfs", root + "/run", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,{server}")
    os.mkdir(root + "/run/lock")
    _make_dev(root + "/dev")
    for scratch in _SCRATCH:
        _makedirs(root + scratch, 0o1777)
        _mount("tmpfs", root + scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,{owned}")
    # A process shows in /proc only to those who may trace it: the agent sees neither init
    # nor the server (their /proc/PID/net would list the host's sockets, their environ and
    # descriptors are theirs alone).
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _mount("proc", root + "/proc", "proc", flags, "hidepid=invisible")
    # A clone or venv in /tmp or a home folder: bound back, read-only, into the tmpfs.
    for folder in later:
        _bind(root, folder)
        _listable_source(root, folders)
        _read_only(root + folder)
    # Every desktop's state folder stays covered, should a bound folder hold it.
    if hide and os.path.isdir(root + hide):
        _mount("tmpfs", root + hide, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0711,{server}")
    if root:
        _pivot(root)


def _new_root(home: str, folders: list[str]) -> str:
    """A read-only root of the system and the server's `folders`, at their paths, with
    mount points for the desktop's own folders; return its path (in the state folder)."""
    root = os.path.join(os.path.dirname(home), "root")
    os.mkdir(root, 0o755)
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for folder in _OWN:
        _makedirs(root + folder, 0o755)
    for top in _SYSTEM_FOLDERS:
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            _bind(root, top)
    for folder in folders:
        _bind(root, folder)
    _listable_source(root, folders)
    for folder, files in _system_additions().items():
        _add_files(root + folder, folder, files)
    os.symlink("/run", root + "/var/run")
    os.symlink("/run/lock", root + "/var/lock")
    _read_only(root)
    return root


def _make_dev(dev: str) -> None:
    """A /dev of the few devices apps use, and terminals of the desktop's own."""
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in _DEVICES}  # may be covered
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k")
    for name, fd in devices.items():
        open(f"{dev}/{name}", "w").close()
        _mount(f"/proc/self/fd/{fd}", f"{dev}/{name}", None, _MS_BIND, None)
        os.close(fd)
    os.mkdir(f"{dev}/pts")
    os.mkdir(f"{dev}/shm")
    _mount("devpts", f"{dev}/pts", "devpts", _MS_NOSUID | _MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=0620")  # fmt: skip
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    os.symlink("/proc/self/fd", f"{dev}/fd")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dev}/{name}")


def _pivot(root: str) -> None:
    """Make `root` the root of this mount namespace and let go of the host's."""
    os.chdir(root)
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"no pivot_root system call number for {os.uname().machine}")
    if _libc.syscall(ctypes.c_long(number), b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if _libc.umount2(b".", _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"detaching the host's root: {os.strerror(err)}")
    os.chdir("/")


def _system_additions() -> dict[str, dict[str, bytes]]:
    """Files under `system/` by the host folder they join, for folders the host has."""
    additions: dict[str, dict[str, bytes]] = {}
    for root, _dirs, names in os.walk(_SYSTEM):
        folder = "/" + os.path.relpath(root, _SYSTEM)
        if names and os.path.isdir(folder):
            additions[folder] = {}
            for name in names:
                with open(os.path.join(root, name), "rb") as f:
                    additions[folder][name] = f.read()
    return additions


def _add_files(target: str, folder: str, files: dict[str, bytes]) -> None:
    """Show host `folder` at `target` as its files (a flat folder of small ones) plus `files`."""
    kept = {}
    for entry in os.scandir(folder):
        if entry.is_file():
            with open(entry.path, "rb") as f:
                kept[entry.name] = f.read()
    _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for name, data in {**kept, **files}.items():
        fd = os.open(os.path.join(target, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _become_owner(owner: int) -> None:
    """Take `owner` as effective uid and gid, keeping root's capabilities, so that the user
    namespace created next is owned by it.

    The kernel charges the per-user limits of everything in a user namespace (inotify
    instances and watches, user namespaces, pending signals, message queues) to the
    namespace's owner on the host as well: owned by host root, every desktop would share
    root's budget (fs.inotify.max_user_instances, 128 by default, is spent by 64 desktops'
    two dbus daemons; the 65th desktop's apps get no inotify at all). Owned by its block's
    last id, each desktop has a budget of its own, as each VM has. Root's capabilities are
    kept through the change (SECBIT_NO_SETUID_FIXUP) so the namespace is still created by a
    privileged process, which hosts restricting unprivileged user namespaces allow.
    """
    _check_prctl(_PR_SET_SECUREBITS, _SECBIT_NO_SETUID_FIXUP)
    os.setresgid(-1, owner, -1)
    os.setresuid(-1, owner, -1)


def _check_prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")


def _start_server(argv: list[str], uid: int, count: int, token: str) -> int:
    """Fork the server into a new user namespace over [uid, uid+count), its root the block's
    last id, handing it the token through a pipe; return its pid."""
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    token_r, token_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(mapped_w)
            os.close(token_w)
            os.setgroups([])  # host root's groups must not follow it in
            _become_owner(uid + count - 1)
            if _libc.unshare(_CLONE_NEWUSER) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
            _check_prctl(_PR_SET_SECUREBITS, 0)  # back to the usual rules, for all it starts
            os.write(ready_w, b"u")
            if os.read(mapped_r, 1) != b"m":
                os._exit(70)
            # Only a process still in the parent namespace may write a map wider than one
            # id, so init writes it; then become root inside, the block's last id outside.
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            os.set_inheritable(token_r, True)
            os.execvp(argv[0], [*argv, "--token-fd", str(token_r)])
        except BaseException as exc:  # noqa: BLE001 - report anything, never return into init
            print(f"desktop init: starting the server: {exc}", file=sys.stderr, flush=True)
        os._exit(70)
    os.close(ready_w)
    os.close(mapped_r)
    os.close(token_r)
    try:
        with os.fdopen(token_w, "w") as pipe:
            pipe.write(token)
        if os.read(ready_r, 1) != b"u":
            raise OSError("the server could not create its user namespace")
        # The server's root is the block's last id; its ids 1..count-1 are the block's first
        # count-1, which it maps into the agent's namespace (root inside = host `uid`).
        mapping = f"0 {uid + count - 1} 1\n1 {uid} {count - 1}\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(mapping)
        os.write(mapped_w, b"m")
    finally:
        os.close(ready_r)
        os.close(mapped_w)
    return pid


def main() -> int:
    """Isolate the namespace, run the server, reap children; return the server's status."""
    if "--" not in sys.argv:
        print(
            "usage: init.py --home DIR [--hide DIR] --uid N --count N [--keep-root] -- SERVER_ARGV...",
            file=sys.stderr,
        )
        return 64
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True)
    parser.add_argument("--hide", default="")
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--count", type=int, default=65536)
    parser.add_argument("--keep-root", action="store_true", help="the root is a container's image")
    args = parser.parse_args(sys.argv[1:split])
    argv = sys.argv[split + 1 :]
    # Nothing started from here on inherits the token in its environment.
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        print(f"desktop init: {TOKEN_ENV} is not set", file=sys.stderr, flush=True)
        return 64
    try:
        _isolate(args.home, args.hide, args.uid, args.uid + args.count - 1, args.keep_root)
        os.chdir("/home/user")
        server = _start_server(argv, args.uid, args.count, token)
    except OSError as exc:
        print(f"desktop init: {exc}", file=sys.stderr, flush=True)
        return 70

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(server, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == server:
            return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main())
