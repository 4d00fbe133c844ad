"""`containers.sh up` says which run the stack's broker holds, and when it is a new one.

The embedded broker keeps its log in memory: when it comes back (its process killed and
restarted by its restart policy, or the Docker daemon restarted with every container), the
log is empty and the run a new one. `up` must say so instead of its usual lines. Only the
broker is brought up (`up broker`), on the real images and engine.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.containers import REPO, docker, ensure_images

pytestmark = pytest.mark.desktop
NEW_CONTAINER = "compose made a new broker container (a new image or settings)"
WARNING = (
    r"\[containers\] warning: the broker came back empty \((.+?)\): "
    r"run (\S+) is a new run, and run (\S+)'s log is gone \(.*\)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _containers_sh(*args: str, env: dict[str, str]) -> tuple[str, str]:
    done = subprocess.run(["bash", str(REPO / "infra/containers.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout, done.stderr


def _runs(text: str) -> list[str]:
    return [line for line in text.splitlines() if "[containers]" in line and " run " in line]


@pytest.mark.timeout(1500)
def test_up_says_when_the_broker_came_back_with_a_new_run(tmp_path: Path) -> None:
    host = ensure_images("desktop", "service")
    project = f"scalecua-runtest-{os.getpid()}"
    env = {
        **os.environ,
        "DOCKER_HOST": host,
        "SCALECUA_COMPOSE_PROJECT": project,
        "SCALECUA_BROKER_PORT": str(_free_port()),
        "SCALECUA_DASHBOARD_PORT": str(_free_port()),
        "SCALECUA_HOME": str(tmp_path / "home"),  # where `up` keeps the run it saw
        "SCALECUA_KEEP_DOCKERD": "1",  # other test files may use the same engine
    }
    broker = f"{project}-broker-1"

    def broker_id() -> str:
        return docker("inspect", "-f", "{{.Id}}", broker, host=host).stdout.strip()

    def up_broker(expected_reason: str) -> tuple[str, str]:
        """`up broker`, then what it said of the run: ("goes on" | reason, the run id)."""
        before = broker_id()
        out, err = _containers_sh("up", "broker", env=env)
        assert out.splitlines()[-1].startswith("SCALECUA_BOOTSTRAP="), out
        [said] = _runs(out + err)
        if said.endswith("goes on (the broker kept its log)") and said in out:
            return "goes on", said.split()[2]
        # Others editing the checkout meanwhile rebuild the image, and compose then makes a
        # new broker container: a new run too, and `up` must name that cause instead.
        reason = expected_reason if broker_id() == before else NEW_CONTAINER
        found = re.fullmatch(WARNING, said)
        assert found and said in err and found.group(1) == reason, (reason, said)
        return found.group(1), found.group(2)

    try:
        out, err = _containers_sh("up", "broker", env=env)
        [said] = _runs(out + err)
        assert re.fullmatch(r"\[containers\] run \S+: a new run \(the broker's log starts empty\)",
                            said) and said in out, said  # fmt: skip
        run = said.split()[2].rstrip(":")

        what, now = up_broker("goes on")
        assert now == run or what == NEW_CONTAINER, (what, now, run)
        run = now

        # The broker's process dies; its restart policy brings it back with an empty log.
        state = json.loads(docker("inspect", broker, host=host).stdout)[0]["State"]
        os.kill(state["Pid"], 9)
        deadline = time.monotonic() + 60
        while True:
            info = json.loads(docker("inspect", broker, host=host).stdout)[0]
            if info["RestartCount"] >= 1 and info["State"]["Running"]:
                break
            assert time.monotonic() < deadline, "the broker was not restarted"
            time.sleep(1)
        what, now = up_broker("the broker restarted")
        assert what != "goes on" and now != run, (what, now, run)

        # `down` ends the run: the next `up` starts a new one, and says just that.
        _containers_sh("down", env=env)
        out, err = _containers_sh("up", "broker", env=env)
        [said] = _runs(out + err)
        assert "a new run (the broker's log starts empty)" in said and now not in said, said
    finally:
        _containers_sh("down", "--volumes", env=env)
