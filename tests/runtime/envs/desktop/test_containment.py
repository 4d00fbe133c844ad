"""A hostile agent on a real desktop, native and Docker: it plays the attacks of issue 30 from
inside (containment_attack.py, run as root inside like any program of the agent's) and gets
nothing: not the host's loopback (a secret served there, the broker, another desktop's
server), in any spelling, directly, through the desktop's gateway or a headless browser;
not the server (hidden from /proc, not signalled, traced, entered or robbed of a
descriptor); not the desktop's token. The server still answers the host afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtime.addresses import host_addresses
from runtime.broker import EmbeddedBroker
from runtime.envs.desktop.browser_net import NETWORK_ENV
from runtime.envs.desktop.lifecycle import Desktop
from tests.containers import REPO, ensure_images

pytestmark = pytest.mark.desktop

ATTACK = Path(__file__).with_name("containment_attack.py")
SYSTEM = {
    "bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root",
    "run", "sbin", "sys", "tmp", "usr", "var",
}  # fmt: skip
# ...and the top folders of what the server runs on, wherever the checkout and interpreter are
# (/work here, /check on CI): the package, the interpreter's prefixes and its import path.
ROOT = SYSTEM | {
    Path(os.path.realpath(p)).parts[1:2][0]
    for p in (REPO, sys.prefix, sys.base_prefix, sys.executable, *filter(None, sys.path))
    if os.path.realpath(p) != "/" and os.path.exists(p)
}
# The project's own data and code beside the `runtime` package: none of it has a path inside.
HOST_PATHS = [
    str(REPO / name) for name in ("README.md", ".git", "tests", "var", "consumers", "infra")
] + [os.environ.get("SCALECUA_HOME", "/nonexistent"), "/work/shared", "/srv", "/mnt", "/var/log"]
SPELLINGS = [
    "127.0.0.1", "localhost", "127.1", "2130706433", "0.0.0.0", "::1", "::ffff:127.0.0.1",
    "::127.0.0.1", "64:ff9b::7f00:1", socket.gethostname(),
]  # fmt: skip


@pytest.fixture(scope="module")
def secret() -> str:
    """What the host serves on its loopback only."""
    return f"host-only-{secrets.token_hex(8)}"


@pytest.fixture
async def secret_port(secret: str) -> AsyncIterator[int]:
    """An HTTP server on the host's 127.0.0.1 whose every answer holds the secret."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1000)
        body = secret.encode()
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture(scope="module")
def web_policy() -> Iterator[None]:
    """Desktops started meanwhile let the live web through (the most their gateway opens)."""
    before = os.environ.get(NETWORK_ENV)
    os.environ[NETWORK_ENV] = "web"
    yield
    if before is None:
        os.environ.pop(NETWORK_ENV)
    else:
        os.environ[NETWORK_ENV] = before


@pytest.fixture(scope="module")
async def native(desktop_root: Path, web_policy: None) -> AsyncIterator[Desktop]:
    """A native desktop whose gateway reaches the live web."""
    async with Desktop.started(root=desktop_root) as d:
        yield d


@pytest.fixture(scope="module")
async def docker_desktop() -> AsyncIterator[object]:
    """A Docker desktop with the default (local) gateway."""
    os.environ["DOCKER_HOST"] = ensure_images("desktop")
    from runtime.envs.desktop.docker import DockerDesktop

    async with DockerDesktop.started() as d:
        yield d


async def _attack(desktop: object, spec: dict) -> dict:
    async with desktop.controller(timeout=600) as ctl:  # type: ignore[attr-defined]
        await ctl.upload_file("/home/user/attack.py", ATTACK.read_bytes())
        await ctl.upload_file("/home/user/spec.json", json.dumps(spec).encode())
        result = await ctl.execute(
            ["python3", "/home/user/attack.py", "/home/user/spec.json"], timeout=600
        )
        assert result["returncode"] == 0, result
        report = json.loads(result["output"])
        # The real server still answers, and its process runs on.
        assert (await ctl.execute(["echo", "still mine"]))["output"] == "still mine\n"
        assert (await ctl.health())["status"] == "success"
    return report


def _judge(report: dict, secret: str, image_root: bool = False) -> None:
    assert report["uid"] == 0  # root inside, as the agent is
    # The server and init exist (a signal says so) but show in no /proc, and every attempt
    # on them is refused: no signal, no trace, no descriptor, no namespace, no file of theirs.
    assert len(report["hidden"]) >= 2, report["hidden"]
    for pid, tried in report["hidden"].items():
        assert tried["signal0"] == "EPERM" and tried["SIGSTOP"] != "allowed", (pid, tried)
        assert tried["ptrace"] != "attached", (pid, tried)
        assert "stolen" not in tried.get("pidfd_getfd", []), (pid, tried)
        assert "entered" not in (tried.get("setns_net"), tried.get("setns_user")), (pid, tried)
        for leaf in ("environ", "net/tcp", "cmdline", "fd", "ns/net", "mem"):
            assert tried[leaf] != "read", (pid, leaf, tried)
    for port, outcome in report["direct"].items():
        assert outcome.startswith("refused"), (port, outcome)
    # No other network namespace (the host's, a browser's) can be named and entered.
    for path, tried in report["networks"].items():
        assert tried["setns"] != "entered", (path, tried)
    for target, outcome in report["gateway"].items():
        assert not outcome.startswith("connected"), (target, outcome)
    for port, page in report["browser"].items():
        assert secret not in page, (port, page[:300])
    assert report["token"] == [], report["token"]
    # A root of the desktop's own: the system, its own scratch, and what the server runs on
    # (a container's is its image, which holds nothing of the host).
    assert image_root or set(report["root"]) <= ROOT, report["root"]
    # The project's files: nowhere; the host's own folders: not in a native desktop's root
    # (an image has empty ones of its own).
    project = (str(REPO), os.environ.get("SCALECUA_HOME", "/nonexistent"), "/work/shared")
    seen = [p for p, there in report["paths"].items() if there]
    assert not [p for p in seen if not image_root or p.startswith(project)], seen
    for path in report["sockets"]:  # X's, the session bus's: the desktop's own
        assert path.startswith(("/tmp/", "/run/", "/home/user/", "/dev/")), path
    assert secret not in json.dumps(report)


def _spec(secret_port: int, broker: EmbeddedBroker, other: str, token: str) -> dict:
    ports = [secret_port, broker.port, int(other.rsplit(":", 1)[1])]
    own = [str(a) for a in host_addresses()]
    return {
        "host_ports": ports,
        "spellings": [*SPELLINGS, *own],
        "browser_ports": [secret_port, broker.port],
        "token": token,
        "host_paths": HOST_PATHS,
    }


async def test_an_agent_reaches_nothing_of_the_host_from_a_native_desktop(
    native: Desktop, desktop: Desktop, secret: str, secret_port: int, broker: EmbeddedBroker
) -> None:
    report = await _attack(native, _spec(secret_port, broker, desktop.base_url, native.token))
    _judge(report, secret)


async def test_an_agent_reaches_nothing_of_the_host_from_a_docker_desktop(
    docker_desktop: object,
    desktop: Desktop,
    secret: str,
    secret_port: int,
    broker: EmbeddedBroker,
) -> None:
    token = docker_desktop.token  # type: ignore[attr-defined]
    report = await _attack(docker_desktop, _spec(secret_port, broker, desktop.base_url, token))
    _judge(report, secret, image_root=True)
