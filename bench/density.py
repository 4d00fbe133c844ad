"""How many real desktops one machine holds, all stepped by one rollout worker (issue 32).

The paper runs 600 environments; an OSWorld VM needs about 4 GB, so a 24 GB host holds about
5 of them. This bench finds how many of this project's contained desktops (Xvfb + openbox +
the apps, in their own namespaces and cgroups: runtime/envs/desktop/) one machine holds while
one real rollout worker (consumers/rollout/service.py, the scripted policy) plays episodes
on every one of them, ramping N = 4 (the baseline), 8, 16, 32, 64, ... for each kind:

  * plain: built-in terminal tasks (an xterm opened with ctrl+alt+t, commands typed);
  * calc: built-in LibreOffice Calc tasks (the sheet opened in Calc at setup);
  * chromium (`--chromium`): a bench task that opens a local page in Chromium and scrolls it.

Per point: a fresh embedded broker, a `DesktopPool` of N desktops, the worker wired as
`rollout_service` wires it (default bus settings, glibc arenas as the CLI sets them), and
more rollout requests than the point can play, so every desktop stays busy. The window opens
a warm-up after every desktop has acted once (a worker starts its episodes' setups a few at
a time); steps/s count the `rollout-step` events the worker wrote in it, in total and per
desktop, and "stepped" the desktops that acted in it (every one must). Memory: the PSS of
each desktop's process tree (shared pages split among their users: lifecycle.py
`Desktop.memory`) in the middle of the window, the worker's (this process's: it keeps what
earlier points grew it to) and the machine's used memory (MemTotal - MemAvailable, other
programs' included) at its peak. Resets: each `Desktop.reset` the pool ran between episodes
up to the window's end (a p99 of a few dozen is about their maximum). Environment failures:
episodes ended with status `error`, failed resets, and desktops the pool could not replace
(`desktops_failing`). Also per point: the worker's event-loop lag (p99), the machine's busy
cores and whose they are (the worker, the desktops with the broker, other programs: on a
shared machine, the reason two runs differ).

A kind's ramp stops at the first point that uses more than 85% of MemTotal, whose steps/s per
desktop fall below half of N = 4's, that leaves a desktop unstepped, or that has an
environment failure; then one point halfway between the last that held and that one
refines the answer (`--refine`). A point whose projected memory (the largest point's, per
desktop, on top of what the machine uses now) is over 85% is not started: on a shared
machine the OOM killer is no way to find the limit.

Pacing: a real policy thinks about 10 s per turn (the paper: 50 turns in about 540 s), so a
desktop's demand is a step every few seconds, not as fast as the scripted policy answers.
The worker's player is the scripted one behind a think time per turn (default 3 s, drawn
uniformly within +-1 s): a desktop then steps at the rate its episodes ask for while the
machine keeps up, and the per-desktop rate falls only when the machine saturates. Three
seconds is about three times the real demand, so the densities found are conservative, and
a 30 s window still sees several turns per desktop; the jitter keeps the desktops from
turning in lockstep (real generation times vary, and a synchronised fleet would measure
burst contention, not the steady load).

Prints one row per point and the answer per kind; `--json PATH` writes
`max_plain_desktops`, `max_calc_desktops` (and `max_chromium_desktops`), `pss_mib_plain`
(per desktop at the plain maximum), `steps_per_s_at_max` and `reset_p99_ms_at_max` (plain
maximum), `env_failures` (all points) and each point's figures. `--quick` runs plain N = 4
and 8 and calc N = 4 with a 4 s window and a 1 s think time: under a minute on an idle
machine (a third of it importing torch), more while others share its two cores.

    .venv/bin/python bench/density.py --quick --json bench-density.json
    .venv/bin/python bench/density.py --chromium --json bench-density.json   # ~35 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.process_memory import few_malloc_arenas  # noqa: E402

if __name__ == "__main__":
    few_malloc_arenas()  # as `scalecua rollout` runs (cli/__init__.py); re-runs this script

from bench.rollout import worker  # noqa: E402
from consumers.rollout.episode import EpisodeConfig  # noqa: E402
from consumers.rollout.players import EpisodePlayer, Player, Reply, build_player  # noqa: E402
from consumers.rollout.service import RolloutConfig  # noqa: E402
from producers.rollout_requests import publish_requests, request_group  # noqa: E402
from producers.task_import import publish_tasks  # noqa: E402
from runtime.blobstore import open_blob_store  # noqa: E402
from runtime.broker import EmbeddedBroker  # noqa: E402
from runtime.bus import EventConsumer  # noqa: E402
from runtime.config import BusSettings  # noqa: E402
from runtime.envs.desktop.lifecycle import Desktop  # noqa: E402
from runtime.envs.desktop.pool import DesktopPool  # noqa: E402
from runtime.envs.tasks.builtin import builtin_ids, reference_solution  # noqa: E402
from runtime.envs.tasks.model import Task  # noqa: E402
from topics.events import RolloutStep, TaskEvent, TrajectoryComplete  # noqa: E402

__all__ = ["MeasuredPool", "PacedPlayer", "Settings", "measure_point", "ramp", "main"]

BASELINE = 4  # desktops at the first point: the rate every other point is held against
MEMORY_LIMIT = 0.85  # of MemTotal, the machine's used memory at which a ramp stops
SLOWDOWN_LIMIT = 0.5  # steps/s per desktop against the baseline's, below which it stops
GROUP = 8  # rollouts per request group (the paper's n)
MAX_STEPS = 50  # the paper's turn limit (the scripted episodes end well before it)
SETTLE_CAP_S = 180.0  # the longest wait, from the first action, for every desktop's first
_PAGE = "<html><title>density</title><body>" + "<p>row of text to scroll</p>" * 400 + "</body>"
CHROMIUM_TASK = {
    "id": "bench-density-chromium-scroll",
    "instruction": "Read the open page to its end, then finish.",
    "config": [
        {
            "type": "execute",
            "parameters": {
                "shell": True,
                "command": f"printf '%s' '{_PAGE}' > /home/user/page.html",
            },
        },
        {"type": "open", "parameters": {"path": "/home/user/page.html"}},
    ],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo ok", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
    },
    "solution": [
        {
            "action": "scroll",
            "coordinate": [500, 500],
            "scroll_direction": "down",
            "scroll_amount": 5,
        }
    ]
    * 8
    + [{"action": "done"}],
}


def kind_tasks(kind: str) -> list[str]:
    """The task ids a kind's desktops play (built-in ones, or the bench's own)."""
    if kind == "plain":  # terminal tasks that open an xterm and type into it (not 1-turn ones)
        terminal = [t for t in builtin_ids() if t.startswith("terminal_")]
        return [t for t in terminal if len(reference_solution(t)) >= 4]
    if kind == "calc":
        return [t for t in builtin_ids() if t.startswith("calc_")]
    return [CHROMIUM_TASK["id"]]


@dataclass(frozen=True)
class Settings:
    """How each point is measured."""

    think_s: float  # the paced policy's mean think time per turn
    jitter_s: float  # think times are drawn uniformly within think_s +- jitter_s
    warmup_s: float  # from when every desktop has acted: steps before are not counted
    window_s: float  # the counted window after the warm-up
    image_max_side: int  # the policy's screenshot is shrunk to fit this (the CLI default)
    refine: int  # extra points between the last that held and the first that did not


# -- pacing -------------------------------------------------------------------------------
class _PacedEpisode:
    """One episode of the paced player: thinks, then lets the script answer."""

    def __init__(self, inner: EpisodePlayer, think: Callable[[], float]) -> None:
        self.inner = inner
        self.think = think

    async def act(self, image: Any | None, observation: str) -> Reply:
        seconds = self.think()
        await asyncio.sleep(seconds)
        reply = await self.inner.act(image, observation)
        reply.generate_ms = seconds * 1000  # where a model's time would go
        return reply

    def close(self) -> None:
        self.inner.close()


class PacedPlayer:
    """A player that thinks `think_s` +- `jitter_s` seconds (uniform) before each turn."""

    def __init__(self, inner: Player, think_s: float, jitter_s: float, seed: int = 0) -> None:
        self.inner = inner
        self.think_s = think_s
        self.jitter_s = jitter_s
        self._random = random.Random(seed)

    def __getattr__(self, name: str) -> Any:
        # prompt_variant, system_prompt, processor, sampling, policy_version, context_window
        return getattr(self.inner, name)

    def _think(self) -> float:
        spread = self._random.uniform(-self.jitter_s, self.jitter_s)
        return max(0.0, self.think_s + spread)

    def start(self, instruction: str, solution: list[dict[str, Any]] | None) -> EpisodePlayer:
        """Begin an episode of the inner player, paced."""
        return _PacedEpisode(self.inner.start(instruction, solution), self._think)

    async def load_weights(self, checkpoint_uri: str, policy_version: int) -> None:
        """Pass new weights on to the inner player."""
        await self.inner.load_weights(checkpoint_uri, policy_version)

    async def close(self) -> None:
        """Release the inner player."""
        await self.inner.close()


# -- the pool, watched --------------------------------------------------------------------
class MeasuredPool(DesktopPool):
    """A DesktopPool that times every reset and notes when each desktop played an action."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.resets: list[tuple[float, float]] = []  # (when it began, epoch s; seconds)
        self.reset_failures: list[str] = []
        self.actions: dict[str, list[float]] = {}  # desktop id -> epoch s of each action
        self._watched: set[int] = set()

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Desktop]:
        """Lend a desktop as the pool does, watching its resets and its actions."""
        async with super().acquire() as desktop:
            self._watch(desktop)
            yield desktop

    def _watch(self, desktop: Desktop) -> None:
        """Wrap this desktop's `reset` and `controller` (once): the pool resets it through the
        first, the worker acts through the controllers the second makes."""
        if id(desktop) in self._watched:
            return
        self._watched.add(id(desktop))
        reset, controller = desktop.reset, desktop.controller
        actions = self.actions.setdefault(desktop.desktop_id, [])

        async def timed_reset() -> None:
            began, started = time.time(), time.monotonic()
            try:
                await reset()
            except Exception as exc:
                self.reset_failures.append(f"{type(exc).__name__}: {exc}")
                raise
            self.resets.append((began, time.monotonic() - started))

        def counted_controller(**kwargs: Any) -> Any:
            ctl = controller(**kwargs)
            step = ctl.step

            async def counted_step(action: Any) -> Any:
                result = await step(action)
                actions.append(time.time())
                return result

            ctl.step = counted_step
            return ctl

        desktop.reset = timed_reset  # type: ignore[method-assign]
        desktop.controller = counted_controller  # type: ignore[method-assign]


# -- the machine --------------------------------------------------------------------------
def meminfo() -> dict[str, int]:
    """The machine's memory (bytes): total and used (MemTotal - MemAvailable)."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0]) * 1024
    return {"total": values["MemTotal"], "used": values["MemTotal"] - values["MemAvailable"]}


def pss_of(pid: int | str) -> int:
    """PSS bytes of one process (0 if it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_ticks() -> tuple[float, float]:
    """The machine's busy and total CPU seconds so far (all cores)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


# -- one point ----------------------------------------------------------------------------
async def read_topic(settings: BusSettings, topic_name: str, kind: type) -> list[Any]:
    """Every event of a kind on a topic, from the start to its current end."""
    events: list[Any] = []
    async with EventConsumer(settings, [topic_name], group_id=None) as consumer:
        async for batch in consumer.catch_up(topic_name, timeout_s=120.0):
            events += [r.event for r in batch if isinstance(r.event, kind)]
    return events


async def all_stepped(pool: MeasuredPool, n: int, timeout_s: float, cap_s: float) -> float:
    """Wait until every desktop has acted once, or `cap_s` after the first did; return when
    (epoch s). RuntimeError if none acted within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        firsts = [ts[0] for ts in pool.actions.values() if ts]
        if len(firsts) >= n or (firsts and time.time() > min(firsts) + cap_s):
            return max(firsts) if len(firsts) >= n else time.time()
        if not firsts and time.monotonic() > deadline:
            raise RuntimeError(f"the worker played no action in {timeout_s:g} s")
        await asyncio.sleep(0.1)


def requests_for(kind: str, n: int, s: Settings) -> list[Any]:
    """Enough requests to keep n desktops busy through the warm-up and the window."""
    turns = 5 if kind == "plain" else 8  # the shortest episodes of the kind, about
    shortest_s = turns * max(0.5, s.think_s - s.jitter_s)
    per_desktop = 2 + math.ceil((SETTLE_CAP_S + s.warmup_s + s.window_s) / shortest_s)
    tasks = kind_tasks(kind)
    out: list[Any] = []
    i = 0
    while len(out) < n * per_desktop:
        out += request_group(tasks[i % len(tasks)], GROUP, max_steps=MAX_STEPS)
        i += 1
    return out


def _cpu_of_tree(root: int) -> float:
    """CPU seconds used so far by `root`'s descendants (the desktops, the broker) and the
    children they reaped."""
    hz = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                # Its own time and its reaped children's: an app that ended in the window
                # still counts, through whoever waited for it (init, a shell).
                used = sum(int(x) for x in fields[11:15]) / hz
                table[int(entry.name)] = (int(fields[1]), used)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo += children.get(pid, [])
    return total


async def _loop_lag(lags: list[float], every_s: float = 0.1) -> None:
    """Note how late the worker's event loop wakes a sleeper (it runs every episode)."""
    while True:
        due = time.monotonic() + every_s
        await asyncio.sleep(every_s)
        lags.append(time.monotonic() - due)


async def watch_window(
    pool: MeasuredPool, broker_pid: int, start: float, end: float
) -> dict[str, float]:
    """Through the window: the peak machine memory (every second), PSS halfway, and CPU."""
    peak = fds = 0
    pss: dict[str, float] = {}
    machine0, worker0 = cpu_ticks(), time.process_time()
    ours0 = await asyncio.to_thread(_cpu_of_tree, os.getpid())
    halfway = (start + end) / 2
    lags: list[float] = []
    ticker = asyncio.create_task(_loop_lag(lags))
    while (now := time.time()) < end:
        peak = max(peak, meminfo()["used"])
        fds = max(fds, len(os.listdir("/proc/self/fd")))
        if not pss and now >= halfway:
            desktops = await asyncio.to_thread(lambda: [d.memory() for d in pool.desktops])
            pss = {
                "desktops_pss": sum(m["pss"] for m in desktops),
                "desktops_uss": sum(m["uss"] for m in desktops),
                "worker_pss": pss_of("self"),
                "broker_pss": pss_of(broker_pid),
                "measured": len(desktops),
            }
        await asyncio.sleep(min(1.0, max(0.0, end - time.time())))
    ticker.cancel()
    machine1, worker1 = cpu_ticks(), time.process_time()
    ours1 = await asyncio.to_thread(_cpu_of_tree, os.getpid())
    wall = (machine1[1] - machine0[1]) / (os.cpu_count() or 1)
    busy, worker = machine1[0] - machine0[0], worker1 - worker0
    return {
        "peak_used": peak,
        "loop_lag_p99_ms": percentile(lags, 99) * 1000,
        "worker_fds": fds,
        "cores_busy": busy / max(wall, 1e-9),
        "worker_cores": worker / max(wall, 1e-9),
        "desktop_cores": (ours1 - ours0) / max(wall, 1e-9),  # the broker's included
        "other_cores": max(0.0, busy - worker - (ours1 - ours0)) / max(wall, 1e-9),
        **pss,
    }


@dataclass
class _Gathered:
    """What one point measured, before it is summed up."""

    kind: str
    n: int
    boot_s: float
    close_s: float
    memory_before: dict[str, int]
    window: tuple[float, float]  # epoch s: the counted window
    watched: dict[str, float]
    pool: MeasuredPool
    pool_stats: dict[str, float]
    steps: list[RolloutStep]
    completes: list[TrajectoryComplete]


async def measure_point(
    kind: str, n: int, s: Settings, scripted: Player, scratch: Path
) -> dict[str, Any]:
    """Start n desktops of a kind, step them all with one worker; return the point's figures."""
    memory_before = meminfo()
    pool = MeasuredPool(n)
    booted = time.monotonic()
    await pool.start()
    boot_s = time.monotonic() - booted
    try:
        async with EmbeddedBroker() as broker:
            settings = BusSettings(bootstrap=broker.bootstrap)  # the worker's defaults
            if kind == "chromium":
                task = Task.from_dict(CHROMIUM_TASK)
                event = TaskEvent(task_id=task.id, task=task.to_dict(), source="bench")
                await publish_tasks(settings, [event])
            player = PacedPlayer(scripted, s.think_s, s.jitter_s, seed=n)
            config = RolloutConfig(
                desktops=n, episode=EpisodeConfig(image_max_side=s.image_max_side)
            )
            blobs = open_blob_store(str(scratch / f"blobs-{kind}-{n}"))
            async with worker(settings, config, player, pool, blobs) as (rollout, runner):
                await publish_requests(settings, requests_for(kind, n, s))
                # Setups at start come in waves (a worker starts them all together, a few at
                # a time): the warm-up begins once every desktop has acted.
                settled = await all_stepped(pool, n, timeout_s=300, cap_s=SETTLE_CAP_S)
                window = (settled + s.warmup_s, settled + s.warmup_s + s.window_s)
                await asyncio.sleep(max(0.0, window[0] - time.time()))
                watched = await watch_window(pool, broker.pid, *window)
                pool_stats = {**rollout.stats(), "rebalances": runner.metrics.rebalances}
            steps = await read_topic(settings, "rollout-step", RolloutStep)
            completes = await read_topic(settings, "trajectory-complete", TrajectoryComplete)
    finally:
        closing = time.monotonic()
        await pool.close()
        close_s = time.monotonic() - closing
    gathered = _Gathered(kind, n, boot_s, close_s, memory_before, window, watched, pool,
                         pool_stats, steps, completes)  # fmt: skip
    return point_figures(gathered)


def point_figures(g: _Gathered) -> dict[str, Any]:
    """The reported figures of one point: rates in the window, resets and episodes of it all."""
    (start, end), watched, n = g.window, g.watched, g.n
    counted = [e for e in g.steps if start < e.ts_ms / 1000 <= end]
    per_desktop = [sum(start < t <= end for t in ts) for ts in g.pool.actions.values()]
    per_desktop += [0] * (n - len(per_desktop))  # desktops never lent out
    # Resets begun by the time the window ended (then the worker stops: episodes it
    # abandons reset as well, all at once)
    resets = [seconds * 1000 for began, seconds in g.pool.resets if began <= end]
    errors = [c for c in g.completes if c.status == "error"]
    total = meminfo()["total"]
    rate = len(counted) / (end - start)
    turns = [e.latency_ms - e.timings_ms.get("generate", 0.0) for e in counted]
    measured = max(1, int(watched.get("measured", 1)))
    own = ("desktops_pss", "worker_pss", "broker_pss")
    return {
        "kind": g.kind,
        "desktops": n,
        "boot_s": g.boot_s,
        "close_s": g.close_s,
        "pss_mib_per_desktop": watched.get("desktops_pss", 0) / measured / 2**20,
        "uss_mib_per_desktop": watched.get("desktops_uss", 0) / measured / 2**20,
        "desktops_pss_gib": watched.get("desktops_pss", 0) / 2**30,
        "worker_pss_mib": watched.get("worker_pss", 0) / 2**20,
        "worker_fds": int(watched["worker_fds"]),
        "loop_lag_p99_ms": watched["loop_lag_p99_ms"],
        "broker_pss_mib": watched.get("broker_pss", 0) / 2**20,
        "machine_used_gib": watched["peak_used"] / 2**30,
        "machine_used_frac": watched["peak_used"] / total,
        "added_gib": (watched["peak_used"] - g.memory_before["used"]) / 2**30,
        "added_mib_per_desktop": (watched["peak_used"] - g.memory_before["used"]) / n / 2**20,
        # what a desktop costs with its share of the worker and the broker (PSS: this run's
        # own, where the machine's used memory moves with other programs too)
        "own_mib_per_desktop": sum(watched.get(k, 0) for k in own) / n / 2**20,
        "memory_total_gib": total / 2**30,
        "steps": len(counted),
        "steps_per_s": rate,
        "steps_per_s_per_desktop": rate / n,
        # a turn's own time, the policy's thinking left out: what the machine's load slows
        "turn_p50_ms": percentile(turns, 50),
        "turn_p99_ms": percentile(turns, 99),
        "stepped_desktops": sum(c > 0 for c in per_desktop),
        "min_desktop_steps": min(per_desktop),
        "resets": len(resets),
        "reset_p50_ms": percentile(resets, 50),
        "reset_p99_ms": percentile(resets, 99),
        "reset_ms": sorted(round(r) for r in resets),
        "episodes": len(g.completes),
        "env_errors": len(errors),
        "error_reasons": sorted({(c.error or "")[:160] for c in errors})[:5],
        "reset_failures": len(g.pool.reset_failures),
        "desktops_failing": int(g.pool_stats["desktops_failing"]),
        "desktop_start_failures": int(g.pool_stats["desktop_start_failures"]),
        "rebalances": int(g.pool_stats["rebalances"]),  # the worker's group: 1 is its start
        "cores_busy": watched["cores_busy"],
        "worker_cores": watched["worker_cores"],
        "desktop_cores": watched["desktop_cores"],
        "other_cores": watched["other_cores"],
    }


def env_failures(point: dict[str, Any]) -> int:
    """A point's environment failures: error episodes, failed resets, desktops missing."""
    return point["env_errors"] + point["reset_failures"] + point["desktops_failing"]


def verdict(point: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Why a point does not hold ('' when it does)."""
    reasons = []
    if point["machine_used_frac"] > MEMORY_LIMIT:
        reasons.append(f"memory {point['machine_used_frac']:.0%} > {MEMORY_LIMIT:.0%}")
    if point["steps_per_s_per_desktop"] < SLOWDOWN_LIMIT * baseline["steps_per_s_per_desktop"]:
        reasons.append("steps/s per desktop halved")
    if point["stepped_desktops"] < point["desktops"]:
        reasons.append(f"{point['desktops'] - point['stepped_desktops']} desktops unstepped")
    if env_failures(point):
        reasons.append(f"{env_failures(point)} environment failures")
    return "; ".join(reasons)


def projected_use(points: list[dict[str, Any]], n: int) -> float:
    """The share of MemTotal the machine would use with n desktops, at what the largest point
    took per desktop: its own PSS, or what the machine's used memory grew by if more (the
    kernel's part: page tables, sockets, the desktops' tmpfs)."""
    last = max((p for p in points if not p.get("skipped")), key=lambda p: p["desktops"])
    per_desktop = max(last["own_mib_per_desktop"], last["added_mib_per_desktop"]) * 2**20
    now = meminfo()
    return (now["used"] + n * per_desktop) / now["total"]


async def ramp(
    kind: str, levels: list[int], s: Settings, scripted: Player, scratch: Path
) -> list[dict[str, Any]]:
    """Measure a kind at each level until a point does not hold, then refine; every point.

    A level whose projected memory is over the limit is not started (the machine is shared:
    better not to find its limit by the OOM killer); it counts as not holding.
    """
    points: list[dict[str, Any]] = []
    held: int | None = None
    failed: int | None = None

    async def run(n: int) -> bool:
        t = time.monotonic()
        if points and (projected := projected_use(points, n)) > MEMORY_LIMIT:
            print(f"  {kind} {n:>4}: not started, it would use {projected:.0%} of the memory",
                  file=sys.stderr, flush=True)  # fmt: skip
            points.append({"kind": kind, "desktops": n, "skipped": True,
                           "held_why_not": f"memory projected {projected:.0%}"})  # fmt: skip
            return False
        point = await measure_point(kind, n, s, scripted, scratch)
        baseline = points[0] if points else point
        point["held_why_not"] = verdict(point, baseline)
        base_rate = baseline["steps_per_s_per_desktop"]
        point["vs_baseline"] = point["steps_per_s_per_desktop"] / base_rate if base_rate else 0.0
        points.append(point)
        print(f"  {kind} {n:>4}: {point['steps_per_s']:6.2f} steps/s "
              f"({point['steps_per_s_per_desktop']:.3f}/desktop, {point['vs_baseline']:.2f}x), "
              f"{point['pss_mib_per_desktop']:.0f} MiB PSS each, "
              f"loop lag p99 {point['loop_lag_p99_ms']:.0f} ms, "
              f"{point['machine_used_frac']:.0%} memory, {point['cores_busy']:.2f} cores busy: "
              f"{point['held_why_not'] or 'holds'} [{time.monotonic() - t:.0f} s]",
              file=sys.stderr, flush=True)  # fmt: skip
        return not point["held_why_not"]

    for n in levels:
        if not await run(n):
            failed = n
            break
        held = n
    for _ in range(s.refine if held is not None and failed is not None else 0):
        middle = (held + failed) // 2 // 4 * 4  # type: ignore[operator]
        if middle <= held:  # type: ignore[operator]
            break
        if await run(middle):
            held = middle
        else:
            failed = middle
    for point in points:
        point["max"] = point["desktops"] == held and not point.get("skipped")
    return points


def levels_up_to(first: int, limit: int) -> list[int]:
    """first, 2 first, 4 first, ... up to limit."""
    out = [first]
    while out[-1] * 2 <= limit:
        out.append(out[-1] * 2)
    return out


def at_max(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The point at a kind's maximum, if one held."""
    return next((p for p in points if p.get("max")), None)


def print_table(result: dict[str, Any]) -> None:
    """One row per point, then the answer per kind."""
    s = result["settings"]
    print(f"\nbench/density.py  ({'quick' if result['quick'] else 'full'}, {result['cpus']} CPUs, "
          f"{result['memory_total_gib']:.1f} GiB; think {s['think_s']:g} +- {s['jitter_s']:g} s "
          f"per turn; window {s['window_s']:g} s after {s['warmup_s']:g} s warm-up)")  # fmt: skip
    print(f"{'kind':<9}{'N':>4}{'boot s':>7}{'PSS/d':>6}{'wkr':>6}{'used GiB':>9}{'steps/s':>8}"
          f"{'/desk':>7}{'vs 4':>6}{'turn':>6}{'stepped':>9}{'reset p50':>10}{'p99':>6}"
          f"{'eps':>5}{'fail':>5}   cores: {'all':>4}{'wkr':>5}{'desk':>5}{'oth':>5}  "
          "verdict")  # fmt: skip
    for kind, points in result["runs"].items():
        for p in points:
            if p.get("skipped"):
                print(f"{kind:<9}{p['desktops']:>4}  not started: {p['held_why_not']}")
                continue
            used = f"{p['machine_used_gib']:.1f} {p['machine_used_frac']:.0%}"
            mark = " <- max" if p.get("max") else ""
            print(f"{kind:<9}{p['desktops']:>4}{p['boot_s']:>7.1f}{p['pss_mib_per_desktop']:>6.0f}"
                  f"{p['worker_pss_mib']:>6.0f}{used:>9}{p['steps_per_s']:>8.2f}"
                  f"{p['steps_per_s_per_desktop']:>7.3f}{p['vs_baseline']:>6.2f}"
                  f"{p['turn_p50_ms']:>6.0f}{p['stepped_desktops']:>5}/{p['desktops']:<3}"
                  f"{p['reset_p50_ms']:>10.0f}{p['reset_p99_ms']:>6.0f}{p['episodes']:>5}"
                  f"{env_failures(p):>5}   {'':>7}{p['cores_busy']:>4.2f}{p['worker_cores']:>5.2f}"
                  f"{p['desktop_cores']:>5.2f}{p['other_cores']:>5.2f}  "
                  f"{p['held_why_not'] or 'holds'}{mark}")  # fmt: skip
    print("(PSS/d: MiB per desktop, its whole process tree; wkr: the worker's MiB (this process); "
          "used: the machine's peak, other programs' included; turn: p50 ms of a turn without "
          "the think time; stepped: desktops that acted in the window / N; reset: ms; eps: "
          "episodes ended; fail: error episodes + failed resets + desktops missing; cores busy: "
          "the machine, the worker, the desktops with the broker, other programs)")  # fmt: skip
    for kind, points in result["runs"].items():
        best = at_max(points)
        print(f"{kind}: {best['desktops'] if best else 0} desktops held"
              + (f" ({best['steps_per_s']:.1f} steps/s, reset p99 {best['reset_p99_ms']:.0f} ms, "
                 f"{best['pss_mib_per_desktop']:.0f} MiB PSS each, "
                 f"{best['own_mib_per_desktop']:.0f} MiB each with the worker's and the "
                 "broker's share)" if best else ""))  # fmt: skip
    for reason in sorted({r for ps in result["runs"].values() for p in ps for r in
                          p.get("error_reasons", ())}):  # fmt: skip
        print(f"  error episode: {reason}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Ramp every kind asked for; return the figures."""
    s = (
        Settings(think_s=1.0, jitter_s=0.5, warmup_s=1.0, window_s=4.0,
                 image_max_side=args.image_max_side, refine=0)
        if args.quick
        else Settings(think_s=args.think, jitter_s=args.jitter, warmup_s=args.warmup,
                      window_s=args.window, image_max_side=args.image_max_side,
                      refine=args.refine)
    )  # fmt: skip
    plan = {"plain": [4, 8], "calc": [4]} if args.quick else {
        "plain": levels_up_to(BASELINE, args.max_plain),
        "calc": levels_up_to(BASELINE, args.max_calc),
    }  # fmt: skip
    if args.chromium and not args.quick:
        plan["chromium"] = levels_up_to(BASELINE, args.max_calc)
    runs: dict[str, list[dict[str, Any]]] = {}
    # The policy's processor renders each turn as the CLI's `--policy scripted` does.
    scripted = build_player("scripted")
    with tempfile.TemporaryDirectory(prefix="bench-density-") as tmp:
        for kind, levels in plan.items():
            runs[kind] = await ramp(kind, levels, s, scripted, Path(tmp))
    plain, calc = at_max(runs["plain"]), at_max(runs["calc"])
    return {
        "max_plain_desktops": plain["desktops"] if plain else 0,
        "max_calc_desktops": calc["desktops"] if calc else 0,
        "max_chromium_desktops": (at_max(runs["chromium"]) or {}).get("desktops", 0)
        if "chromium" in runs
        else None,
        "pss_mib_plain": plain["pss_mib_per_desktop"] if plain else None,
        "steps_per_s_at_max": plain["steps_per_s"] if plain else None,
        "reset_p99_ms_at_max": plain["reset_p99_ms"] if plain else None,
        "env_failures": sum(
            env_failures(p) for ps in runs.values() for p in ps if not p.get("skipped")
        ),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "memory_total_gib": meminfo()["total"] / 2**30,
        "settings": asdict(s),
        "runs": runs,
    }


def main() -> int:
    """Run the bench, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="plain 4, 8 and calc 4 (< 1 min)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--think", type=float, default=3.0, help="mean think time per turn, s")
    parser.add_argument("--jitter", type=float, default=1.0, help="think time spread (+-), s")
    parser.add_argument("--warmup", type=float, default=20.0, help="from the first step, s")
    parser.add_argument("--window", type=float, default=30.0, help="counted window per point, s")
    parser.add_argument("--max-plain", type=int, default=256, help="most plain desktops tried")
    parser.add_argument("--max-calc", type=int, default=64, help="most Calc desktops tried")
    parser.add_argument("--refine", type=int, default=1, help="points between held and not")
    parser.add_argument("--chromium", action="store_true", help="also ramp Chromium desktops")
    parser.add_argument("--image-max-side", type=int, default=1280,
                        help="the policy's screenshot size (the CLI default)")  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    result = asyncio.run(main_async(args))
    print_table(result)
    print(f"bench {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
