"""The Docker engine and the project's images for the container tests, built once per machine.

`ensure_images("desktop")` starts the project's own dockerd when no daemon answers
(infra/images/dockerd.sh: no bridge, no iptables) and builds what is missing with
infra/images/build.sh, whose content-hash tags make a second call a few seconds of checks.
A file lock keeps two xdist workers from building at once. The session holds the daemon's
users' lock (infra/images/dockerd.sh) while it runs, so a daemon it had to start stops when
the session ends, unless the stack is up or another command still uses it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import subprocess
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "infra" / "images" / "build.sh"
DOCKERD = REPO / "infra" / "images" / "dockerd.sh"
_LOCK = Path(os.environ.get("SCALECUA_IMAGES_LOCK", "/tmp/scalecua-images.lock"))
_users: IO[str] | None = None  # this process's hold on the daemon (see the module doc)


def _hold_daemon() -> None:
    global _users
    if _users is None:
        run = Path(os.environ.get("SCALECUA_DOCKER_RUN", "/run/scalecua-docker"))
        run.mkdir(parents=True, exist_ok=True)
        _users = open(run / "users.lock", "a")  # noqa: SIM115 - held until the process exits
        fcntl.flock(_users, fcntl.LOCK_SH)
        atexit.register(_release_daemon)


def _release_daemon() -> None:
    global _users
    if _users is not None:
        _users.close()
        _users = None
        subprocess.run(["bash", "-c", f"source {DOCKERD} && release_dockerd"],
                       capture_output=True, check=False, timeout=120)  # fmt: skip


def ensure_images(*stages: str) -> str:
    """Build the images of `stages` (base, desktop, service) if missing; return DOCKER_HOST."""
    _hold_daemon()
    script = (
        f"source {DOCKERD} && ensure_dockerd >&2 && "
        f'bash {BUILD} {" ".join(stages)} >&2 && echo "$DOCKER_HOST"'
    )
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the images failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def docker(*args: str, host: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI against `host`."""
    return subprocess.run(
        ["docker", *args],
        env={**os.environ, "DOCKER_HOST": host},
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )
