"""What a hostile agent tries from inside its desktop, run there as root inside; prints JSON.

test_containment.py runs this file with the desktop's `python3` through `/execute` (as the
agent's own programs run) and judges the answers: every attempt on the host, the server,
the broker or another desktop must get nothing. Standard library only (ctypes for the
system calls a root agent would make directly).

    python3 containment_attack.py SPEC.json   # {"host_ports": [...], "token": "...", ...}

The token is in the spec only to be looked for: the spec file is the one place skipped.
"""

import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD, PTRACE_ATTACH, PTRACE_DETACH = 434, 438, 16, 17
libc = ctypes.CDLL(None, use_errno=True)


def errno_of(rc):
    return None if rc >= 0 else os.strerror(ctypes.get_errno())


def visible_pids():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())


def hidden_processes(limit=4096):
    """Pids that exist (a signal 0 says so) but /proc does not show, and what each allows."""
    shown = set(visible_pids())
    found = {}
    for pid in range(1, limit):
        if pid in shown:
            continue
        try:
            os.kill(pid, 0)
            if os.path.exists(f"/proc/{pid}"):
                continue  # one of the agent's own, started since the listing
            found[pid] = {"signal0": "allowed"}
        except ProcessLookupError:
            continue
        except PermissionError:
            found[pid] = {"signal0": "EPERM"}
    for pid, tried in found.items():
        for name, sig in (("SIGSTOP", signal.SIGSTOP),):
            try:
                os.kill(pid, sig)
                tried[name] = "allowed"
                if sig == signal.SIGSTOP:
                    os.kill(pid, signal.SIGCONT)
            except OSError as exc:
                tried[name] = exc.strerror
        rc = libc.ptrace(PTRACE_ATTACH, pid, None, None)
        tried["ptrace"] = errno_of(rc) or "attached"
        if rc == 0:
            libc.ptrace(PTRACE_DETACH, pid, None, None)
        pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
        tried["pidfd_open"] = errno_of(pidfd) or "opened"
        if pidfd >= 0:
            stolen = [libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0) for fd in range(64)]
            tried["pidfd_getfd"] = sorted({errno_of(fd) or "stolen" for fd in stolen})
            for kind, flag in (("net", CLONE_NEWNET), ("user", CLONE_NEWUSER)):
                tried[f"setns_{kind}"] = errno_of(libc.setns(pidfd, flag)) or "entered"
            os.close(pidfd)
        for leaf in ("environ", "net/tcp", "cmdline", "fd", "ns/net", "mem"):
            path = f"/proc/{pid}/{leaf}"
            try:
                os.listdir(path) if leaf == "fd" else open(path, "rb").read(64)
                tried[leaf] = "read"
            except OSError as exc:
                tried[leaf] = exc.strerror
    return found


def other_networks():
    """Every network namespace this agent can name (a process's ns link, or a descriptor
    some process holds on one) other than its own."""
    mine = os.stat("/proc/self/ns/net").st_ino
    found = {}
    for pid in visible_pids():
        try:
            paths = [f"/proc/{pid}/ns/net"]
            paths += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        for path in paths:
            try:
                is_net = path.endswith("/ns/net") or os.readlink(path).startswith("net:")
                inode = os.stat(path).st_ino
            except OSError:
                continue
            if is_net and inode != mine and inode not in found.values():
                found[path] = inode
    return found


def from_network(path, ports):
    """Enter the network namespace at `path` (in a child) and try the host's ports there."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            fd = os.open(path, os.O_RDONLY)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                result = {"setns": os.strerror(ctypes.get_errno())}
            else:
                result = {"setns": "entered"}
                for port in ports:
                    result[f"direct:{port}"] = connect("127.0.0.1", port)
                    result[f"gateway:{port}"] = through_gateway("127.0.0.1", port)
        except OSError as exc:
            result = {"setns": exc.strerror}
        os.write(write_fd, json.dumps(result).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def connect(host, port):
    """A direct TCP connection from the agent's network: what happened."""
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"GET /secret.txt HTTP/1.0\r\n\r\n")
            return "connected: " + sock.recv(200).decode(errors="replace")
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


def through_gateway(host, port, gateway=1080):
    """A SOCKS5 CONNECT through the desktop's gateway; what came back."""
    try:
        with socket.create_connection(("127.0.0.1", gateway), timeout=5) as sock:
            sock.sendall(b"\x05\x01\x00")
            if sock.recv(2) != b"\x05\x00":
                return "no gateway"
            name = host.encode()
            sock.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", port))
            reply = sock.recv(10)
            if len(reply) < 2 or reply[1] != 0:
                return f"refused: {reply[1] if len(reply) > 1 else 'closed'}"
            sock.sendall(b"GET /secret.txt HTTP/1.0\r\n\r\n")
            # A Kafka ApiVersions request, in case the port is the broker's.
            sock.sendall(struct.pack("!ihhi", 10, 18, 0, 1) + b"\x00\x00")
            return "connected: " + sock.recv(200).decode(errors="replace")
    except OSError as exc:
        return f"error: {exc.strerror or exc}"


def browser_fetch(url):
    """Headless Chrome, as the agent would start it from a terminal."""
    try:
        done = subprocess.run(
            ["google-chrome", "--headless=new", "--dump-dom", url],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"


def token_findable(token, spec_path):
    """Where the desktop's token shows, in anything this agent can read (but the spec)."""
    places = []
    for pid in visible_pids():
        if pid == os.getpid():
            continue
        for leaf in ("environ", "cmdline"):
            try:
                if token.encode() in open(f"/proc/{pid}/{leaf}", "rb").read():
                    places.append(f"/proc/{pid}/{leaf}")
            except OSError:
                pass
    for top in ("/run", "/tmp", "/home/user", "/dev/shm"):
        for root, _dirs, names in os.walk(top):
            for name in names:
                path = os.path.join(root, name)
                if path == spec_path:
                    continue
                try:
                    with open(path, "rb") as f:
                        if token.encode() in f.read(1 << 20):
                            places.append(path)
                except OSError:
                    pass
    return places


def unix_sockets(tops=("/var", "/etc", "/run", "/tmp", "/home", "/dev", "/work", "/root", "/opt")):
    """Every Unix socket with a path this agent can see, where it may look."""
    found = []
    for top in tops:
        for root, dirs, names in os.walk(top):
            for name in names + dirs:
                path = os.path.join(root, name)
                try:
                    if os.lstat(path).st_mode & 0o170000 == 0o140000:
                        found.append(path)
                except OSError:
                    pass
    return found


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    report = {"uid": os.getuid(), "visible": visible_pids(), "hidden": hidden_processes()}
    report["direct"] = {str(p): connect("127.0.0.1", p) for p in spec["host_ports"]}
    report["networks"] = {path: from_network(path, spec["host_ports"]) for path in other_networks()}
    report["gateway"] = {
        f"{h}:{p}": through_gateway(h, p) for p in spec["host_ports"] for h in spec["spellings"]
    }
    report["browser"] = {
        str(p): browser_fetch(f"http://127.0.0.1:{p}/secret.txt") for p in spec["browser_ports"]
    }
    report["token"] = token_findable(spec["token"], sys.argv[1])
    report["root"] = sorted(os.listdir("/"))
    report["paths"] = {path: os.path.exists(path) for path in spec["host_paths"]}
    report["sockets"] = unix_sockets()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
