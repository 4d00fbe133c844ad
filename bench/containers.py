"""Docker desktops against native desktops, in one run; and the image builds, cold and cached.

Measures, for each kind (native: host namespaces; docker: a container from the desktop image):
  * start: one desktop from nothing to its server answering (sequential starts, median);
  * reset: `reset()` with a text editor and a terminal open and a file written (median);
  * throughput: screenshot+click steps/s with 1 and 4 desktops acting at once;
and the image builds of infra/images/build.sh: cached (every input unchanged: the hash
checks alone) always, and cold (the desktop image with a fresh base, Docker's layer cache
off) with `--cold`, which takes a few minutes and leaves the images as they were.
The two kinds alternate in rounds so that other load on the machine falls on both alike.

Prints a table and the docker/native ratios; `--json PATH` writes them, with the targets'
keys `reset_ratio` (docker reset / native reset; target <= 2) and `steps_per_s_ratio_4`
(docker / native steps/s with 4 desktops; target >= 0.8). `--quick` (under a minute) takes
fewer samples and shorter loops. A Docker daemon the benchmark had to start (the project's
own) stops when it ends, unless the stack is up or another command still uses it.

    python bench/containers.py --quick --json bench-containers.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERD = REPO / "infra/images/dockerd.sh"
sys.path.insert(0, str(REPO))

from runtime.envs.desktop.pool import DesktopPool, desktop_provider  # noqa: E402

KINDS = ("native", "docker")


def images(*args: str, env: dict[str, str] | None = None) -> float:
    """Run infra/images/build.sh with `args`; return its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run(["bash", str(REPO / "infra/images/build.sh"), *args], check=True,
                   env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - started


def docker_host() -> str:
    """The engine the build script uses (starting the project's own when none answers)."""
    script = f"source {DOCKERD} && ensure_dockerd >&2 && echo $DOCKER_HOST"
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def docker_engine() -> Iterator[str]:
    """The engine for the block; a daemon started for it stops after, unless still in use.

    The block holds infra/images/dockerd.sh's users' lock (shared), so no other command's end
    stops the daemon under it; leaving, release_dockerd stops the project's own daemon if it
    was started for commands, none holds it now and no container runs on it.
    """
    run = Path(os.environ.get("SCALECUA_DOCKER_RUN", "/run/scalecua-docker"))
    run.mkdir(parents=True, exist_ok=True)
    try:
        with open(run / "users.lock", "a") as users:
            fcntl.flock(users, fcntl.LOCK_SH)
            yield docker_host()
    finally:
        subprocess.run(["bash", "-c", f"source {DOCKERD} && release_dockerd"], check=False)


async def start_seconds(kind: str) -> float:
    """Start and stop one desktop of `kind`; return the start's duration."""
    t = time.perf_counter()
    desktop = await desktop_provider(kind).start()
    seconds = time.perf_counter() - t
    await desktop.stop()
    return seconds


async def reset_seconds(desktop: object) -> float:
    """Dirty a desktop as an episode would (an editor, a terminal, a file), then time reset()."""
    async with desktop.controller() as ctl:  # type: ignore[attr-defined]
        await ctl.launch(["mousepad"])
        await ctl.launch(["xterm"])
        await ctl.upload_file("/home/user/Documents/x.txt", b"x" * 10000)
        await asyncio.sleep(0.7)
    t = time.perf_counter()
    await desktop.reset()  # type: ignore[attr-defined]
    return time.perf_counter() - t


async def steps_per_second(pool: DesktopPool, k: int, seconds: float) -> float:
    """Screenshot+click steps per second with k desktops of the pool acting at once."""
    stop = time.perf_counter() + seconds
    counts = [0] * k

    async def agent(i: int, desktop: object) -> None:
        async with desktop.controller() as ctl:  # type: ignore[attr-defined]
            x = 100 + 80 * i
            while time.perf_counter() < stop:
                await ctl.screenshot()
                await ctl.step({"action": "left_click", "coordinate": [x, 500]})
                counts[i] += 1

    started = time.perf_counter()
    await asyncio.gather(*(agent(i, d) for i, d in enumerate(pool.desktops[:k])))
    return sum(counts) / (time.perf_counter() - started)


async def bench_kinds(rounds: int, loop_s: float) -> dict[str, dict[str, float]]:
    """Start, reset and steps/s of both kinds, alternating round by round."""
    samples: dict[str, dict[str, list[float]]] = {
        k: {"start": [], "reset": [], "steps1": [], "steps4": []} for k in KINDS
    }
    pools = {k: await DesktopPool(4, kind=k).start() for k in KINDS}
    try:
        for _ in range(rounds):
            for kind in KINDS:
                s = samples[kind]
                s["start"].append(await start_seconds(kind))
                s["reset"].append(await reset_seconds(pools[kind].desktops[0]))
                s["steps1"].append(await steps_per_second(pools[kind], 1, loop_s))
                s["steps4"].append(await steps_per_second(pools[kind], 4, loop_s))
    finally:
        for pool in pools.values():
            await pool.close()
    return {k: {name: statistics.median(v) for name, v in s.items()} for k, s in samples.items()}


def bench_builds(cold: bool) -> dict[str, float]:
    """Image build times: every stage cached, and (with `cold`) the desktop image from nothing."""
    out = {"cached_s": images("base", "desktop", "service")}
    if cold:
        # A fresh base (a salt changes its hash) and no layer cache: what a new
        # machine pays for the desktop image. The extra images are removed afterwards.
        host = docker_host()
        before = set(_image_ids(host))
        with tempfile.TemporaryDirectory() as cache:  # the wheelhouse is resolved again too
            cold_env = {"SCALECUA_IMAGE_SALT": str(time.time()), "SCALECUA_BUILD_NO_CACHE": "1",
                        "SCALECUA_CACHE": cache}  # fmt: skip
            out["cold_desktop_s"] = images("desktop", env=cold_env)
        new = [i for i in _image_ids(host) if i not in before]
        if new:
            subprocess.run(["docker", "rmi", "-f", *new], env={**os.environ, "DOCKER_HOST": host},
                           capture_output=True)  # fmt: skip
        images("desktop")  # the tags point at the images of this checkout again
    return out


def _image_ids(host: str) -> list[str]:
    out = subprocess.run(["docker", "images", "-q", "--no-trunc"], capture_output=True, text=True,
                         env={**os.environ, "DOCKER_HOST": host}, check=True)  # fmt: skip
    return out.stdout.split()


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (under a minute)")
    parser.add_argument("--cold", action="store_true", help="also time a cold desktop image build")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    with docker_engine() as host:
        builds = bench_builds(args.cold)
        os.environ.setdefault("DOCKER_HOST", host)
        rounds, loop_s = (2, 3.0) if args.quick else (5, 8.0)
        kinds = asyncio.run(bench_kinds(rounds, loop_s))
    native, docker = kinds["native"], kinds["docker"]
    result = {
        "native": native,
        "docker": docker,
        "builds": builds,
        "start_ratio": docker["start"] / native["start"],
        "reset_ratio": docker["reset"] / native["reset"],
        "steps_per_s_ratio_1": docker["steps1"] / native["steps1"],
        "steps_per_s_ratio_4": docker["steps4"] / native["steps4"],
    }
    rows = [
        ("start (s, median)", native["start"], docker["start"], result["start_ratio"]),
        ("reset (ms, median)", native["reset"] * 1000, docker["reset"] * 1000, result["reset_ratio"]),
        ("steps/s, 1 desktop", native["steps1"], docker["steps1"], result["steps_per_s_ratio_1"]),
        ("steps/s, 4 desktops", native["steps4"], docker["steps4"], result["steps_per_s_ratio_4"]),
    ]  # fmt: skip
    print(f"{'':24}{'native':>10}{'docker':>10}{'docker/native':>15}")
    for name, n, d, ratio in rows:
        print(f"{name:24}{n:10.2f}{d:10.2f}{ratio:15.2f}")
    for name, seconds in builds.items():
        print(f"image build, {name.removesuffix('_s').replace('_', ' ')}: {seconds:.1f} s")
    print(f"targets: reset_ratio {result['reset_ratio']:.2f} (<= 2), "
          f"steps_per_s_ratio_4 {result['steps_per_s_ratio_4']:.2f} (>= 0.8)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
