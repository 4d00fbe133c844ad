"""Docker desktops when the Docker daemon dies (kill -9) and comes back, on real containers.

The daemon killed here is a second one of the project's kind (infra/images/dockerd.sh with a
data root and socket of its own), never the one other tests share: the desktop image is
copied into it from the shared daemon (`docker save | docker load`, about 35 s, and only when
the image changed; its data root stays as a cache like the shared one's).
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.envs.desktop.pool import DesktopPool
from tests.containers import _LOCK as IMAGES_LOCK
from tests.containers import REPO, docker, ensure_images

pytestmark = pytest.mark.desktop

ROOT = Path("/var/lib/scalecua-docker-test-daemon")
RUN = Path("/run/scalecua-docker-test-daemon")
SOCKET = f"unix://{RUN}/docker.sock"
IMAGE = "scalecua-desktop:latest"


def _dockerd(function: str) -> str:
    """Run a function of infra/images/dockerd.sh against the test's own daemon."""
    env = {**os.environ, "SCALECUA_DOCKER_ROOT": str(ROOT), "SCALECUA_DOCKER_RUN": str(RUN),
           "DOCKER_HOST": SOCKET}  # fmt: skip
    script = f"source {REPO}/infra/images/dockerd.sh && {function} >&2 && echo $DOCKER_HOST"
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=180, check=True)  # fmt: skip
    return done.stdout.strip()


def _image_id(host: str) -> str:
    return docker("image", "inspect", "-f", "{{.Id}}", IMAGE, host=host, check=False).stdout.strip()


@pytest.fixture(scope="module")
def own_daemon() -> Iterator[str]:
    """A daemon of the project's kind that this test may kill, holding the shared desktop image."""
    shared = ensure_images("desktop")
    host = _dockerd("ensure_dockerd")
    if host != SOCKET:  # another daemon answered first: not ours to kill
        pytest.skip(f"the test's own daemon did not start ({host} answered)")
    try:
        # Under the suite's build lock: another session's build could move the tag mid-copy.
        with open(IMAGES_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _image_id(host) != _image_id(shared):
                save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE,
                                        env={**os.environ, "DOCKER_HOST": shared})  # fmt: skip
                load = subprocess.run(["docker", "load", "-q"], stdin=save.stdout, timeout=600,
                                      env={**os.environ, "DOCKER_HOST": host},
                                      capture_output=True, text=True)  # fmt: skip
                assert save.wait(60) == 0 and load.returncode == 0, load.stderr
        yield host
    finally:
        _dockerd("stop_dockerd")


def _desktop_containers(host: str) -> list[str]:
    out = docker("ps", "-a", "--filter", "label=scalecua.desktop", "--format",
                 '{{.Label "scalecua.desktop"}}', host=host).stdout  # fmt: skip
    return out.split()


async def _until(what: str, check, timeout: float) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.2)


@pytest.mark.timeout(600)
async def test_the_pool_plays_on_through_a_dead_daemon_and_refills_once_it_is_back(
    own_daemon: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DOCKER_HOST", own_daemon)
    caplog.set_level(logging.INFO, logger="runtime.envs.desktop")
    unretrieved: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context["message"]))
    async with DesktopPool(1, kind="docker", retry_first_s=0.5, retry_max_s=2.0) as pool:
        async with pool.acquire() as desktop:
            first = desktop.desktop_id
            inside = json.loads(docker("inspect", desktop.container_id, host=own_daemon).stdout)
            os.kill(int((RUN / "dockerd.pid").read_text()), signal.SIGKILL)
            # The container runs on without its daemon: the desktop is not "exited", it serves.
            await asyncio.sleep(3)
            assert desktop.alive
            async with desktop.controller(retries=0) as ctl:
                assert (await ctl.screenshot()).startswith(b"\x89PNG")
            # Now the desktop dies too, while no daemon can start its replacement.
            os.kill(inside[0]["State"]["Pid"], signal.SIGKILL)
        await _until("the pool to report the failing start", lambda: not pool.healthy, 30)
        await _until("a retry", lambda: pool.start_failures >= 2, 30)
        stats = pool.stats()
        assert stats["desktops_healthy"] == 0 and stats["desktops_failing"] == 1, stats
        retries = [r.getMessage() for r in caplog.records
                   if r.name.endswith("pool") and r.levelno == logging.WARNING
                   and "failed to start" in r.getMessage()]  # fmt: skip
        assert retries and "Cannot connect to Docker Engine" in retries[0], retries
        assert "retrying in 0.5 s" in retries[0] and "retrying in 1 s" in retries[1], retries

        # The daemon is back (the project's own start): the pool refills and plays again.
        await asyncio.to_thread(_dockerd, "ensure_dockerd")
        async with asyncio.timeout(120):
            async with pool.acquire() as fresh:
                assert fresh.desktop_id != first
                async with fresh.controller() as ctl:
                    assert (await ctl.screenshot()).startswith(b"\x89PNG")
        assert pool.healthy and pool.stats()["desktops_healthy"] == 1
        # The dead desktop's container, which could not be removed while the daemon was
        # away, went with the replacement's start.
        assert _desktop_containers(own_daemon) == [fresh.desktop_id]
    assert _desktop_containers(own_daemon) == []
    gc.collect()
    assert "Task exception was never retrieved" not in unretrieved, unretrieved
