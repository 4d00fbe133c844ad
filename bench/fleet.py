"""The paper's fleet through the real log-side services: how many rollout-steps/s they carry.

ScaleCUA trains with 600 concurrent environments; a 50-turn rollout takes ~540 s, so about
56 rollout-steps/s reach the log. This bench offers that traffic, and ten times more, to
the real services — the broker (`scalecua broker`), judge, segmenter (VCS), sampler,
archiver and dashboard, each its own process — and measures what they sustain. The
environments are `scalecua fleet` (producers/fleet/): a consumer of `rollout-requests`
that answers each request with a recorded trajectory of the same task (new trajectory
ids, the recorded screenshots in the blob store and the recorded judge artifacts), one
turn per think time. The bench first records (or reuses) a run: a real rollout worker
with the tiny random Qwen2.5-VL on screenshots (`--quick`: the scripted policy) plays a
few built-in tasks on real desktops, archived by the real archiver.

Offered load. The bench keeps N requests outstanding (topped up as trajectories complete),
so N environments are busy; each turn takes `turn_s / compression` (paper: 10.8 s; the
default compression 10 keeps a point's warm-up, one episode, short), so the offered rate
is N × compression / turn_s steps/s, the traffic of N × compression paper environments.
The ramp goes up in rates (the paper's 56 × 1, 2, 4, 8, 10, 16, ...) until one is not
sustained; then members are added live (a second, then fourth judge and segmenter: a
rebalance under load) and the ramp goes on. A rate is sustained when every service's
consumer lag, sampled each second over the 60 s window, stays bounded: the mean lag of the
window's last third is at most that of its first third plus two seconds of the rate.

Latency: from a trajectory's last step being written to its last segment being written
(the segmenter cuts a trajectory once it is complete, so earlier turns wait for the episode,
not for the log), and from its completion to its reward; p50/p99 per point, from event
times in the archive. CPU: seconds per second of each service process and the broker over
the window (/proc). Bytes per step: encoded records per step on the log (its step, and its
share of completion, reward and segments) and screenshot/text bytes per step in the blob
store (a real fleet writes one screenshot per turn). Lost and duplicated, from the archive
by dedup ids over the whole run: steps, rewards and segments of every completed trajectory
that never reached the log, and ids written twice.

First, on the fresh log, (b): the same fleet behind the real sampler (issuing the requests,
B=2 x n=4) and the tiny trainer, the GPU-bound stage and here the bottleneck:
back-pressure must hold (the sampler's bounded look-ahead, the trainer's segment lag and
memory bounded); then the ramp, (a), where the bench issues the requests.

Prints the tables; `--json PATH` writes `paper_steps_per_s`, `sustained_steps_per_s`,
`ratio_to_paper`, `p99_step_to_segment_s_at_paper`, `cores_at_paper`, `lost`,
`duplicated`, `scaling` (members -> sustained rate) and the per-point rows.

    .venv/bin/python bench/fleet.py --quick --json bench-fleet.json   # under a minute
    .venv/bin/python bench/fleet.py --json bench-fleet.json           # ~30 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from producers.fleet.replay import PAPER_TURN_S, Recordings  # noqa: E402
from producers.fleet.service import load_recordings  # noqa: E402
from producers.rollout_requests import publish_requests, request_group  # noqa: E402
from producers.task_import import builtin_task_events, publish_tasks  # noqa: E402
from runtime.archive.layout import table_to_events  # noqa: E402
from runtime.blobstore import open_blob_store  # noqa: E402
from runtime.broker import create_topics  # noqa: E402
from runtime.bus import EventProducer  # noqa: E402
from runtime.config import BusSettings  # noqa: E402
from runtime.replay import read_archive  # noqa: E402
from topics.codec import encode  # noqa: E402
from topics.events import Reward, SegmentReady  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCALECUA = [sys.executable, "-m", "cli"]
PAPER_ENVIRONMENTS = 600
PAPER_STEPS_PER_S = PAPER_ENVIRONMENTS / PAPER_TURN_S  # ≈ 55.6
RECORD_TASKS = (
    "terminal_write_greeting", "terminal_mkdir_projects", "terminal_count_lines",
    "mousepad_append_item",
)  # fmt: skip
LOG_SIDE = ("judge", "segmenter", "sampler", "archiver", "dashboard")
GROUP_N = 8  # rollouts per task (paper)


@dataclass(frozen=True)
class Settings:
    """How long each point runs and where the ramp goes."""

    warmup_s: float  # after a change of load: at least one episode, for a steady state
    window_s: float  # lag, CPU and rates are measured over this
    multiples: tuple[float, ...]  # offered rates as multiples of the paper's
    members: tuple[int, ...]  # judge and segmenter members, added live in this order
    compression: float
    trainer_s: float  # (b): how long the trainer-bound fleet runs (0: skip)
    record_policy: str
    record_steps: int  # turn limit of the recorded episodes
    record_rollouts: int  # recorded episodes per task


FULL = Settings(
    20.0, 60.0, (1, 2, 4, 8, 10, 11, 12, 14, 16, 24), (1, 2, 4), 10.0, 240.0, "tiny", 12, 2
)
QUICK = Settings(3.0, 6.0, (1, 10), (1,), 10.0, 0.0, "scripted", 8, 1)


# -- processes -------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_stats() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks with waited-for children) of every process."""
    out: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry.name)] = (int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14)))
    return out


@dataclass
class Proc:
    """One service process: its log, metrics port and CPU counters."""

    name: str
    popen: subprocess.Popen
    metrics_port: int | None = None

    def tree(self) -> list[int]:
        """The process and its descendants (the broker command runs Tansu as a child)."""
        stats = _proc_stats()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        out, todo = [], [self.popen.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def cpu_s(self) -> float:
        """CPU seconds used so far by the process tree."""
        stats = _proc_stats()
        return sum(stats.get(pid, (0, 0))[1] for pid in self.tree()) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """Resident memory of the process tree in MiB."""
        total = 0
        for pid in self.tree():
            with contextlib.suppress(OSError, ValueError, IndexError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    def metrics(self) -> dict[str, float]:
        """The service's Prometheus gauges and counters by name (without `scalecua_`)."""
        if self.metrics_port is None:
            return {}
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("scalecua_") and "{" in line:
                name = line[len("scalecua_") : line.index("{")].removesuffix("_total")
                with contextlib.suppress(ValueError):
                    out[name] = float(line.rsplit(" ", 1)[1])
        return out


class Stack:
    """The broker and services as processes of one bench home, stopped together."""

    def __init__(self, home: Path, blobs: str) -> None:
        self.home = home
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.env = {
            **os.environ, "SCALECUA_HOME": str(home), "SCALECUA_BLOBS": blobs,
            "SCALECUA_BOOTSTRAP": f"127.0.0.1:{self.port}", "PYTHONPATH": str(ROOT),
        }  # fmt: skip
        self.procs: list[Proc] = []
        self.broker: Proc | None = None
        self.dashboard_port: int | None = None

    def dashboard_ms(self) -> float | None:
        """Time to fetch every panel of the dashboard (its page's first request), in ms."""
        if self.dashboard_port is None:
            return None
        t0 = time.perf_counter()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.dashboard_port}/api/panels",
                                   timeout=10).read()  # fmt: skip
        except OSError:
            return None
        return (time.perf_counter() - t0) * 1000

    @property
    def settings(self) -> BusSettings:
        """Bus settings for the bench's own clients."""
        return BusSettings(bootstrap=f"127.0.0.1:{self.port}")

    def start(self, name: str, *argv: str, metrics: bool = True) -> Proc:
        """Start `scalecua ARGV` as a service named `name`."""
        port = _free_port() if metrics else None
        extra = ["--metrics-port", str(port)] if metrics else []
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        popen = subprocess.Popen([*SCALECUA, *argv, *extra], env=self.env, cwd=ROOT,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        proc = Proc(name, popen, port)
        self.procs.append(proc)
        return proc

    def start_broker(self, tasks: list[str] | None = None) -> None:
        """Start the broker, wait for it, create the registry's topics and import the built-in
        tasks (only `tasks`, if given: a sampler then draws only tasks the fleet can play)."""
        self.broker = self.start("broker", "broker", "--port", str(self.port), metrics=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                break
            time.sleep(0.1)
        asyncio.run(self._topics_and_tasks(tasks))

    async def _topics_and_tasks(self, tasks: list[str] | None) -> None:
        # What `scalecua topics create` and `tasks import --builtin` do, without two
        # interpreters' start-up.
        await create_topics(self.settings.bootstrap)
        events = [e for e in builtin_task_events() if tasks is None or e.task_id in tasks]
        await publish_tasks(self.settings, events)

    def stop(self, proc: Proc, timeout: float = 30.0) -> None:
        """Stop one process cleanly (SIGINT, then SIGKILL after `timeout`)."""
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGINT)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        """Stop every process (all at once), the broker last."""
        services = [p for p in self.procs if p is not self.broker]
        for proc in services:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGINT)
        for proc in services:
            self.stop(proc)
        if self.broker is not None:
            self.stop(self.broker)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until every service serves metrics from a consumer group with partitions."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            while proc.metrics_port is not None and proc.metrics().get("rebalances", 0) < 1:
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{proc.name} was not ready in {timeout:g} s")
                time.sleep(0.5)
        while self.dashboard_port is not None and self.dashboard_ms() is None:
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard was not ready in {timeout:g} s")
            time.sleep(0.5)

    def check_alive(self) -> None:
        """Raise if a service died."""
        for proc in self.procs:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}; see "
                                   f"{self.logs / proc.name}.log")  # fmt: skip


# -- the recording ---------------------------------------------------------------------
def record(where: Path, settings: Settings) -> None:
    """Play the recording's episodes on real desktops with a real worker, archived."""
    shutil.rmtree(where, ignore_errors=True)
    stack = Stack(where, str(where / "blobs"))
    try:
        stack.start_broker()
        stack.start("archiver", "archive", "--dir", str(where / "archive"), "--max-age", "1")
        worker = stack.start("rollout", "rollout", "--policy", settings.record_policy,
                             "--desktops", "2")  # fmt: skip
        requests = [r for task in RECORD_TASKS
                    for r in request_group(task, settings.record_rollouts,
                                           max_steps=settings.record_steps)]  # fmt: skip
        asyncio.run(publish_requests(stack.settings, requests))
        deadline = time.monotonic() + 1800
        while worker.metrics().get("episodes", 0) < len(requests):
            stack.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("recording took over 30 minutes")
            time.sleep(1.0)
        time.sleep(3.0)  # the archiver rolls its files every second
    finally:
        stack.close()


def recording_dir(policy: str) -> Path:
    """Where a recording of `policy` is kept between runs."""
    cache = Path(os.environ.get("SCALECUA_CACHE", Path.home() / ".cache" / "scalecua"))
    return cache / f"fleet-recording-{policy}"


# -- offered load ----------------------------------------------------------------------
@dataclass
class Feeder:
    """Keeps `target` requests outstanding: written minus completed by the fleet."""

    settings: BusSettings
    tasks: list[str]
    fleet: Proc
    target: int = 0
    written: int = 0
    _groups: itertools.count = field(default_factory=itertools.count)

    async def run(self) -> None:
        """Top up every 50 ms until cancelled (an environment idles until its next request)."""
        async with EventProducer(self.settings) as producer:
            while True:
                done = self.fleet.metrics().get("episodes", 0.0)
                missing = self.target - (self.written - int(done))
                while missing > 0:
                    i = next(self._groups)
                    task = self.tasks[i % len(self.tasks)]
                    group = request_group(task, GROUP_N, max_steps=50, group_id=f"fleet-{i}")
                    await producer.wait_acks([await producer.send("rollout-requests", r)
                                              for r in group])  # fmt: skip
                    self.written += len(group)
                    missing -= len(group)
                await asyncio.sleep(0.05)


@dataclass
class Point:
    """One offered load, measured."""

    members: int
    offered: float  # steps/s
    environments: int
    start_ms: int = 0
    end_ms: int = 0
    sustained: float = 0.0  # steps/s the fleet wrote in the window
    bounded: bool = False
    lag: dict[str, tuple[float, float]] = field(default_factory=dict)  # first, last third
    cpu: dict[str, float] = field(default_factory=dict)  # cores per service
    rss_mib: dict[str, int] = field(default_factory=dict)  # resident memory at the window's end
    p50_segment_s: float | None = None
    p99_segment_s: float | None = None
    p50_reward_s: float | None = None
    p99_reward_s: float | None = None
    dashboard_p99_ms: float | None = None  # GET /api/panels, once a second
    machine_cores_busy: float = 0.0  # the whole machine's busy cores (other programs too)


_BUSY: list[tuple[float, float]] = []  # (monotonic time, busy CPU seconds) at the last call


def _busy_cores() -> float:
    """Busy cores of the whole machine since the previous call (other programs included)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields]
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait
    now = time.monotonic()
    last = _BUSY[-1] if _BUSY else (now, busy)
    _BUSY[:] = [(now, busy)]
    return (busy - last[1]) / (now - last[0]) if now > last[0] else 0.0


def _services(stack: Stack) -> list[Proc]:
    return [p for p in stack.procs if p.name.split("#")[0] in LOG_SIDE]


def measure(stack: Stack, feeder: Feeder, point: Point, settings: Settings) -> Point:
    """Hold the point's load through a warm-up and a window; sample lag and CPU."""
    feeder.target = point.environments
    time.sleep(settings.warmup_s)
    stack.check_alive()
    procs = [*_services(stack), stack.broker, feeder.fleet]
    cpu0 = {p.name: p.cpu_s() for p in procs}
    _busy_cores()  # the window starts here
    steps0 = feeder.fleet.metrics().get("steps_written", 0.0)
    t0 = time.monotonic()
    point.start_ms = time.time_ns() // 1_000_000
    samples: dict[str, list[float]] = {p.name: [] for p in _services(stack)}
    dashboard: list[float] = []
    while time.monotonic() - t0 < settings.window_s:
        for p in _services(stack):
            if (lag := p.metrics().get("lag")) is not None:
                samples[p.name].append(lag)
        if (ms := stack.dashboard_ms()) is not None:
            dashboard.append(ms)
        time.sleep(1.0)
    point.dashboard_p99_ms = _quantile(sorted(dashboard), 0.99)
    elapsed = time.monotonic() - t0
    point.end_ms = time.time_ns() // 1_000_000
    point.sustained = (feeder.fleet.metrics().get("steps_written", 0.0) - steps0) / elapsed
    point.cpu = {p.name: (p.cpu_s() - cpu0[p.name]) / elapsed for p in procs}
    point.rss_mib = {p.name: round(p.rss_mib()) for p in procs}
    point.machine_cores_busy = round(_busy_cores(), 2)  # everything on the machine, over the window
    allowance = 2.0 * point.offered
    point.bounded = point.sustained >= 0.9 * point.offered
    for name, lags in samples.items():
        third = max(1, len(lags) // 3)
        first, last = statistics.fmean(lags[:third] or [0]), statistics.fmean(lags[-third:] or [0])
        point.lag[name] = (first, last)
        point.bounded &= last <= first + allowance
    return point


def add_members(stack: Stack, policy: str, count: int) -> None:
    """Start judge and segmenter members until each group has `count`."""
    have = sum(1 for p in stack.procs if p.name.split("#")[0] == "judge")
    for i in range(have, count):
        stack.start(f"judge#{i}", "judge")
        stack.start(f"segmenter#{i}", "segment", "--policy", policy)


# -- accounting from the archive -------------------------------------------------------
def _columns(archive: str, topic: str, names: list[str]) -> dict[str, list]:
    table = read_archive(archive, topic)
    return {n: table[n].to_pylist() for n in names}


def account(archive: str, points: list[Point]) -> dict:
    """Latencies per point and lost/duplicated over the run, from the archive."""
    steps = _columns(archive, "rollout-step", ["_dedup_id", "trajectory_id", "ts_ms", "step"])
    done = _columns(archive, "trajectory-complete",
                    ["_dedup_id", "trajectory_id", "ts_ms", "num_steps", "status", "producer_id"])  # fmt: skip
    rewards = _columns(archive, "reward", ["_dedup_id", "trajectory_id", "ts_ms"])
    segments = _columns(archive, "segment-ready",
                        ["_dedup_id", "trajectory_id", "ts_ms", "num_segments", "is_last"])  # fmt: skip
    dead = read_archive(archive, "dead-letter").num_rows
    last_step: dict[str, int] = {}
    have_steps: dict[str, set[int]] = {}
    for t, ts, i in zip(steps["trajectory_id"], steps["ts_ms"], steps["step"], strict=True):
        last_step[t] = max(last_step.get(t, 0), ts)
        have_steps.setdefault(t, set()).add(i)
    reward_at: dict[str, int] = {}
    for t, ts in zip(rewards["trajectory_id"], rewards["ts_ms"], strict=True):
        reward_at.setdefault(t, ts)
    segment_at: dict[str, int] = {}
    segment_count: dict[str, set[str]] = {}
    wanted: dict[str, int] = {}
    for d, t, ts, n in zip(segments["_dedup_id"], segments["trajectory_id"], segments["ts_ms"],
                           segments["num_segments"], strict=True):  # fmt: skip
        segment_at[t] = max(segment_at.get(t, 0), ts)
        segment_count.setdefault(t, set()).add(d)
        wanted[t] = n
    lost = {"steps": 0, "rewards": 0, "segments": 0}
    latency: list[tuple[int, float | None, float | None]] = []
    for t, ts, n, status, producer in zip(done["trajectory_id"], done["ts_ms"],
                                          done["num_steps"], done["status"],
                                          done["producer_id"], strict=True):  # fmt: skip
        if not producer.startswith("fleet-replay:") or status == "error":
            continue
        lost["steps"] += sum(1 for i in range(n) if i not in have_steps.get(t, ()))
        lost["rewards"] += t not in reward_at
        lost["segments"] += len(segment_count.get(t, ())) != wanted.get(t, -1)
        seg = (segment_at[t] - last_step[t]) / 1000 if t in segment_at and t in last_step else None
        rew = (reward_at[t] - ts) / 1000 if t in reward_at else None
        latency.append((ts, seg, rew))
    for point in points:
        inside = [(s, r) for ts, s, r in latency if point.start_ms <= ts < point.end_ms]
        seg = sorted(s for s, _ in inside if s is not None)
        rew = sorted(r for _, r in inside if r is not None)
        point.p50_segment_s, point.p99_segment_s = _quantile(seg, 0.5), _quantile(seg, 0.99)
        point.p50_reward_s, point.p99_reward_s = _quantile(rew, 0.5), _quantile(rew, 0.99)
    duplicated = {
        name: len(cols["_dedup_id"]) - len(set(cols["_dedup_id"]))
        for name, cols in (("steps", steps), ("completions", done), ("rewards", rewards),
                           ("segments", segments))
    }  # fmt: skip
    return {"lost": lost, "duplicated": duplicated, "dead_letters": dead,
            "trajectories": len(latency), "steps": len(steps["_dedup_id"])}  # fmt: skip


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


def bytes_per_step(archive: str, recordings: Recordings, blobs: str) -> dict[str, float]:
    """Encoded log bytes and blob-store bytes per step, from the recordings and the archive."""
    recs = [r for task in recordings.tasks() for r in [recordings.pick(task)] if r]
    turns = sum(len(r.steps) for r in recs)
    step_bytes = sum(len(encode(s)) for r in recs for s in r.steps)
    complete_bytes = sum(len(encode(r.complete)) for r in recs)
    rewards = table_to_events(Reward, read_archive(archive, "reward").slice(0, 200))
    segments = table_to_events(SegmentReady, read_archive(archive, "segment-ready").slice(0, 200))
    per_trajectory = statistics.fmean([len(encode(e)) for e in rewards] or [0])
    seg_per_traj = statistics.fmean([len(encode(e)) * e.num_segments for e in segments] or [0])
    store = open_blob_store(blobs)
    refs = {s.observation_ref for r in recs for s in r.steps if s.observation_ref}
    refs |= {s.observation_text_ref for r in recs for s in r.steps if s.observation_text_ref}
    blob_bytes = sum(len(store.get(ref)) for ref in refs)
    log_bytes = (step_bytes + complete_bytes) / turns + (per_trajectory + seg_per_traj) * len(
        recs) / turns  # fmt: skip
    return {
        "log": log_bytes,
        "blobs": blob_bytes / turns,
        "turns_per_trajectory": turns / len(recs),
    }


# -- (b): the trainer as the bottleneck ------------------------------------------------
def trainer_bound(stack: Stack, settings: Settings, policy: str) -> dict:
    """Run the real sampler and the tiny trainer behind the fleet; report what stays bounded.

    On the fresh log, before the ramp: the trainer sees only the groups the sampler asks for.
    """
    sampler = stack.start("sampler", "sample", "--batch", "2", "--n", "4", "--max-steps", "50",
                          "--in-flight", "2", "--ahead", "2")  # fmt: skip
    trainer = stack.start("trainer", "train", "--policy", policy, "--batch-groups", "2",
                          "--threads", "1")  # fmt: skip
    stack.wait_ready()
    rows = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < settings.trainer_s:
        stack.check_alive()
        s, t = sampler.metrics(), trainer.metrics()
        rows.append({"t": round(time.monotonic() - t0), "segment_lag": t.get("lag", 0.0),
                     "tokens_held": t.get("tokens_held", 0.0), "rss_mib": round(trainer.rss_mib()),
                     "steps": t.get("steps", 0.0), "batches": s.get("batches", 0.0),
                     "in_flight_batches": s.get("in_flight_batches", 0.0)})  # fmt: skip
        time.sleep(5.0)
    stack.stop(trainer)
    stack.stop(sampler)
    first, last = rows[: len(rows) // 2 or 1], rows[len(rows) // 2 :] or rows
    return {
        "seconds": settings.trainer_s, "trainer_steps": rows[-1]["steps"],
        "sampler_batches": rows[-1]["batches"],
        "max_in_flight_batches": max(r["in_flight_batches"] for r in rows),
        "max_segment_lag": max(r["segment_lag"] for r in rows),
        "rss_mib_max_first_half_second_half": [max(r["rss_mib"] for r in first),
                                               max(r["rss_mib"] for r in last)],
        "lag_bounded": max(r["segment_lag"] for r in last)
        <= max(r["segment_lag"] for r in first) + 50,
        "samples": rows,
    }  # fmt: skip


# -- the run ---------------------------------------------------------------------------
async def _hold(coro_factory, stop: asyncio.Event) -> None:  # noqa: ANN001
    task = asyncio.create_task(coro_factory())
    await stop.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def run(settings: Settings, args: argparse.Namespace) -> dict:
    """Record (or reuse) a run, then ramp the fleet's load through the services."""
    recording = Path(args.recording) if args.recording else recording_dir(settings.record_policy)
    if args.record or not (recording / "archive" / "trajectory-complete").exists():
        print(f"recording {settings.record_policy} episodes into {recording} ...", flush=True)
        record(recording, settings)
    recorded, run_id = load_recordings(str(recording / "archive"))
    recordings = Recordings(recorded)
    policy = "tiny" if settings.record_policy in ("tiny", "scripted") else settings.record_policy
    turn = PAPER_TURN_S / settings.compression
    home = Path(tempfile.mkdtemp(prefix="scalecua-fleet-"))
    stack = Stack(home, str(recording / "blobs"))
    points: list[Point] = []
    scaling: dict[int, float] = {}
    out: dict = {}
    try:
        stack.start_broker(recordings.tasks())
        stack.start("archiver", "archive", "--dir", str(home / "archive"), "--max-age", "2")
        stack.dashboard_port = _free_port()
        stack.start("dashboard", "dashboard", "--port", str(stack.dashboard_port), metrics=False)
        most = int(max(settings.multiples) * PAPER_STEPS_PER_S * turn) + 1
        fleet = stack.start("fleet", "fleet", "--archive", str(recording / "archive"), "--run",
                            run_id, "--environments", str(most), "--compression",
                            str(settings.compression))  # fmt: skip
        add_members(stack, policy, settings.members[0])
        stack.wait_ready()
        if settings.trainer_s:
            print(
                "trainer-bound: the sampler and the tiny trainer behind the fleet ...", flush=True
            )
            out["trainer_bound"] = trainer_bound(stack, settings, policy)
        # From here the bench offers the load; the sampler only folds rewards (task-stats).
        stack.start("sampler", "sample", "--max-batches", "0")
        stack.wait_ready()
        feeder = Feeder(stack.settings, recordings.tasks(), fleet)
        stop = asyncio.Event()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_until_complete,
                                  args=(_hold(feeder.run, stop),), daemon=True)  # fmt: skip
        thread.start()
        # Each member count starts at the highest rate the previous one sustained (measured
        # again right after the new members joined, under load) and climbs until a rate is
        # not sustained.
        start = 0
        for members in settings.members:
            add_members(stack, policy, members)
            stack.wait_ready()
            best, top = 0.0, start
            for i in range(start, len(settings.multiples)):
                offered = settings.multiples[i] * PAPER_STEPS_PER_S
                point = Point(members, offered, round(offered * turn))
                measure(stack, feeder, point, settings)
                points.append(point)
                print(_point_line(point), flush=True)
                if not point.bounded:
                    _recover(stack, feeder, turn)
                    break
                best, top = max(best, point.sustained), i
            scaling[members] = round(best, 1)
            start = top
        feeder.target = 0
        time.sleep(turn * recordings.steps_per_trajectory() * 1.3 + 1)  # the last episodes end
        _drain(stack, timeout=120)
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        time.sleep(3)  # the archiver's last roll (every 2 s)
    finally:
        stack.close()
    accounting = account(str(home / "archive"), points)
    sizes = bytes_per_step(str(home / "archive"), recordings, str(recording / "blobs"))
    paper = next((p for p in points if abs(p.offered - PAPER_STEPS_PER_S) < 1), None)
    sustained = max((p.sustained for p in points if p.bounded), default=0.0)
    out.update({
        "paper_steps_per_s": round(PAPER_STEPS_PER_S, 1),
        "sustained_steps_per_s": round(sustained, 1),
        "ratio_to_paper": round(sustained / PAPER_STEPS_PER_S, 2),
        "p99_step_to_segment_s_at_paper": paper.p99_segment_s if paper else None,
        "cores_at_paper": round(sum(v for k, v in paper.cpu.items() if k != "fleet"), 3)
        if paper else None,
        "lost": sum(accounting["lost"].values()),
        "duplicated": sum(accounting["duplicated"].values()),
        "scaling": scaling, "accounting": accounting, "bytes_per_step": sizes,
        "recording": {"run": run_id, "trajectories": len(recordings), "policy":
                      settings.record_policy, "tasks": recordings.tasks()},
        "points": [p.__dict__ for p in points], "home": str(home),
    })  # fmt: skip
    return out


def _recover(stack: Stack, feeder: Feeder, turn: float, timeout: float = 180.0) -> None:
    """After a rate that was not sustained, offer the paper's rate until the backlog is gone,
    so the next point does not start behind."""
    feeder.target = round(PAPER_STEPS_PER_S * turn)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.metrics().get("lag", 0) <= 2 * PAPER_STEPS_PER_S for p in _services(stack)):
            return
        time.sleep(1.0)


def _drain(stack: Stack, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.metrics().get("lag", 0) == 0 for p in _services(stack)):
            return
        time.sleep(1.0)


def _point_line(p: Point) -> str:
    worst = max(p.lag.items(), key=lambda kv: kv[1][1], default=("-", (0, 0)))
    return (f"  members {p.members}: offered {p.offered:7.1f} steps/s ({p.environments} envs), "
            f"sustained {p.sustained:7.1f}, {'bounded' if p.bounded else 'GROWING'} "
            f"(worst lag {worst[0]} {worst[1][0]:.0f} -> {worst[1][1]:.0f}), "
            f"cores {sum(v for k, v in p.cpu.items() if k != 'fleet'):.2f}, "
            f"dashboard p99 {_f(p.dashboard_p99_ms)} ms; machine busy "
            f"{p.machine_cores_busy:.2f} of {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip


def print_tables(out: dict) -> None:
    """Print the per-point table, the services' cores at the paper's rate, and the totals."""
    print("\nmembers  offered/s  sustained/s  envs  lag  p50/p99 step->segment s  "
          "p50/p99 complete->reward s  log cores")  # fmt: skip
    for p in out["points"]:
        cores = sum(v for k, v in p["cpu"].items() if k != "fleet")
        print(f"{p['members']:7d}  {p['offered']:9.1f}  {p['sustained']:11.1f}  "
              f"{p['environments']:4d}  {'ok ' if p['bounded'] else 'GROW'}  "
              f"{_f(p['p50_segment_s'])}/{_f(p['p99_segment_s'])}{'':14}"
              f"{_f(p['p50_reward_s'])}/{_f(p['p99_reward_s'])}{'':17}{cores:.2f}")  # fmt: skip
    paper = next((p for p in out["points"] if abs(p["offered"] - PAPER_STEPS_PER_S) < 1), None)
    if paper:
        print("\nat the paper's rate:   cores   RSS MiB")
        for name, cores in sorted(paper["cpu"].items()):
            print(f"  {name:18s} {cores:6.3f}  {paper['rss_mib'].get(name, 0):7d}")
    b = out["bytes_per_step"]
    print(f"\nbytes per step: log {b['log']:.0f}, blob store {b['blobs']:.0f} "
          f"({b['turns_per_trajectory']:.1f} turns per trajectory)")  # fmt: skip
    a = out["accounting"]
    print(f"lost {a['lost']}, duplicated {a['duplicated']}, dead letters {a['dead_letters']}, "
          f"over {a['trajectories']} trajectories and {a['steps']} steps")  # fmt: skip
    print(f"sustained {out['sustained_steps_per_s']} steps/s = {out['ratio_to_paper']}x the "
          f"paper's {out['paper_steps_per_s']}; by members: {out['scaling']}")  # fmt: skip
    if "trainer_bound" in out:
        t = {k: v for k, v in out["trainer_bound"].items() if k != "samples"}
        print(f"trainer-bound: {t}")


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def main() -> int:
    """Parse arguments, run the bench, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two short points (under a minute)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--recording", help="a bench home holding the recorded run "
                        "(default: $SCALECUA_CACHE/fleet-recording-<policy>)")  # fmt: skip
    parser.add_argument("--record", action="store_true", help="record again even if one exists")
    parser.add_argument("--window", type=float, help="seconds measured per point")
    parser.add_argument("--multiples", type=float, nargs="+", help="offered rates / the paper's")
    parser.add_argument("--members", type=int, nargs="+", help="judge+segmenter members in turn")
    parser.add_argument("--no-trainer", action="store_true", help="skip the trainer-bound run")
    args = parser.parse_args()
    # A SIGTERM (`timeout`) must still stop the services: they run in sessions of their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = QUICK if args.quick else FULL
    settings = Settings(
        settings.warmup_s, args.window or settings.window_s,
        tuple(args.multiples or settings.multiples), tuple(args.members or settings.members),
        settings.compression, 0.0 if args.no_trainer else settings.trainer_s,
        settings.record_policy, settings.record_steps, settings.record_rollouts,
    )  # fmt: skip
    out = run(settings, args)
    print_tables(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
