"""Service-runner overhead against raw aiokafka, on the same broker in the same run.

Sends `rollout-step`-sized events (200 response tokens with logprobs, ~3 KB) and consumes
them two ways: raw aiokafka (consumer + msgpack decode) and the scalecua service runner
(typed decode, dispatch, dead-letter checks, manual commits). Measures end-to-end
throughput (blast) and send→process latency (paced). Prints a table; `--json PATH` writes
`runner_vs_raw_throughput`, `added_p50_ms` and the raw figures.

    python bench/bus.py --quick --json bench-bus.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402

from runtime.broker import EmbeddedBroker  # noqa: E402
from runtime.bus import EventProducer, Record  # noqa: E402
from runtime.config import BusSettings  # noqa: E402
from runtime.processor import Output, Processor  # noqa: E402
from runtime.service import ServiceRunner  # noqa: E402
from topics.codec import encode  # noqa: E402
from topics.events import RolloutStep  # noqa: E402

TOPIC = "rollout-step"


def make_events(n: int, run: str) -> list[RolloutStep]:
    """Build n realistic rollout-step events."""
    text = "I will click the Save button in the toolbar. " * 8
    return [
        RolloutStep(
            trajectory_id=f"{run}-traj-{i % 64}",
            step=i,
            task_id="bench",
            group_id=f"{run}-g",
            response_ids=list(range(1000, 1200)),
            response_logprobs=[-0.25] * 200,
            response_text=text,
            action={"action": "left_click", "coordinate": [500, 412]},
            observation_ref="sha256:" + "ab" * 32,
        )  # fmt: skip
        for i in range(n)
    ]


def percentile(values: list[float], q: float) -> float:
    """Return the q-quantile (0..1) of values."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class _Sink(Processor):
    """A runner processor that records when each event arrived."""

    def __init__(self, topic_name: str, wanted: set[str]) -> None:
        self.name = "bench-sink"
        self.topics = [topic_name]
        self.arrivals: dict[str, float] = {}
        self.wanted = wanted
        self.done = asyncio.Event()

    async def process(self, record: Record) -> list[Output]:
        if record.event.event_id in self.wanted:
            self.arrivals[record.event.event_id] = time.perf_counter()
            if len(self.arrivals) >= len(self.wanted):
                self.done.set()
        return []


async def _send_all(
    producer: EventProducer, events: list[RolloutStep], pace_s: float
) -> dict[str, float]:
    sent: dict[str, float] = {}
    futures = []
    for ev in events:
        sent[ev.event_id] = time.perf_counter()
        futures.append(await producer.send(TOPIC, ev))
        if pace_s:
            await producer.wait_acks(futures)
            futures = []
            await asyncio.sleep(pace_s)
    await producer.wait_acks(futures)
    return sent


async def run_runner(
    settings: BusSettings, events: list[RolloutStep], pace_s: float
) -> tuple[float, list[float]]:
    """Send events and consume them through the service runner; return (msg/s, latencies ms)."""
    sink = _Sink(TOPIC, {ev.event_id for ev in events})
    runner = ServiceRunner(sink, settings, poll_timeout_ms=20, metrics_interval_s=3600)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    await asyncio.wait_for(runner.ready.wait(), 30)
    async with EventProducer(settings) as producer:  # connected before the clock starts, as raw
        t0 = time.perf_counter()
        sent = await _send_all(producer, events, pace_s)
        await asyncio.wait_for(sink.done.wait(), 300)
        elapsed = time.perf_counter() - t0
    runner.stop()
    await task
    lat = [(sink.arrivals[k] - sent[k]) * 1000 for k in sent]
    return len(events) / elapsed, lat


async def run_raw(
    settings: BusSettings, events: list[RolloutStep], pace_s: float
) -> tuple[float, list[float]]:
    """Send events with raw aiokafka and consume them with a raw aiokafka consumer."""
    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=settings.bootstrap, group_id=f"bench-raw-{time.time_ns()}",
        auto_offset_reset="earliest", session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
    )  # fmt: skip
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap, acks="all", linger_ms=settings.linger_ms,
        enable_idempotence=False, max_request_size=settings.max_request_size,
    )  # fmt: skip
    await consumer.start()
    await producer.start()
    wanted = {ev.event_id for ev in events}
    arrivals: dict[str, float] = {}
    done = asyncio.Event()
    decoder = msgspec.msgpack.Decoder(RolloutStep)

    async def consume() -> None:
        while not done.is_set():
            batches = await consumer.getmany(timeout_ms=20)
            for msgs in batches.values():
                for m in msgs:
                    ev = decoder.decode(m.value)
                    if ev.event_id in wanted:
                        arrivals[ev.event_id] = time.perf_counter()
            if len(arrivals) >= len(events):
                done.set()

    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)
    reader = asyncio.create_task(consume())
    sent: dict[str, float] = {}
    t0 = time.perf_counter()
    futures = []
    for ev in events:
        sent[ev.event_id] = time.perf_counter()
        futures.append(await producer.send(TOPIC, encode(ev), key=ev.trajectory_id.encode()))
        if pace_s:
            await asyncio.gather(*futures)
            futures = []
            await asyncio.sleep(pace_s)
    await asyncio.gather(*futures)
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - t0
    await reader
    await producer.stop()
    await consumer.stop()
    return len(events) / elapsed, [(arrivals[k] - sent[k]) * 1000 for k in sent]


async def _on_fresh_broker(
    fn: Callable[..., Awaitable[tuple[float, list[float]]]],
    events: list[RolloutStep],
    pace_s: float,
) -> tuple[float, list[float], float]:
    """Run one measurement on a fresh broker; return (msg/s, latencies, client CPU us/event)."""
    # A fresh in-memory broker per measurement: both paths see the same empty log. CPU time
    # of this process (producer + consumer side) is robust to other load on the machine.
    async with EmbeddedBroker() as broker:
        cpu0 = time.process_time()
        rate, lat = await fn(BusSettings(bootstrap=broker.bootstrap), events, pace_s)
        cpu_us = (time.process_time() - cpu0) * 1e6 / len(events)
    return rate, lat, cpu_us


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    """Run both paths on the same kind of broker, alternating, and return the figures."""
    n_tp, n_lat = (3000, 300) if args.quick else (20000, 2000)
    rounds = 3 if args.quick else 5
    pace = 0.002
    size = len(encode(make_events(1, "x")[0]))
    raw_tps, run_tps, raw_cpu, run_cpu = [], [], [], []
    for i in range(rounds):  # alternate so drift on a shared machine hits both paths alike
        tp, _, cpu = await _on_fresh_broker(run_raw, make_events(n_tp, f"raw{i}"), 0)
        raw_tps.append(tp)
        raw_cpu.append(cpu)
        tp, _, cpu = await _on_fresh_broker(run_runner, make_events(n_tp, f"run{i}"), 0)
        run_tps.append(tp)
        run_cpu.append(cpu)
    raw_tp, run_tp = statistics.median(raw_tps), statistics.median(run_tps)
    _, raw_lat, _ = await _on_fresh_broker(run_raw, make_events(n_lat, "rawlat"), pace)
    _, run_lat, _ = await _on_fresh_broker(run_runner, make_events(n_lat, "runlat"), pace)
    result = {
        "event_bytes": size,
        "events_throughput": n_tp,
        "events_latency": n_lat,
        "raw_throughput_msg_s": raw_tp,
        "runner_throughput_msg_s": run_tp,
        "runner_vs_raw_throughput": run_tp / raw_tp,
        "raw_cpu_us_per_event": statistics.median(raw_cpu),
        "runner_cpu_us_per_event": statistics.median(run_cpu),
        "runner_vs_raw_cpu": statistics.median(run_cpu) / statistics.median(raw_cpu),
        "rounds": rounds,
        "raw_p50_ms": statistics.median(raw_lat),
        "runner_p50_ms": statistics.median(run_lat),
        "raw_p99_ms": percentile(raw_lat, 0.99),
        "runner_p99_ms": percentile(run_lat, 0.99),
    }
    result["added_p50_ms"] = result["runner_p50_ms"] - result["raw_p50_ms"]
    result["added_p99_ms"] = result["runner_p99_ms"] - result["raw_p99_ms"]
    return result


def print_table(r: dict[str, float]) -> None:
    """Print the comparison table."""
    print(f"bus bench: {r['events_throughput']} events for throughput, {r['events_latency']} paced "
          f"for latency, {r['event_bytes']} B each")  # fmt: skip
    print(f"{'path':<16}{'msg/s':>10}{'CPU us/ev':>11}{'p50 ms':>10}{'p99 ms':>10}")
    for label, key in (("raw aiokafka", "raw"), ("service runner", "runner")):
        print(f"{label:<16}{r[key + '_throughput_msg_s']:>10.0f}{r[key + '_cpu_us_per_event']:>11.1f}"
              f"{r[key + '_p50_ms']:>10.2f}{r[key + '_p99_ms']:>10.2f}")  # fmt: skip
    print(f"runner/raw: throughput {r['runner_vs_raw_throughput']:.2f}, CPU per event "
          f"{r['runner_vs_raw_cpu']:.2f}; added p50 {r['added_p50_ms']:+.2f} ms, "
          f"added p99 {r['added_p99_ms']:+.2f} ms (median of {r['rounds']} alternating rounds)")  # fmt: skip


def main() -> None:
    """Parse arguments, run the bench, print and optionally save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run, under a minute")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    try:
        import uvloop

        result = uvloop.run(main_async(args))
    except ImportError:
        result = asyncio.run(main_async(args))
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
