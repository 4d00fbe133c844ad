"""Rollout worker throughput against the bare desktop loop, on the same desktops in the same run.

How many `rollout-step`s a worker writes per second, and where a turn's time goes, with 1,
2 and 4 desktops, for the scripted policy and the tiny random Qwen2.5-VL. The baseline,
measured on the same desktops just before: the bare loop (per desktop, a screenshot
through the controller, then the same action through `controller.step`; no engine, no
bus, no blob store), so `worker / bare` is what the episode loop, the log and the policy
cost on top of the desktops themselves.

The workload is one OSWorld-format task published on `tasks`, whose turns are cheap and
identical on both paths: a `solution` of N left clicks then `done` (N = 6 with `--quick`,
20 otherwise; the scripted policy plays it; the tiny policy writes no valid tool call, so
its turns are parse failures with no action, up to the same turn limit) and a one-command
evaluator (`echo`). Per configuration: a fresh embedded broker, the task, a worker wired
as `rollout_service` wires it (task table, policy follower, service runner) on a pool of
exactly that many desktops (so, as in production, an episode may wait for its desktop's
reset; the bare loop and both policies share the pool), and more requests than it can
play, so every desktop stays busy. The rate counts the steps read back from the log whose
events were created in the steady window (after a warm-up from the first step, up to the
stop), from the last step before it to the last in it, so a batched engine's bursts count
whole; the split is the median of their `timings_ms` per phase. `other` is what a turn
costs a desktop beyond its own latency (episode setup, evaluation, the desktop's reset
and hand-over between episodes), amortised per turn: desktops × 1000 / (steps/s) − mean
turn latency.

A second table says where the CPU goes, per step over the same window: this process (the
worker and its engine, or the bare loop's client), the broker, the desktops (servers, X,
apps), and how many of the machine's cores were busy, in all and by other programs —
on a shared 2-core machine, the reason two runs differ.
Prints both; `--json PATH` writes `steps_per_s_4` (scripted, 4 desktops),
`worker_vs_bare_scripted` (at 4 desktops) and the per-level and tiny figures.

    .venv/bin/python bench/rollout.py --quick --json bench-rollout.json   # under a minute
    .venv/bin/python bench/rollout.py --json bench-rollout.json           # ~4 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consumers.rollout.episode import EpisodeConfig  # noqa: E402
from consumers.rollout.players import Player, build_player  # noqa: E402
from consumers.rollout.service import PolicyFollower, RolloutConfig, RolloutWorker  # noqa: E402
from producers.rollout_requests import publish_requests, request_group  # noqa: E402
from producers.task_import import publish_tasks  # noqa: E402
from runtime.blobstore import BlobStore, open_blob_store  # noqa: E402
from runtime.broker import EmbeddedBroker  # noqa: E402
from runtime.bus import EventConsumer  # noqa: E402
from runtime.config import BusSettings  # noqa: E402
from runtime.engines.base import SamplingParams  # noqa: E402
from runtime.envs.desktop.pool import DesktopPool  # noqa: E402
from runtime.envs.tasks.model import Task  # noqa: E402
from runtime.service import ServiceRunner  # noqa: E402
from runtime.tables import TopicTable  # noqa: E402
from topics.events import TaskEvent, TrajectoryComplete  # noqa: E402

LEVELS = (1, 2, 4)
PHASES = ("observe", "blobs", "render", "generate", "act", "bus")
CLICK = {"action": "left_click", "coordinate": [500, 500]}


@dataclass(frozen=True)
class Settings:
    """How long and how big each measurement is."""

    clicks: int  # clicks per episode before `done` (turns per episode: clicks + 1)
    warmup_s: float  # steps before this (from the first one) are not counted
    window_s: float  # the steady window counted after the warm-up
    image_max_side: int  # the policy's image is shrunk to fit this
    max_tokens: int  # the tiny policy's response length


_TICK = os.sysconf("SC_CLK_TCK")


def _process_table() -> dict[int, tuple[int, float]]:
    """Every process on the machine: pid -> (parent pid, CPU seconds used so far)."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return table


def _tree_cpu(table: dict[int, tuple[int, float]], root: int, skip: set[int]) -> float:
    """CPU seconds of `root`'s descendants (not root itself), leaving out `skip` and theirs."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [p for p in children.get(root, []) if p not in skip]
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo.extend(p for p in children.get(pid, []) if p not in skip)
    return total


def cpu_sample(broker_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far: this process, the broker, the desktops (our other descendants),
    and the whole machine (busy and total, all cores)."""
    table = _process_table()
    skip = {broker_pid} if broker_pid else set()
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return {
        "bench": time.process_time(),
        "broker": table.get(broker_pid, (0, 0.0))[1] if broker_pid else 0.0,
        "desktops": _tree_cpu(table, os.getpid(), skip),
        "machine_busy": (sum(ticks) - ticks[3] - ticks[4]) / _TICK,
        "machine_total": sum(ticks) / _TICK,
    }


def cpu_split(before: dict[str, float], after: dict[str, float], rate: float) -> dict[str, float]:
    """CPU ms per step of each part at `rate` steps/s, and how many cores were busy (all,
    and not ours)."""
    d = {k: after[k] - before[k] for k in before}
    ours = d["bench"] + d["broker"] + d["desktops"]
    wall = d["machine_total"] / (os.cpu_count() or 1)
    steps = max(rate * wall, 1e-9)
    return {
        "cpu_ms_per_step_bench": d["bench"] * 1000 / steps,
        "cpu_ms_per_step_broker": d["broker"] * 1000 / steps,
        "cpu_ms_per_step_desktops": d["desktops"] * 1000 / steps,
        "cores_busy": d["machine_busy"] / wall,
        "cores_busy_others": max(0.0, d["machine_busy"] - ours) / wall,
    }


def bench_task(clicks: int) -> dict:
    """The OSWorld-format task both paths play: `clicks` clicks, then done; echo judges it."""
    return {
        "id": f"bench-rollout-{clicks}-clicks",
        "instruction": "Click the middle of the screen a few times, then finish.",
        "config": [],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "echo ok", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
        },
        "solution": [CLICK] * clicks + [{"action": "done"}],
    }


async def bare_loop(pool: DesktopPool, desktops: int, actions: list[dict], s: Settings) -> dict:
    """Screenshot + the same action through the controller on each desktop; steps/s and ms."""
    start = time.monotonic()
    counted_from, stop = start + s.warmup_s, start + s.warmup_s + s.window_s
    done: list[float] = []
    shots: list[float] = []
    acts: list[float] = []

    async def agent() -> None:
        async with pool.acquire() as desktop, desktop.controller() as ctl:
            turn = 0
            while (t0 := time.monotonic()) < stop:
                await ctl.screenshot()
                t1 = time.monotonic()
                await ctl.step(actions[turn % len(actions)])
                t2 = time.monotonic()
                turn += 1
                if counted_from <= t2 <= stop:
                    done.append(t2)
                    shots.append((t1 - t0) * 1000)
                    acts.append((t2 - t1) * 1000)

    async def sample() -> tuple[dict, dict]:
        await asyncio.sleep(max(0.0, counted_from - time.monotonic()))
        first = cpu_sample()
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        return first, cpu_sample()

    *_, (cpu0, cpu1) = await asyncio.gather(*(agent() for _ in range(desktops)), sample())
    return {
        "steps_per_s": len(done) / s.window_s,
        "steps": len(done),
        **cpu_split(cpu0, cpu1, len(done) / s.window_s),
        "observe_ms": statistics.median(shots),
        "act_ms": statistics.median(acts),
        "latency_ms": statistics.fmean(a + b for a, b in zip(shots, acts, strict=True)),
    }


@contextlib.asynccontextmanager
async def worker(
    settings: BusSettings, config: RolloutConfig, player: Player, pool: DesktopPool,
    blobs: BlobStore,
) -> AsyncIterator[tuple[RolloutWorker, ServiceRunner]]:  # fmt: skip
    """A running worker wired as `rollout_service` wires it, on a given pool and player."""
    tasks = await TopicTable(settings, "tasks").start()
    follower = None
    runner_task = None
    try:
        rollout = RolloutWorker(config, player, pool, blobs, tasks)
        follower = await PolicyFollower(settings, rollout).start()
        runner = ServiceRunner(rollout, settings)
        runner_task = asyncio.create_task(runner.run(install_signal_handlers=False))
        await asyncio.wait_for(runner.ready.wait(), 60)
        yield rollout, runner
    finally:
        if runner_task is not None:
            runner.stop()
            await asyncio.wait_for(runner_task, 120)
        if follower is not None:
            await follower.stop()
        await tasks.stop()


async def read_topic(settings: BusSettings, topic_name: str) -> list:
    """Every event on a topic, from the start to its current end."""
    events: list = []
    async with EventConsumer(settings, [topic_name], group_id=None) as consumer:
        tps = await consumer.partitions_of(topic_name)
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        while True:
            events.extend(r.event for r in await consumer.getmany(timeout_ms=200) if r.event)
            positions = [await consumer.raw.position(tp) for tp in tps]
            highwaters = [consumer.raw.highwater(tp) for tp in tps]
            if all(h is not None and p >= h for p, h in zip(positions, highwaters, strict=True)):
                return events


async def first_step(settings: BusSettings, deadline: float) -> float:
    """Wait for the first `rollout-step` on the log; return its creation time (epoch s)."""
    async with EventConsumer(settings, ["rollout-step"], group_id=None) as consumer:
        tps = await consumer.partitions_of("rollout-step")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        while time.time() < deadline:
            steps = [r.event for r in await consumer.getmany(timeout_ms=100) if r.event]
            if steps:
                return min(e.ts_ms for e in steps) / 1000
    raise RuntimeError("the worker wrote no step in time")


async def worker_run(
    player: Player, pool: DesktopPool, desktops: int, blobs: BlobStore, s: Settings
) -> dict:
    """Run a worker on `desktops` desktops over a fresh broker; steps/s and the phase split."""
    task = Task.from_dict(bench_task(s.clicks))
    config = RolloutConfig(
        desktops=desktops, episode=EpisodeConfig(image_max_side=s.image_max_side)
    )
    async with EmbeddedBroker() as broker:
        # Tansu holds a JoinGroup for half the session timeout: 2 s (as DESIGN.md advises)
        # starts each worker sooner; the steady state measured does not depend on it.
        settings = BusSettings(bootstrap=broker.bootstrap, session_timeout_ms=2000)
        event = TaskEvent(task_id=task.id, task=task.to_dict(), source="bench")
        await publish_tasks(settings, [event])
        turns = s.clicks + 1
        # More requests than the window can play even at the bare loop's pace.
        n = max(4 * desktops, int(desktops * 60 * (s.warmup_s + s.window_s) / turns) + 1)
        async with worker(settings, config, player, pool, blobs):
            started = time.time()
            await publish_requests(settings, request_group(task.id, n, max_steps=turns))
            first = await first_step(settings, started + 300)  # the clock starts here
            await asyncio.sleep(max(0.0, first + s.warmup_s - time.time()))
            cpu0 = cpu_sample(broker.pid)
            await asyncio.sleep(max(0.0, first + s.warmup_s + s.window_s - time.time()))
            stop = time.time()
            cpu1 = cpu_sample(broker.pid)
        steps = await read_topic(settings, "rollout-step")
        completes = await read_topic(settings, "trajectory-complete")
    # From the last step before the window to the last one in it: whole turns only, even
    # when a batched engine ends several episodes' turns at once.
    times = sorted(e.ts_ms / 1000 for e in steps)
    begin = max(t for t in times if t < first + s.warmup_s)
    end = max(t for t in times if t <= stop)
    counted = [e for e in steps if begin < e.ts_ms / 1000 <= end]
    if not counted:
        raise RuntimeError(f"no step in the {s.window_s:g} s window: make it longer")
    rate = len(counted) / (end - begin)
    latency = statistics.fmean(e.latency_ms for e in counted)
    statuses = sorted({c.status for c in completes if isinstance(c, TrajectoryComplete)})
    return {
        "steps_per_s": rate,
        "steps": len(counted),
        "episodes": len(completes),
        "statuses": statuses,
        "latency_ms": latency,
        "other_ms": desktops * 1000 / rate - latency,
        "parse_failures": sum(e.action is None for e in counted) / len(counted),
        "prompt_tokens": statistics.median(e.prompt_tokens for e in counted),
        **cpu_split(cpu0, cpu1, rate),
        **{f"{p}_ms": statistics.median(e.timings_ms.get(p, 0.0) for e in counted) for p in PHASES},
    }


async def main_async(args: argparse.Namespace) -> dict:
    """Measure the bare loop and both policies at every level; return the figures."""
    s = (
        Settings(clicks=6, warmup_s=0.5, window_s=2.0, image_max_side=args.image_max_side,
                 max_tokens=args.max_tokens)
        if args.quick
        else Settings(clicks=20, warmup_s=3.0, window_s=15.0, image_max_side=args.image_max_side,
                      max_tokens=args.max_tokens)
    )  # fmt: skip
    actions = [CLICK] * s.clicks + [{"action": "done"}]
    players = {
        "scripted": build_player("scripted"),
        "tiny": build_player(
            "tiny", sampling=SamplingParams(temperature=1.0, max_tokens=s.max_tokens)
        ),
    }
    figures: dict = {"bare": {}, "scripted": {}, "tiny": {}}
    started = time.monotonic()

    def progress(d: int, name: str) -> None:
        rate = figures[name][d]["steps_per_s"]
        print(f"  [{time.monotonic() - started:5.1f} s] {d} desktops, {name}: {rate:.1f} steps/s",
              file=sys.stderr, flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        blobs = open_blob_store(str(Path(tmp) / "blobs"))
        for d in LEVELS:
            async with DesktopPool(d) as pool:
                figures["bare"][d] = await bare_loop(pool, d, actions, s)
                progress(d, "bare")
                for name, player in players.items():
                    figures[name][d] = await worker_run(player, pool, d, blobs, s)
                    progress(d, name)
    for player in players.values():
        await player.close()
    result: dict = {"settings": s.__dict__, "quick": args.quick, "cpus": os.cpu_count()}
    for d in LEVELS:
        bare = figures["bare"][d]["steps_per_s"]
        result[f"bare_steps_per_s_{d}"] = bare
        result[f"steps_per_s_{d}"] = figures["scripted"][d]["steps_per_s"]
        result[f"worker_vs_bare_scripted_{d}"] = figures["scripted"][d]["steps_per_s"] / bare
        result[f"tiny_steps_per_s_{d}"] = figures["tiny"][d]["steps_per_s"]
        result[f"worker_vs_bare_tiny_{d}"] = figures["tiny"][d]["steps_per_s"] / bare
    result["worker_vs_bare_scripted"] = result["worker_vs_bare_scripted_4"]
    result["worker_vs_bare_tiny"] = result["worker_vs_bare_tiny_4"]
    result["tiny_vs_scripted_4"] = result["tiny_steps_per_s_4"] / result["steps_per_s_4"]
    result["runs"] = {
        name: {str(d): f for d, f in by_level.items()} for name, by_level in figures.items()
    }
    return result


def print_table(r: dict, seconds: float) -> None:
    """Print phase medians and steps/s per policy and desktop count, against the bare loop."""
    s = r["settings"]
    print(
        f"\nbench/rollout.py  ({'quick' if r['quick'] else 'full'}, {r['cpus']} CPUs; "
        f"{s['clicks']} clicks + done per episode; policy image <= {s['image_max_side']} px; "
        f"tiny max_tokens {s['max_tokens']}; window {s['window_s']:g} s after "
        f"{s['warmup_s']:g} s warm-up)"
    )
    header = "".join(f"{p:>9}" for p in (*PHASES, "latency", "other"))
    print(f"{'path':<10}{'desk':>5}{header}{'steps/s':>9}{'vs bare':>9}")
    for d in LEVELS:
        bare = r["runs"]["bare"][str(d)]
        cells = {"observe": bare["observe_ms"], "act": bare["act_ms"]}
        row = "".join(f"{cells[p]:>9.1f}" if p in cells else f"{'-':>9}" for p in PHASES)
        print(f"{'bare':<10}{d:>5}{row}{bare['latency_ms']:>9.1f}{'-':>9}"
              f"{bare['steps_per_s']:>9.1f}{1:>9.2f}")  # fmt: skip
        for name in ("scripted", "tiny"):
            f = r["runs"][name][str(d)]
            row = "".join(f"{f[p + '_ms']:>9.1f}" for p in PHASES)
            print(f"{name:<10}{d:>5}{row}{f['latency_ms']:>9.1f}{f['other_ms']:>9.1f}"
                  f"{f['steps_per_s']:>9.1f}{f['steps_per_s'] / bare['steps_per_s']:>9.2f}")  # fmt: skip
    print("(ms: medians per turn; latency: mean turn; other: per turn beyond its latency, "
          "episode boundaries amortised; bare = screenshot + the same action, no engine/bus/blobs)")  # fmt: skip
    tokens = ", ".join(f"{r['runs']['tiny'][str(d)]['prompt_tokens']:.0f}" for d in LEVELS)
    print(f"(tiny: median prompt {tokens} tokens at {', '.join(map(str, LEVELS))} desktops; "
          "it grows with the turn, up to K+Δ = 10 screenshots, so longer episodes cost more)")  # fmt: skip
    print(f"\n{'path':<10}{'desk':>5}{'steps/s':>9}   CPU ms per step: {'bench':>7}{'broker':>8}"
          f"{'desktops':>10}{'total':>8}   cores busy: {'all':>5}{'others':>8}")  # fmt: skip
    for d in LEVELS:
        for name in ("bare", "scripted", "tiny"):
            f = r["runs"][name][str(d)]
            parts = [f[f"cpu_ms_per_step_{k}"] for k in ("bench", "broker", "desktops")]
            print(f"{name:<10}{d:>5}{f['steps_per_s']:>9.1f}{'':>19}"
                  + "".join(f"{v:>{w}.1f}" for v, w in zip(parts, (7, 8, 10), strict=True))
                  + f"{sum(parts):>8.1f}{'':>15}{f['cores_busy']:>5.2f}{f['cores_busy_others']:>8.2f}")  # fmt: skip
    print(f"(bench: this process — the worker with its engine, or the bare loop's client; "
          f"cores busy of {r['cpus']}: the whole machine, and what is not ours)")  # fmt: skip
    print(f"worker/bare with the scripted policy at 4 desktops: {r['worker_vs_bare_scripted']:.2f}; "
          f"tiny/scripted at 4: {r['tiny_vs_scripted_4']:.2f}; bench {seconds:.0f} s")  # fmt: skip


def main() -> int:
    """Parse arguments, run the bench, print and optionally save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (under a minute)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--image-max-side", type=int, default=640, help="policy image size")
    parser.add_argument("--max-tokens", type=int, default=8, help="tiny policy response length")
    args = parser.parse_args()
    started = time.perf_counter()
    result = asyncio.run(main_async(args))
    print_table(result, time.perf_counter() - started)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
