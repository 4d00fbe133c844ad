"""The whole loop under compose on this machine (infra/compose.local.yml through
infra/containers.sh): real images built here, the real engine, real desktop containers.

One stack, one test, in the order an operator would live it: `up` brings the loop up and
rewards and policy updates flow; rollout scales to 3 and back; the trainer and the segmenter
crash (their processes killed) and their restart policy brings them back; a `docker kill`
(which Docker treats as an operator's stop, never restarted by a policy) is undone by `up`;
the audit of the log and the checkpoints then finds nothing lost and nothing trained twice;
`down` leaves no container of the stack or its desktops. The tiny policy plays episodes of
two turns of at most 16 tokens on 448-pixel screenshots, so that a batch (2 tasks x 2
rollouts) is quick on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.containers import REPO, docker, ensure_images
from tests.infra.loop_audit import audit

pytestmark = pytest.mark.desktop
PROJECT = "scalecua-test"
# How long a phase (a reward, a policy version) may take. A batch is quick on 2 idle cores,
# but the suite deals this file among its longest, at the start (tests/scheduling.py), beside
# the heaviest files on the other worker; a loop that is merely slow there should not fail.
PHASE = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _containers_sh(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", str(REPO / "infra/containers.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _running(host: str, *filters: str) -> list[str]:
    args = [a for f in filters for a in ("--filter", f)]
    return docker("ps", "-q", *args, host=host).stdout.split()


def _state(host: str, name: str) -> dict:
    info = json.loads(docker("inspect", f"{PROJECT}-{name}-1", host=host).stdout)[0]
    return {**info["State"], "restarts": info["RestartCount"]}


async def _wait(what: str, check, timeout: float) -> object:  # noqa: ANN001 - an async predicate
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(3)


# On a fresh machine the images are built first (about 2.5 minutes on 2 cores), then the run.
@pytest.mark.timeout(2400)
async def test_the_loop_under_compose_loses_nothing(tmp_path: Path) -> None:
    host = ensure_images("desktop", "service")
    bootstrap_port = _free_port()
    env = {
        **os.environ,
        "DOCKER_HOST": host,
        "SCALECUA_COMPOSE_PROJECT": PROJECT,
        "SCALECUA_BROKER_PORT": str(bootstrap_port),
        "SCALECUA_DASHBOARD_PORT": str(_free_port()),
        "SCALECUA_MAX_STEPS": "2",
        # 256 random tokens a turn on full-size screenshots were most of the loop's CPU.
        "SCALECUA_MAX_TOKENS": "16",
        "SCALECUA_IMAGE_MAX_SIDE": "448",
        "SCALECUA_KEEP_DOCKERD": "1",  # other test files may use the same engine
    }
    bootstrap = f"127.0.0.1:{bootstrap_port}"
    try:
        out = _containers_sh("up", env=env)
        assert f"SCALECUA_BOOTSTRAP={bootstrap}" in out.splitlines()[-1]
        checkpoints = Path(docker("volume", "inspect", "-f", "{{.Mountpoint}}",
                                  f"{PROJECT}_checkpoints", host=host).stdout.strip())  # fmt: skip

        async def versions() -> list[int]:
            return sorted((await audit(bootstrap, None)).updates)

        async def rewards() -> int:
            return len((await audit(bootstrap, None)).rewarded)

        # Rewards and policy updates flow.
        await _wait("a reward", rewards, PHASE)
        await _wait("policy version 1", lambda: _has(versions, 1), PHASE)

        # Rollout scales out to 3 and back to 1.
        _containers_sh("up", "--scale", "rollout=3", env=env)
        labels = f"label=com.docker.compose.project={PROJECT}"
        assert len(_running(host, labels, "label=com.docker.compose.service=rollout")) == 3
        _containers_sh("up", "--scale", "rollout=1", env=env)
        assert len(_running(host, labels, "label=com.docker.compose.service=rollout")) == 1

        # The trainer and the segmenter crash: their restart policy brings them back.
        for name in ("trainer", "segmenter"):
            os.kill(_state(host, name)["Pid"], 9)
        for name in ("trainer", "segmenter"):
            await _wait(f"{name} restarted", lambda n=name: _restarted(host, n), 60)
        # `docker kill` is an operator's stop: `up` starts the service again.
        docker("kill", f"{PROJECT}-segmenter-1", host=host)
        await _wait("segmenter stopped", lambda: _stopped(host, "segmenter"), 30)
        _containers_sh("up", env=env)
        assert _state(host, "segmenter")["Running"]
        await _wait("policy version 2", lambda: _has(versions, 2), PHASE)

        # Nothing lost, nothing trained twice: every finished trajectory is rewarded and
        # segmented (allowing the services a moment to catch up), no group is in two
        # checkpoints, no version was announced with two different checkpoints.
        async def settled():
            found = await audit(bootstrap, checkpoints)
            return found if not found.unrewarded() and not found.unsegmented() else None

        found = await _wait("every trajectory rewarded and segmented", settled, 180)
        summary = found.summary()
        assert summary["trajectories"] >= 4, summary
        assert summary["trained_twice"] == [] and summary["updates_conflicting"] == [], summary
        assert set(summary["checkpoints"]) >= {1, 2}, summary
        # A request not yet played is one of the last batches in flight, never an old one.
        in_flight = {group for group, _ in found.requests_unplayed()}
        assert len(in_flight) <= 2 * 2 * 2, summary  # at most `ahead` batches of B groups
    finally:
        members = _running(host, f"label=com.docker.compose.project={PROJECT}")
        _containers_sh("down", "--volumes", env=env)
    assert _running(host, f"label=com.docker.compose.project={PROJECT}") == []
    desktops = docker("ps", "-a", "--filter", "label=scalecua.desktop", "--format",
                      '{{.Label "scalecua.desktop.owner"}}', host=host).stdout.split()  # fmt: skip
    assert not [d for d in desktops if any(d.startswith(f"container:{m}") for m in members)]


async def _has(versions, version: int) -> bool:  # noqa: ANN001
    return version in await versions()


async def _restarted(host: str, name: str) -> bool:
    state = _state(host, name)
    return state["restarts"] >= 1 and state["Running"]


async def _stopped(host: str, name: str) -> bool:
    return not _state(host, name)["Running"]
