"""Docker desktops: real containers from the desktop image, behind the same server API, with
the same isolation (memory and pids caps, no host files, own /tmp and network, an unprivileged
host uid inside), the pool's reset and replacement, and no container left behind.

The image comes from infra/images/build.sh (about 2 minutes on a fresh machine, seconds once
its content hash matches); the engine is the project's own dockerd when none answers."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.envs.desktop.docker import DockerDesktop
from runtime.envs.desktop.pool import DesktopPool
from runtime.errors import DesktopError
from runtime.isolation.ids import DESKTOP_UIDS
from tests.containers import REPO, docker, ensure_images

pytestmark = pytest.mark.desktop


@pytest.fixture(scope="module")
def docker_host() -> str:
    """The engine, with the desktop image built (or found by its content hash)."""
    host = ensure_images("desktop")
    os.environ["DOCKER_HOST"] = host
    return host


@pytest.fixture(scope="module")
async def desktop(docker_host: str) -> AsyncIterator[DockerDesktop]:
    """One Docker desktop for the module, capped low enough to test the caps."""
    async with DockerDesktop.started(memory_bytes=700 << 20, pids=200) as d:
        yield d


def _uids_in_block(first: int) -> set[int]:
    """The real uids of the host's processes that fall in the block starting at `first`."""
    found = set()
    for pid in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # not a process, or one that just ended
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if first <= uid < first + 65536:
            found.add(uid)
    return found


def _containers(host: str, label: str) -> list[str]:
    out = docker("ps", "-a", "-q", "--filter", f"label={label}", host=host).stdout
    return out.split()


async def test_a_docker_desktop_serves_the_api_isolated(desktop: DockerDesktop, docker_host: str):
    marker = Path("/tmp") / f"host-only-{secrets.token_hex(4)}"
    marker.write_text("host")
    try:
        await desktop.reset()
        async with desktop.controller() as ctl:
            png = await ctl.screenshot()
            assert png.startswith(b"\x89PNG") and desktop.size == (1280, 800)
            # Root inside is the leased, unprivileged host uid block.
            # (its map names the server's namespace, whose id 1 is the block's first)
            uid_map = (await ctl.execute(["cat", "/proc/self/uid_map"]))["output"].split()
            assert uid_map == ["0", "1", "65535"] and desktop.uid in DESKTOP_UIDS
            owners = await asyncio.to_thread(_uids_in_block, desktop.uid)
            assert owners == {desktop.uid, desktop.uid + 65535}, owners  # the agent, the server
            # No host file: not the host's /tmp, not the project's checkout, not /root.
            assert (await ctl.execute(["cat", str(marker)]))["returncode"] != 0
            assert (await ctl.execute(["ls", str(REPO / "tests")]))["returncode"] != 0
            assert (await ctl.execute(["ls", "/root/.cache"]))["returncode"] != 0
            # Its own /tmp: what it writes there stays inside.
            await ctl.execute(["sh", "-c", f"echo inside > /tmp/{marker.name}-in"])
            assert not (Path("/tmp") / f"{marker.name}-in").exists()
            # Its apps' network has a loopback and nothing else.
            devices = (await ctl.execute(["cat", "/proc/net/dev"]))["output"]
            assert [line.split(":")[0].strip() for line in devices.splitlines()[2:]] == ["lo"]
    finally:
        marker.unlink()
    caps = json.loads(docker("inspect", desktop.container_id, host=docker_host).stdout)[0]
    assert caps["HostConfig"]["Memory"] == 700 << 20
    assert caps["HostConfig"]["PidsLimit"] == 200
    assert caps["HostConfig"]["Binds"] in (None, [])  # no host folder mounted
    # A peer of the host's processes for the CPU (not inside Docker's shared `docker` group),
    # as a native desktop is: 4 desktops beside a busy host process kept native throughput.
    assert await asyncio.to_thread(os.path.isdir, f"/sys/fs/cgroup/cpu/{desktop.container_id}")


async def test_caps_hold_inside_a_docker_desktop(desktop: DockerDesktop) -> None:
    await desktop.reset()
    async with desktop.controller() as ctl:
        bomb = (
            "import os, time\n"
            "n = 0\n"
            "for _ in range(400):\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            os.close(1)\n"
            "            os.close(2)\n"
            "            time.sleep(120)\n"
            "            os._exit(0)\n"
            "    except OSError:\n"
            "        break\n"
            "    n += 1\n"
            "print(n)\n"
        )
        forked = await ctl.execute(["python", "-c", bomb], timeout=60)
        assert 0 < int(forked["output"]) < 200, forked
        await desktop.reset()
        assert (await ctl.execute(["echo", "alive"]))["output"] == "alive\n"
        hog = await ctl.execute(["python", "-c", "b = bytearray(1200 << 20)"], timeout=60)
        assert hog["returncode"] == -9, hog
        assert (await ctl.execute(["echo", "still"]))["output"] == "still\n"


async def test_reset_closes_apps_and_restores_the_home(desktop: DockerDesktop) -> None:
    await desktop.reset()
    async with desktop.controller() as ctl:
        await ctl.launch(["xterm", "-T", "leftover"])
        assert await ctl.wait_for_window("leftover", 20)
        await ctl.upload_file("/home/user/Desktop/dirty.txt", b"x")
        await desktop.reset()
        assert await ctl.get_file("/home/user/Desktop/dirty.txt") is None
        windows = (await ctl.execute(["wmctrl", "-l"]))["output"]
        assert "leftover" not in windows


async def test_pool_replaces_a_killed_container_and_the_episode_sees_a_desktop_error(
    docker_host: str,
) -> None:
    async with DesktopPool(1, kind="docker") as pool:
        async with pool.acquire() as d:
            dead = d.desktop_id
            docker("kill", d.container_id, host=docker_host)
            async with d.controller(retries=0) as ctl:
                with pytest.raises(DesktopError):
                    await ctl.screenshot()
            for _ in range(50):
                if not d.alive:
                    break
                await asyncio.sleep(0.1)
            assert not d.alive
        async with pool.acquire() as fresh:
            assert fresh.desktop_id != dead
            async with fresh.controller() as ctl:
                assert (await ctl.screenshot()).startswith(b"\x89PNG")
        assert _containers(docker_host, f"scalecua.desktop={dead}") == []
    for desktop in (fresh,):
        assert _containers(docker_host, f"scalecua.desktop={desktop.desktop_id}") == []


async def test_containers_of_a_dead_owner_are_removed_by_the_next_start(docker_host: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import asyncio, sys\n"
         "from runtime.envs.desktop.docker import DockerDesktop\n"
         "async def main():\n"
         "    d = await DockerDesktop.start()\n"
         "    print(d.desktop_id, flush=True)\n"
         "    await asyncio.sleep(600)\n"
         "asyncio.run(main())\n"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        left = owner.stdout.readline().strip()
        assert left, "the owner process did not start its desktop"
    finally:
        owner.kill()
        owner.wait()
    assert _containers(docker_host, f"scalecua.desktop={left}") != []
    async with DockerDesktop.started() as d:
        assert d.alive
        assert _containers(docker_host, f"scalecua.desktop={left}") == []


def test_tasks_check_on_docker_desktops(docker_host: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "tasks", "check", "terminal_write_greeting",
         "--desktops", "1", "--desktops-kind", "docker"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["untouched"] == 0.0 and result["solved"] == 1.0 and result["sound"]


def test_the_desktops_kind_comes_from_the_argument_then_the_environment(monkeypatch) -> None:
    from runtime.envs.desktop.lifecycle import Desktop
    from runtime.envs.desktop.pool import desktop_provider, desktops_kind
    from runtime.errors import ConfigError

    monkeypatch.delenv("SCALECUA_DESKTOPS_KIND", raising=False)
    assert desktops_kind() == "native" and desktop_provider() is Desktop
    monkeypatch.setenv("SCALECUA_DESKTOPS_KIND", "docker")
    assert desktop_provider() is DockerDesktop
    assert desktop_provider("native") is Desktop
    with pytest.raises(ConfigError, match="unknown desktops kind 'vm'"):
        DesktopPool(1, kind="vm")
