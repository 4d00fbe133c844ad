"""PID 1 of one desktop's private PID and mount namespace.

Run as host root by `unshare --mount --pid --fork --mount-proc` (see lifecycle.py), with
the standard library only, so it starts in a few milliseconds. It builds the desktop's
view of the filesystem, then starts the desktop server as its only direct child in a
user namespace of its own, and from then on only reaps orphans (apps launched detached
end up here), forwards SIGTERM/SIGINT/SIGHUP to the server, and exits with the server's
status; the kernel then kills whatever is left in the namespace.

The view: `/home/user` is a bind mount of the desktop's home folder (under a tmpfs
`/home`); `/tmp`, `/var/tmp`, `/dev/shm` and `/run/lock` (the host's world-writable
folders) are private tmpfs, so X sockets, LibreOffice's pipe and anything else left there
is this desktop's alone; every desktop's state folder is covered; and what the server
needs to run (the interpreter's prefixes, the source tree this file belongs to and the
folders on its import path) stays visible, read-only: bound back into the tmpfs over the
folder it lives under (a clone and venv in /tmp or /home/alice), or, under a folder others
may not enter (`/root` with pyenv), behind an empty tmpfs that holds only those folders.

System settings of the apps as OSWorld's VM image has them (Thunderbird's first-run
defaults) are added to the system's folders in this view only: each folder under
`system/` beside this file (`system/etc/thunderbird/pref`) gets a read-only tmpfs holding
the host's files plus ours; the host's folders stay untouched.

The server's user namespace maps uids and gids 0..count-1 inside onto the host block
[uid, uid + count) leased by the host: the agent is root inside, and an unprivileged,
unshared uid on the host, with no capability over any mount, host file or other desktop.

    python init.py --home HOST_HOME --hide STATE_ROOT --uid FIRST --count N -- SERVER_ARGV...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import stat
import sys

_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS = 38
# World-writable on a Debian host: one tmpfs each per desktop, so no desktop meets another.
_SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_COVERED = (*_SHARED_SCRATCH, "/home")  # each gets a tmpfs of its own in a desktop
_SYSTEM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "system")
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _closed_ancestor(path: str) -> str | None:
    """The topmost folder above `path` that others may not enter, if any."""
    parts = os.path.realpath(path).split("/")[1:]
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder
    return None


def _server_folders() -> list[str]:
    """The folders the server needs: the interpreter's (venv, base install, the binary's real
    home), the source tree holding this package and every folder on the import path, without
    any that another contains."""
    real_home = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    source = os.path.realpath(__file__).rsplit("/", 4)[0]  # <source>/runtime/envs/desktop/init.py
    folders = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, real_home, source)}
    # The server runs this interpreter with the same environment, so it imports from the
    # same path: .pth entries and PYTHONPATH folders too, at the path it will use them by
    # (a symlink under /tmp is bound back where it was, holding what it pointed at).
    folders |= {os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)}
    folders -= {"/", *_COVERED}  # never a whole covered folder: it stays private
    return [f for f in sorted(folders) if not any(f.startswith(o + "/") for o in folders)]


def _under_covered(path: str) -> bool:
    """Whether `path` lies under a folder a desktop covers with a tmpfs (/tmp..., /home)."""
    return any(path.startswith(s + "/") for s in _COVERED)


def _bind_readonly(path: str, fd: int) -> None:
    """Mount the folder open as `fd` at `path` (made if missing), read-only."""
    _makedirs(path)
    _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
    _mount("none", path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
    os.close(fd)


def _isolate(home: str, hide: str, uid: int) -> None:
    # Open what is bound later before anything is covered: the sources may be covered.
    home_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    additions = _system_additions()
    covered, exposed = [], {}
    for folder in _server_folders():
        if folder == "/home/user" or folder.startswith("/home/user/"):
            raise OSError(f"{folder} is needed by the desktop server, but a desktop mounts its "
                          "own home at /home/user: install or clone the project elsewhere")  # fmt: skip
        if _under_covered(folder):  # under a tmpfs the desktop mounts: bound back into it
            covered.append((folder, os.open(folder, os.O_PATH)))
        elif closed := _closed_ancestor(folder):
            exposed.setdefault(closed, []).append((folder, os.open(folder, os.O_PATH)))
    owned = f"uid={uid},gid={uid}"  # root inside owns its scratch folders
    _mount("tmpfs", "/home", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,{owned}")
    os.mkdir("/home/user", 0o755)
    _mount(f"/proc/self/fd/{home_fd}", "/home/user", None, _MS_BIND | _MS_REC, None)
    os.close(home_fd)
    for scratch in _SHARED_SCRATCH:
        if os.path.isdir(scratch):
            _mount("tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,{owned}")
    for folder, fd in covered:  # parents made in the tmpfs: traversable, not listable
        _bind_readonly(folder, fd)
    for closed, prefixes in exposed.items():
        # Traversable, not listable: /root reads as empty and closed, the interpreter runs.
        _mount("tmpfs", closed, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0711")
        for folder, fd in prefixes:
            _bind_readonly(folder, fd)
    for folder, files in additions.items():
        _add_files(folder, files)
    # Cover every desktop's state folder last, so that no folder bound back above uncovers
    # it (unless it was under /tmp, covered already); the server keeps its run folder here.
    if hide and os.path.isdir(hide):
        _mount("tmpfs", hide, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0700,{owned}")


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


def _add_files(folder: str, files: dict[str, bytes]) -> None:
    """Show `folder` as the host's files (a flat folder of small ones) plus `files`, read-only."""
    kept = {}
    for entry in os.scandir(folder):
        if entry.is_file():
            with open(entry.path, "rb") as f:
                kept[entry.name] = f.read()
    _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for name, data in {**kept, **files}.items():
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    _mount("none", folder, None, _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_RDONLY, None)


def _makedirs(path: str) -> None:
    if os.path.isdir(path):
        return
    _makedirs(os.path.dirname(path))
    os.mkdir(path)
    os.chmod(path, 0o711)


def _start_server(argv: list[str], uid: int, count: int) -> int:
    """Fork the server into a new user namespace mapped onto [uid, uid+count); return its pid."""
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(mapped_w)
            os.setgroups([])  # host root's groups must not follow it in
            if _libc.unshare(_CLONE_NEWUSER) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
            os.write(ready_w, b"u")
            if os.read(mapped_r, 1) != b"m":
                os._exit(70)
            # Only a process still in the parent namespace may write a map wider than one
            # id, so init writes it; then become root inside, host `uid` outside.
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            os.execvp(argv[0], argv)
        except BaseException as exc:  # noqa: BLE001 - report anything, never return into init
            print(f"desktop init: starting the server: {exc}", file=sys.stderr, flush=True)
        os._exit(70)
    os.close(ready_w)
    os.close(mapped_r)
    try:
        if os.read(ready_r, 1) != b"u":
            raise OSError("the server could not create its user namespace")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {uid} {count}\n")
        os.write(mapped_w, b"m")
    finally:
        os.close(ready_r)
        os.close(mapped_w)
    return pid


def main() -> int:
    """Isolate the namespace, run the server, reap children; return the server's status."""
    if "--" not in sys.argv:
        print(
            "usage: init.py --home DIR [--hide DIR] --uid N --count N -- SERVER_ARGV...",
            file=sys.stderr,
        )
        return 64
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True)
    parser.add_argument("--hide", default="")
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--count", type=int, default=65536)
    args = parser.parse_args(sys.argv[1:split])
    argv = sys.argv[split + 1 :]
    try:
        _isolate(args.home, args.hide, args.uid)
        os.chdir("/home/user")
        server = _start_server(argv, args.uid, args.count)
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
