"""Desktops as Docker containers: the same server API and isolation, one container each.

A Docker desktop runs the desktop image (infra/images/build.sh) with the same chain as a
native desktop, inside a container instead of host namespaces:

    container (own mount, PID, IPC and UTS namespaces; memory and pids caps by Docker)
      └─ init.py (PID 1: /home/user, private /tmp..., reaps orphans)
           └─ server.py (HTTP on the host's 127.0.0.1:PORT; host uid `DockerDesktop.uid` + 65535)
                └─ Xvfb, dbus, openbox, apps... (the agent's user namespace and network:
                                                 uid 0 inside = host uid `DockerDesktop.uid`)

The container shares the host's network only so that its server can listen on the host's
loopback (the daemon runs with no bridge); the desktop's apps live in a network namespace
of their own with only a loopback, as on a native desktop. The container sees no host file:
its root is the image, and its home lives in the container. It needs CAP_SYS_ADMIN for
init's mounts and namespaces, which are made before anything of the agent's runs; the agent
is an unprivileged host uid with no capability outside its user namespace.

A container is removed when its desktop stops. A container outlives a host process that
dies without stopping it (the daemon owns it, where a native desktop dies with its owner):
each is labelled with its owner, and the next provider to start on the host removes those
whose owner is gone.

    async with DockerDesktop.started() as desktop:
        async with desktop.controller() as ctl:
            await ctl.step({"action": "left_click", "coordinate": [500, 500]})
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from runtime.envs.desktop.controller import DesktopController
from runtime.errors import DesktopError
from runtime.isolation.ids import DESKTOP_UIDS, IdLease, lease_ids

__all__ = [
    "DEFAULT_MEMORY_BYTES",
    "DEFAULT_PIDS",
    "DockerDesktop",
    "ID_COUNT",
    "IMAGE",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "desktop_image",
    "docker_url",
]

log = logging.getLogger(__name__)

IMAGE = "scalecua-desktop:latest"  # what infra/images/build.sh tags its last desktop build
START_TIMEOUT = 60.0  # seconds for a desktop to report ready
STOP_TIMEOUT = 10  # seconds for a graceful stop before Docker kills the container
DEFAULT_MEMORY_BYTES = int(os.environ.get("SCALECUA_DESKTOP_MEMORY_MB", "2048")) << 20
DEFAULT_PIDS = int(os.environ.get("SCALECUA_DESKTOP_PIDS", "512"))
ID_COUNT = 65536  # ids per desktop, as native desktops lease them
# The project's own daemon (infra/images/dockerd.sh), then the default one.
_SOCKETS = ("/run/scalecua-docker/docker.sock", "/var/run/docker.sock")
_STATE = "/var/lib/scalecua-desktop"  # inside the container: the home and the server's run folder
_SOURCE = "/opt/scalecua"  # inside the image: the project's `runtime` package
_PYTHON = "/opt/venv/bin/python"
_SERVER = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module('runtime.envs.desktop.server', run_name='__main__', alter_sys=True)"
)
_OWNER_LABEL = "scalecua.desktop.owner"
_WATCH_RETRY_MAX_S = 10.0  # the longest wait between tries to reach a daemon that went away
# Desktops this process started and has not stopped: a container of this process's that is not
# one of them is stale (its removal failed while the daemon was away) and goes with the orphans.
_LIVE: set[str] = set()


def docker_url() -> str:
    """The Docker daemon to use: $DOCKER_HOST, else the project's own socket or the default."""
    if url := os.environ.get("DOCKER_HOST"):
        return url
    for path in _SOCKETS:
        if os.path.exists(path):
            return f"unix://{path}"
    raise DesktopError(
        "no Docker daemon: set DOCKER_HOST, or start one with `bash infra/containers.sh images`"
    )


def desktop_image() -> str:
    """The desktop image to run: $SCALECUA_DESKTOP_IMAGE, else scalecua-desktop:latest."""
    return os.environ.get("SCALECUA_DESKTOP_IMAGE") or IMAGE


def _client() -> Any:
    try:
        import aiodocker
    except ImportError as exc:
        raise DesktopError(
            "Docker desktops need aiodocker: pip install 'scalecua[docker]'"
        ) from exc
    return aiodocker.Docker(url=docker_url())


async def _owner(docker: Any) -> str:
    """Who owns the desktops this process starts: this run of its container (a restarted
    container is a new owner), else the process itself."""
    if container := _own_container():
        with contextlib.suppress(Exception):
            state = (await docker.containers.get(container))._container.get("State", {})
            return f"container:{container}@{state.get('StartedAt', '')}"
    return f"process:{_process_key(os.getpid())}"


def _own_container() -> str | None:
    """The id of the Docker container this process runs in (cgroup v1 paths), if any."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            tail = line.rsplit("/", 1)[-1].removeprefix("docker-").removesuffix(".scope")
            if "docker" in line and len(tail) == 64:
                return tail
    return None


def _process_key(pid: int) -> str | None:
    """Host, PID namespace, pid and start time: names one process for as long as it lives."""
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    start = stat[stat.rfind(b")") + 2 :].split()[19].decode()
    return f"{socket.gethostname()}:{pidns}:{pid}:{start}"


class DockerDesktop:
    """One desktop in a container: the desktop server's API on the host's 127.0.0.1:PORT."""

    def __init__(
        self,
        *,
        desktop_id: str,
        docker: Any,
        container: Any,
        base_url: str,
        token: str,
        display: str,
        size: tuple[int, int],
        lease: IdLease,
    ) -> None:
        self.desktop_id = desktop_id
        self.container_id: str = container.id
        self.uid = lease.first  # the host uid (and gid) that is root inside the desktop
        self.base_url = base_url
        self.token = token
        self.display = display
        self.size = size
        self.home = Path(f"{_STATE}/home")  # inside the container, not on the host
        self._docker = docker
        self._container = container
        self._lease = lease
        self._stopped = False
        self._exited = False
        self._watch = asyncio.create_task(self._watch_exit())

    def __repr__(self) -> str:
        return f"DockerDesktop(id={self.desktop_id}, container={self.container_id[:12]}, url={self.base_url})"

    @classmethod
    async def start(
        cls,
        *,
        width: int = 1280,
        height: int = 800,
        root: Path | None = None,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        pids: int = DEFAULT_PIDS,
        image: str | None = None,
    ) -> DockerDesktop:
        """Start a desktop container and return it once its server answers; raise DesktopError.

        `memory_bytes` and `pids` cap the whole container (as native desktops are capped);
        `root` is accepted for the native provider's signature and unused.
        """
        del root
        docker = _client()
        try:
            await _remove_orphans(docker)
            lease = lease_ids(DESKTOP_UIDS, count=ID_COUNT)
        except (RuntimeError, OSError) as exc:
            await docker.close()
            raise DesktopError(f"no host uid block for a desktop: {exc}") from exc
        except BaseException as exc:
            await docker.close()
            if _is_docker_error(exc):  # the daemon gone, or refusing
                raise DesktopError(f"docker desktop failed to start: {exc}") from exc
            raise
        desktop_id = uuid.uuid4().hex[:12]
        token = secrets.token_urlsafe(24)
        container = None
        _LIVE.add(desktop_id)  # before its container exists: never taken for a stale one
        try:
            container = await _create(
                docker, desktop_id, token, lease.first, width, height, memory_bytes, pids,
                image or desktop_image(),
            )  # fmt: skip
            ready = await asyncio.wait_for(_read_ready(container), START_TIMEOUT)
        except BaseException as exc:
            tail = await _log_tail(container) if container is not None else ""
            if container is not None:
                with contextlib.suppress(Exception):
                    await container.delete(force=True)
            _LIVE.discard(desktop_id)
            lease.release()
            await docker.close()
            if isinstance(exc, (TimeoutError, DesktopError)) or _is_docker_error(exc):
                raise DesktopError(f"docker desktop failed to start: {exc!r} {tail}") from exc
            raise
        desktop = cls(
            desktop_id=desktop_id,
            docker=docker,
            container=container,
            base_url=f"http://127.0.0.1:{ready['port']}",
            token=token,
            display=ready["display"],
            size=(ready["width"], ready["height"]),
            lease=lease,
        )
        log.info(
            "docker desktop %s up in %s at %s", desktop_id, container.id[:12], desktop.base_url
        )
        return desktop

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, **kwargs: Any) -> AsyncIterator[DockerDesktop]:
        """`async with DockerDesktop.started() as d:` starts a desktop and stops it on exit."""
        desktop = await cls.start(**kwargs)
        try:
            yield desktop
        finally:
            await desktop.stop()

    async def __aenter__(self) -> DockerDesktop:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def controller(self, **kwargs: Any) -> DesktopController:
        """Return a new controller for this desktop (close it, or use `async with`)."""
        return DesktopController(self.base_url, self.token, **kwargs)

    @property
    def alive(self) -> bool:
        """Whether the desktop's container is still running."""
        return not self._exited and not self._stopped

    def memory(self) -> dict[str, int]:
        """Bytes of memory the container's cgroup charges (cgroup v1 `memory.usage_in_bytes`)."""
        for path in (
            f"/sys/fs/cgroup/memory/{self.container_id}/memory.usage_in_bytes",
            f"/sys/fs/cgroup/memory/docker/{self.container_id}/memory.usage_in_bytes",
            f"/sys/fs/cgroup/system.slice/docker-{self.container_id}.scope/memory.current",
        ):
            with contextlib.suppress(OSError):
                return {"usage": int(Path(path).read_text())}
        return {"usage": 0}

    async def reset(self) -> None:
        """Close every app and window and restore the home skeleton; services stay warm."""
        if not self.alive:
            raise DesktopError(f"docker desktop {self.desktop_id} is not running")
        async with self.controller(timeout=30.0, retries=1) as ctl:
            await ctl.reset_desktop()

    async def stop(self) -> None:
        """Stop and remove the container and give its uid block back; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watch
        try:
            # init forwards SIGTERM to the server, which stops its services (Xvfb last).
            with contextlib.suppress(Exception):
                await self._container.stop(t=STOP_TIMEOUT)
            with contextlib.suppress(Exception):
                await self._container.delete(force=True)
        finally:
            _LIVE.discard(self.desktop_id)
            # Only now that no process runs under its ids may the block go to another desktop.
            self._lease.release()
            await self._docker.close()

    async def _watch_exit(self) -> None:
        """Mark the desktop dead as soon as its container exits (killed, crashed, OOM).

        A daemon that stops answering is not the container exiting: the container runs on
        without it and its server still answers, so the watch waits for the daemon to answer
        again (a restarted daemon reports the containers it stopped as exited).
        """
        wait = 1.0
        while True:
            try:
                await self._container.wait(timeout=None)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - DockerError, or the connection cut
                if getattr(exc, "status", None) == 404:
                    break  # removed: gone
                if wait == 1.0:
                    log.warning("lost the Docker daemon while watching desktop %s (%s); it serves "
                                "on while its container runs", self.desktop_id, exc)  # fmt: skip
                await asyncio.sleep(wait)
                wait = min(2 * wait, _WATCH_RETRY_MAX_S)
        self._exited = True
        if not self._stopped:
            log.warning("docker desktop %s exited", self.desktop_id)


async def _create(
    docker: Any,
    desktop_id: str,
    token: str,
    uid: int,
    width: int,
    height: int,
    memory_bytes: int,
    pids: int,
    image: str,
) -> Any:
    home = f"{_STATE}/home"
    # The home belongs to the desktop's root (host uid `uid`), as a native desktop's does.
    prepare = f"mkdir -p {home} && chown {uid}:{uid} {home} && chmod 700 {_STATE} {home}"
    argv = [
        _PYTHON, f"{_SOURCE}/runtime/envs/desktop/init.py", "--home", home, "--hide", _STATE,
        "--uid", str(uid), "--count", str(ID_COUNT), "--keep-root", "--",
        _PYTHON, "-P", "-c", _SERVER, _SOURCE, "--id", desktop_id,
        "--width", str(width), "--height", str(height),
    ]  # fmt: skip
    config = {
        "Image": image,
        "Cmd": ["sh", "-c", f'{prepare} && exec "$@"', "desktop", *argv],
        "Env": [f"SCALECUA_DESKTOP_TOKEN={token}"],
        "Labels": {"scalecua.desktop": desktop_id, _OWNER_LABEL: await _owner(docker)},
        "HostConfig": {
            # The server listens on the host's loopback; the apps get a network of their own.
            "NetworkMode": "host",
            "Memory": memory_bytes,
            "MemorySwap": memory_bytes,  # no swap beyond the cap
            "PidsLimit": pids,
            "CapAdd": ["SYS_ADMIN"],  # init's mounts and the apps' user and network namespaces
            "Init": False,  # init.py is PID 1
        },
    }
    if await _cgroupfs(docker):
        # Each desktop's cgroup directly under the root, as a peer of the host's processes
        # (as a native desktop's processes are), not inside Docker's one `docker` group whose
        # single CPU weight all containers share: there, 4 desktops beside a busy host process
        # got 0.73x the native steps/s; here 1.0x (bench/containers.py).
        config["HostConfig"]["CgroupParent"] = "/"
    try:
        return await docker.containers.run(config, name=f"scalecua-desktop-{desktop_id}")
    except Exception as exc:
        if _is_docker_error(exc) and getattr(exc, "status", 0) == 404:
            raise DesktopError(
                f"no desktop image {image!r}: build it with `bash infra/containers.sh images`"
            ) from exc
        raise


async def _cgroupfs(docker: Any) -> bool:
    """Whether the daemon manages cgroups itself (cgroupfs), where any parent path is allowed."""
    with contextlib.suppress(Exception):
        return (await docker.system.info()).get("CgroupDriver") == "cgroupfs"
    return False


async def _read_ready(container: Any) -> dict[str, Any]:
    """Return the server's ready line from the container's stdout."""
    async for chunk in container.log(stdout=True, follow=True, timeout=None):
        for line in chunk.splitlines():
            try:
                ready = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(ready, dict) and "port" in ready:
                return ready
    raise DesktopError("the desktop container exited before its server was ready")


async def _log_tail(container: Any) -> str:
    with contextlib.suppress(Exception):
        lines = await container.log(stdout=True, stderr=True, tail=5)
        return " | ".join(line.rstrip() for line in lines if line.strip())
    return ""


async def _remove_orphans(docker: Any) -> None:
    """Remove desktop containers whose owner (a process here, or a container) is gone, and
    this process's own that it stopped while the daemon was away."""
    own = await _owner(docker)
    for container in await docker.containers.list(all=True, filters={"label": [_OWNER_LABEL]}):
        labels = container._container.get("Labels", {})
        owner = labels.get(_OWNER_LABEL, "")
        stale = owner == own and labels.get("scalecua.desktop") not in _LIVE
        if not stale and not await _owner_gone(docker, owner):
            continue
        log.info("removing docker desktop %s left by %s", container.id[:12], owner)
        with contextlib.suppress(Exception):
            await container.delete(force=True)


async def _owner_gone(docker: Any, owner: str) -> bool:
    kind, _, name = owner.partition(":")
    if kind == "container":
        container, _, started = name.partition("@")
        try:
            state = (await docker.containers.get(container))._container.get("State", {})
        except Exception:  # noqa: BLE001 - no such container: gone
            return True
        return not state.get("Running", False) or state.get("StartedAt", "") != started
    if kind == "process":
        host, pidns, pid, _start = (name.split(":", 3) + ["", "", ""])[:4]
        if host != socket.gethostname() or pidns != str(os.stat("/proc/self/ns/pid").st_ino):
            return False  # another machine's or namespace's process: not ours to judge
        return not pid.isdigit() or _process_key(int(pid)) != name
    return False


def _is_docker_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "DockerError" or isinstance(exc, OSError)
