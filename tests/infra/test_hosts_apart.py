"""Hosts apart (issue 32): the loop on three hosts that meet only over a private network.

The test builds its own network: four network namespaces, a "switch" holding a Linux bridge
and one host each on a veth into it, with addresses that exist only inside them:

    A  <net>.1  the broker (`scalecua broker --listen <net>.1`) and the S3 store (moto)
    B  <net>.2  a rollout worker with its desktops, /metrics on <net>.2 (SCALECUA_METRICS_HOST)
    C  <net>.3  the judge, the segmenter, the sampler, the archiver and the trainer

Every service is a real process in its host's network namespace, configured with host A's
address only. It enters the namespace with `nsenter --net` rather than `ip netns exec`, which
also mounts a /sys of its own and so hides the cgroup controllers desktops need (a real host
has them).

Blobs, checkpoints and the archive live in S3 on A, and each host has a SCALECUA_HOME of its
own, so nothing passes from one host to another but over the network (the policy's cache of
built artifacts is shared: it is the same seeded build on every host). The loop is the
smallest that reaches a policy update: one task, B = 1 group of n = 2 one-turn episodes and
one GRPO step on C. It ends when host C reads, from host B's /metrics, that the worker
adopted version 1 from S3, and the log and the archive account for every reward and
segment; then no host may listen on any address but the ones it was given. Needs root
(namespaces), iproute2 and util-linux (infra/install.sh installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

ROOT = Path(__file__).resolve().parents[2]
SCALECUA = [sys.executable, "-m", "cli"]
TASK = "terminal_write_greeting"  # a built-in xterm task
BROKER_PORT, S3_PORT, METRICS_PORT = 9092, 9000, 9100  # the namespaces' own: never taken
BUCKET = "scalecua"
# Settings a developer's shell may hold that would point a host elsewhere.
_ROUTING = ("SCALECUA_BOOTSTRAP", "SCALECUA_HOME", "SCALECUA_BLOBS", "SCALECUA_CHECKPOINTS",
            "SCALECUA_FILES", "SCALECUA_CONFIG", "SCALECUA_METRICS_HOST", "SCALECUA_PRODUCER_ID")  # fmt: skip

# Host A's S3 store: moto's server on A's address, with the run's bucket.
_S3_SERVER = """
import sys, threading, boto3
from moto.server import ThreadedMotoServer
host, port, bucket = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ThreadedMotoServer(ip_address=host, port=port, verbose=False).start()
boto3.client("s3", endpoint_url=f"http://{host}:{port}").create_bucket(Bucket=bucket)
print("ready", flush=True)
threading.Event().wait()
"""
# The run's one task, as `scalecua up --tasks` imports a built-in one (its files are the pool's).
_IMPORT_TASK = """
import asyncio, sys
from producers.task_import import publish_tasks, task_event
from runtime.config import BusSettings
from runtime.envs.tasks.builtin import load_builtin
event = task_event(load_builtin(sys.argv[1]), source="builtin", split="train")
asyncio.run(publish_tasks(BusSettings.from_env(), [event]))
"""
# What a host reads over the network: the log (tests.infra.loop_audit) and the S3 archive.
_READ_BACK = """
import asyncio, json, sys
from runtime.replay import read_archive
from tests.infra.loop_audit import audit
bootstrap, archive = sys.argv[1], sys.argv[2]
log = asyncio.run(audit(bootstrap, None)).summary()
names = ("trajectory-complete", "reward", "segment-ready", "policy-updates")
rows = {}
for name in names:
    table = read_archive(archive, name)
    if name == "segment-ready":  # its token lists are long and not needed here
        table = table.drop_columns(["input_ids", "loss_mask", "logprobs"])
    rows[name] = table.to_pylist()
print(json.dumps({"log": log, "archive": rows}, default=str))
"""
_FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())"


class Hosts:
    """Hosts as network namespaces on a bridge of their own, and the processes run in them."""

    def __init__(self, names: tuple[str, ...], logs: Path) -> None:
        tag = f"scx{os.getpid()}"
        net = f"10.{random.randint(16, 250)}.{random.randint(0, 255)}"
        self.switch = f"{tag}-sw"
        self.netns = {h: f"{tag}-{h}" for h in names}
        self.address = {h: f"{net}.{i}" for i, h in enumerate(names, 1)}
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}

    def build(self) -> None:
        """The switch (a bridge), each host on a veth into it with its /24 address."""
        sw = self.switch
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        for host, ns in self.netns.items():
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", sw, "link", "add", f"to-{host}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            _ip("-n", sw, "link", "set", f"to-{host}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def enter(self, host: str) -> list[str]:
        """The command prefix that runs a program on `host` (in its network namespace only)."""
        return ["nsenter", f"--net=/run/netns/{self.netns[host]}", "--"]

    def start(
        self, host: str, name: str, argv: list[str], env: dict[str, str], **popen: Any
    ) -> subprocess.Popen:
        """Run `argv` on `host` as service `name`, its stderr in `<logs>/<name>.log`."""
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(
            [*self.enter(host), *argv], env=env, stderr=log,
            cwd=env.get("SCALECUA_HOME", ROOT), start_new_session=True, **popen,
        )  # fmt: skip
        log.close()
        self.procs[name] = proc
        return proc

    def run(self, host: str, argv: list[str], env: dict[str, str], timeout: float = 60) -> str:
        """Run `argv` on `host` to its end; its stdout (AssertionError with stderr if it fails)."""
        done = subprocess.run([*self.enter(host), *argv], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout)  # fmt: skip
        assert done.returncode == 0, f"{argv[:4]} on {host}: {done.stderr[-3000:]}"
        return done.stdout

    def log(self, name: str) -> str:
        """The end of service `name`'s log."""
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def listeners(self, host: str) -> set[str]:
        """The TCP addresses listening on `host` (`address:port`)."""
        out = self.run(host, ["ss", "-ltnH"], dict(os.environ))
        return {line.split()[3] for line in out.splitlines() if line.strip()}

    def close(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL what is left in a namespace); drop them."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        namespaces = [*self.netns.values(), self.switch]
        for ns in namespaces:
            for pid in _ip_out("netns", "pids", ns).split():  # what is left in a namespace
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"


def _ip_out(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    return done.stdout if done.returncode == 0 else ""


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """Hosts a, b and c on a private bridge; nothing of them is left afterwards."""
    missing = [tool for tool in ("ip", "ss", "nsenter") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `bash infra/install.sh --dev` installs them")
    made = Hosts(("a", "b", "c"), tmp_path)
    try:
        made.build()
        yield made
    finally:
        made.close()
    left = set(_ip_out("netns", "list").split()) & {*made.netns.values(), made.switch}
    assert not left, f"namespaces left behind: {left}"


def _environment(hosts: Hosts, host: str, tmp_path: Path) -> dict[str, str]:
    """What every service of `host` is configured with: host A's address, and its own home."""
    a = hosts.address["a"]
    home = tmp_path / f"home-{host}"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _ROUTING and not k.startswith("AWS_")}
    return {
        **env,
        "PYTHONUNBUFFERED": "1",
        "SCALECUA_HOME": str(home),
        "SCALECUA_BOOTSTRAP": f"{a}:{BROKER_PORT}",
        "SCALECUA_BLOBS": f"s3://{BUCKET}/blobs",
        "SCALECUA_CHECKPOINTS": f"s3://{BUCKET}/checkpoints",
        "SCALECUA_FILES_FETCH": "loopback",
        "AWS_ENDPOINT_URL": f"http://{a}:{S3_PORT}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }


def _wait(what: str, check: Callable[[], Any], timeout: float, hosts: Hosts) -> Any:
    """Poll `check` until it returns something true; fail with every service's log if not."""
    deadline = time.monotonic() + timeout
    while True:
        dead = {n: p.returncode for n, p in hosts.procs.items() if p.poll() not in (None, 0)}
        assert not dead, f"{dead} died while waiting for {what}: " + "".join(
            f"\n--- {n}\n{hosts.log(n)}" for n in dead
        )
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {n}\n{hosts.log(n)}" for n in hosts.procs)
            raise AssertionError(f"no {what} after {timeout:.0f}s:{logs}")
        time.sleep(1)


def _metrics(hosts: Hosts, url: str, env: dict[str, str]) -> dict[str, float]:
    """The rollout worker's gauges, scraped from host C over the network."""
    try:
        text = hosts.run("c", [sys.executable, "-c", _FETCH, url], env, timeout=10)
    except AssertionError:
        return {}  # not serving yet
    found = re.findall(r'^scalecua_(\w+)\{service="rollout"\} (\S+)$', text, re.M)
    return {name: float(value) for name, value in found}


def _accounted(hosts: Hosts, env: dict[str, str], trajectories: int) -> dict | None:
    """What the log and the archive hold, once they account for every trajectory."""
    a = hosts.address["a"]
    argv = [sys.executable, "-c", _READ_BACK, f"{a}:{BROKER_PORT}", f"s3://{BUCKET}/archive"]
    seen = json.loads(hosts.run("c", argv, env, timeout=120))
    log, archive = seen["log"], seen["archive"]
    completed = {t["trajectory_id"] for t in archive["trajectory-complete"]}
    done = (
        log["trajectories"] == trajectories
        and not log["requests_unplayed"] and not log["unrewarded"] and not log["unsegmented"]
        and len(completed) == trajectories
        and {r["trajectory_id"] for r in archive["reward"]} == completed
    )  # fmt: skip
    return seen if done else None


def test_the_loop_runs_on_three_hosts_apart(hosts: Hosts, tmp_path: Path) -> None:
    started = time.monotonic()
    a, b = hosts.address["a"], hosts.address["b"]
    env = {h: _environment(hosts, h, tmp_path) for h in ("a", "b", "c")}
    # Host A: the S3 store and the broker, each on A's address only.
    s3 = hosts.start("a", "s3", [sys.executable, "-c", _S3_SERVER, a, str(S3_PORT), BUCKET],
                     env["a"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    broker = hosts.start("a", "broker", [*SCALECUA, "broker", "--listen", a, "--port",
                                         str(BROKER_PORT)], env["a"],
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert broker.stdout.readline().strip() == f"{a}:{BROKER_PORT}", hosts.log("broker")
    assert s3.stdout.readline().strip() == "ready", hosts.log("s3")
    hosts.run("c", [sys.executable, "-c", _IMPORT_TASK, TASK], env["c"])
    # Host B: the worker and its desktops (the longest to start), /metrics on B's address.
    env["b"]["SCALECUA_METRICS_HOST"] = b
    hosts.start("b", "rollout", [*SCALECUA, "rollout", "--policy", "tiny", "--desktops", "2",
                                 "--max-tokens", "16", "--image-max-side", "448",
                                 "--metrics-port", str(METRICS_PORT)], env["b"])  # fmt: skip
    # Host C: the log-side services and the trainer (no optimizer state: it never restarts).
    services = {
        "archiver": ["archive", "--dir", f"s3://{BUCKET}/archive"],
        "judge": ["judge"],
        "segmenter": ["segment", "--policy", "tiny"],
        "sampler": ["sample", "--batch", "1", "--n", "2", "--max-steps", "1", "--max-batches",
                    "1"],
        "trainer": ["train", "--policy", "tiny", "--batch-groups", "1", "--max-steps", "1",
                    "--keep-states", "0"],
    }  # fmt: skip
    for name, argv in services.items():
        hosts.start("c", name, [*SCALECUA, *argv], env["c"])

    url = f"http://{b}:{METRICS_PORT}/metrics"
    adopted = _wait("policy version 1 adopted on host B",
                    lambda: (m := _metrics(hosts, url, env["c"])).get("updates_adopted", 0) >= 1
                    and m, 240, hosts)  # fmt: skip
    assert adopted["policy_version"] == 1 and adopted["updates_rejected"] == 0, adopted
    seen = _wait("reward and segments for every trajectory",
                 lambda: _accounted(hosts, env["c"], trajectories=2), 120, hosts)  # fmt: skip
    log, archive = seen["log"], seen["archive"]
    assert log["policy_versions"] == [1] and not log["trained_twice"], log
    assert not log["updates_conflicting"], log
    (update,) = archive["policy-updates"]
    assert update["checkpoint_uri"] == f"s3://{BUCKET}/checkpoints/v000001", update
    # Judged on C from what B stored in S3 on A: every trajectory scored, every one cut into
    # all of its segments (indices 0 .. num_segments-1, the count agreed by each of them).
    completes = {t["trajectory_id"]: t for t in archive["trajectory-complete"]}
    rewards = {r["trajectory_id"]: r for r in archive["reward"]}
    assert set(rewards) == set(completes) and all(r["scored"] for r in rewards.values()), rewards
    cut: dict[str, set[tuple[int, int]]] = {}
    for segment in archive["segment-ready"]:
        cut.setdefault(segment["trajectory_id"], set()).add(
            (segment["segment_index"], segment["num_segments"])
        )
    for tid in completes:
        (count,) = {n for _, n in cut[tid]}
        assert {i for i, _ in cut[tid]} == set(range(count)), (tid, cut[tid])
    # Every service listened where its host was told to, and nowhere else.
    assert hosts.listeners("a") == {f"{a}:{BROKER_PORT}", f"{a}:{S3_PORT}"}
    assert f"listening on {a}:{BROKER_PORT}: it has no authentication" in hosts.log("broker")
    assert {x for x in hosts.listeners("b") if not x.startswith("127.0.0.1:")} == {
        f"{b}:{METRICS_PORT}"
    }
    assert all(x.startswith("127.0.0.1:") for x in hosts.listeners("c")), hosts.listeners("c")
    print(f"three hosts: {time.monotonic() - started:.0f}s to an adopted update and a full account")
