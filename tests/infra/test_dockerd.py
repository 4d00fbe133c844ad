"""Who stops the project's own Docker daemon (infra/images/dockerd.sh), on a real dockerd.

A daemon started for a command (a build, `bench/containers.py`, a test session) stops when
the last command using it ends, unless a container runs on it; one the stack holds
(`containers.sh up`) stays until `down`. Each test runs a daemon of its own (its own data
root and socket), so the one other tests share is never touched.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import REPO

pytestmark = pytest.mark.desktop

DOCKERD = REPO / "infra/images/dockerd.sh"


@pytest.fixture
def daemon_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a project daemon of this test's own (stopped at the end)."""
    run = Path(f"/run/scalecua-docker-test-{os.getpid()}")
    env = {**os.environ, "SCALECUA_DOCKER_ROOT": str(tmp_path / "docker"),
           "SCALECUA_DOCKER_RUN": str(run), "DOCKER_HOST": f"unix://{run}/docker.sock",
           "SCALECUA_HOME": str(tmp_path / "home"),
           "SCALECUA_COMPOSE_PROJECT": f"scalecua-test-{os.getpid()}"}  # fmt: skip
    env.pop("SCALECUA_KEEP_DOCKERD", None)
    if Path("/var/run/docker.sock").exists():
        pytest.skip("a default Docker daemon would answer first")
    try:
        yield env
    finally:
        _sh("stop_dockerd", env)
        subprocess.run(["rm", "-rf", str(run)], check=False)


def _sh(script: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source {DOCKERD} && {script}"], env=env,
                          capture_output=True, text=True, timeout=180, check=check)  # fmt: skip


def _daemons(env: dict[str, str]) -> list[str]:
    """The dockerd and containerd processes of the test's daemon (its exec root names both)."""
    out = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if env["SCALECUA_DOCKER_RUN"] + "/" in line
            and line.split()[0].rsplit("/", 1)[-1] in ("dockerd", "containerd")]  # fmt: skip


def _gone(env: dict[str, str], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while _daemons(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _daemons(env)


def test_a_daemon_started_for_a_command_stops_when_it_ends(daemon_env: dict[str, str]) -> None:
    # A build started the daemon; a benchmark (Python, holding the users' lock) uses it too.
    _sh("ensure_dockerd", daemon_env)
    assert len(_daemons(daemon_env)) == 2  # dockerd and its containerd
    users = Path(daemon_env["SCALECUA_DOCKER_RUN"]) / "users.lock"
    with open(users, "a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        _sh("ensure_dockerd && release_dockerd", daemon_env)  # the build ends: still in use
        assert len(_daemons(daemon_env)) == 2
    _sh("release_dockerd", daemon_env)  # the benchmark ends: nobody uses it any more
    assert _gone(daemon_env), _daemons(daemon_env)


def test_the_stack_keeps_its_daemon_and_down_hands_it_back(daemon_env: dict[str, str]) -> None:
    _sh("ensure_dockerd", daemon_env)
    _sh('rm -f "$SCALECUA_DOCKER_TRANSIENT"', daemon_env)  # what `containers.sh up` does
    _sh("ensure_dockerd && release_dockerd", daemon_env)  # a command on the stack's daemon
    assert len(_daemons(daemon_env)) == 2
    # `down`: the stack lets go of it, and nothing else uses it.
    done = subprocess.run(["bash", str(REPO / "infra/containers.sh"), "down"], env=daemon_env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert _gone(daemon_env), _daemons(daemon_env)


def test_the_benchmark_stops_the_daemon_it_started(daemon_env: dict[str, str]) -> None:
    """bench/containers.py's engine: up for the benchmark, stopped after it (issue 30)."""
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from bench.containers import docker_engine\n"
        "with docker_engine() as host:\n"
        "    print(host, flush=True)\n"
        "    os.system('docker version --format {{.Server.Version}} >/dev/null && echo answers')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=daemon_env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == [daemon_env["DOCKER_HOST"], "answers"], done.stdout
    assert lines[2].startswith("[containers] stopping dockerd"), done.stdout
    assert _gone(daemon_env), _daemons(daemon_env)
