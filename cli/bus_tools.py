"""The async bodies of the event-backbone commands (kept apart so `--help` imports nothing heavy)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from shlex import quote
from typing import BinaryIO

import msgspec
import orjson

from runtime.addresses import is_loopback
from runtime.broker import EmbeddedBroker, create_topics, default_port
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings, broker_state_file, resolve_bootstrap
from runtime.errors import ConfigError, SchemaError
from topics.codec import encode, from_json, to_dict
from topics.events import Event
from topics.registry import TOPICS, topic

__all__ = [
    "run_broker",
    "topics_list",
    "topics_create",
    "tail",
    "produce",
    "replay",
    "start_embedded",
]


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def start_embedded(
    port: int | None,
    resume: str | None,
    archive: str | None,
    *,
    host: str = "127.0.0.1",
    advertise: str | None = None,
) -> tuple[EmbeddedBroker, dict[str, int]]:
    """Start the embedded broker as a new run, or as the resumption of an archived run.

    `resume` is a run id of the archive, or "latest"; the log is re-seeded from it before
    the new run is recorded (see runtime/runs.py). `host` is the address it listens on,
    `advertise` the name clients dial (default `host`). Returns the broker and the counts seeded.
    """
    from runtime.config import home_dir
    from runtime.runs import ensure_run, reseed_from_archive

    broker = EmbeddedBroker(
        port if port is not None else default_port(host), host=host, advertise=advertise
    )
    await broker.start(record_run=resume is None)
    if resume is None:
        return broker, {}
    try:
        settings = BusSettings(bootstrap=broker.bootstrap)
        archive = archive or str(home_dir() / "archive")
        source, seeded = await reseed_from_archive(
            settings, archive, None if resume == "latest" else resume
        )
        run = await ensure_run(settings, origin="embedded", resumed_from=source, seeded=seeded)
    except BaseException:
        broker.stop()
        raise
    broker.run_id = run.run_id
    counts = ", ".join(f"{n} {t}" for t, n in seeded.items()) or "nothing"
    _err(f"run {run.run_id} resumes {source} from {quote(archive)}: re-seeded {counts}")
    return broker, seeded


async def run_broker(
    port: int | None,
    resume: str | None = None,
    archive: str | None = None,
    *,
    host: str = "127.0.0.1",
    advertise: str | None = None,
) -> int:
    """Run the embedded broker until SIGINT/SIGTERM, recording its address for other commands."""
    state = broker_state_file()  # a home it cannot write to stops it before the broker starts
    broker, _ = await start_embedded(port, resume, archive, host=host, advertise=advertise)
    state.write_bytes(orjson.dumps({"bootstrap": broker.bootstrap, "pid": os.getpid()}))
    print(broker.bootstrap, flush=True)
    _err(f"broker ready at {broker.bootstrap} with {len(TOPICS)} topics, run {broker.run_id}; "
         f"export SCALECUA_BOOTSTRAP={broker.bootstrap} (Ctrl-C stops it)")  # fmt: skip
    if not is_loopback(host):
        _err(f"broker: listening on {broker.listen}: it has no authentication, so whoever "
             "reaches that address can read and write the log; keep it on a private network")  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set() and broker.running():
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass
    finally:
        broker.stop()
        if state.exists() and orjson.loads(state.read_bytes()).get("pid") == os.getpid():
            state.unlink()
    if not stop.is_set():
        _err("broker process exited unexpectedly")
        return 1
    _err("broker stopped")
    return 0


async def topics_list(bootstrap: str | None) -> int:
    """Print every registry topic with its layout and whether the broker has it."""
    from aiokafka.admin import AIOKafkaAdminClient

    boot = resolve_bootstrap(bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=10_000)
    try:
        await asyncio.wait_for(admin.start(), timeout=10)
        existing = set(await asyncio.wait_for(admin.list_topics(), timeout=10))
    except (TimeoutError, Exception) as exc:
        from runtime.errors import BrokerError

        raise BrokerError(f"cannot list topics on {boot}: {exc or type(exc).__name__}") from exc
    finally:
        try:
            await asyncio.wait_for(admin.close(), timeout=5)
        except Exception:  # never connected
            pass
    for spec in TOPICS.values():
        line = {
            "topic": spec.name, "event": spec.event_type.__name__, "key": spec.key_field,
            "partitions": spec.partitions, "compacted": spec.compacted,
            "exists": spec.name in existing,
        }  # fmt: skip
        print(orjson.dumps(line).decode())
    return 0


async def topics_create(
    bootstrap: str | None, names: list[str] | None, replication: int = 1
) -> int:
    """Create missing registry topics, name the log's run if it has none, and say which."""
    from runtime.runs import ensure_run

    boot = resolve_bootstrap(bootstrap)
    created = await create_topics(boot, names, replication)
    _err(f"created {len(created)} topics: {', '.join(created) or '(all existed)'}")
    if names is None or "runs" in names:
        run = await ensure_run(BusSettings(bootstrap=boot), origin="cluster")
        _err(f"the log's run: {run.run_id}")
    return 0


async def tail(
    topic_name: str,
    bootstrap: str | None,
    from_beginning: bool,
    max_records: int | None,
    idle_exit_s: float | None,
) -> int:
    """Print a topic's events as JSON lines, following new records."""
    topic(topic_name)
    settings = BusSettings.from_env(bootstrap)
    consumer = EventConsumer(settings, [topic_name], group_id=None)
    await consumer.start()
    started_ms = time.time_ns() // 1_000_000
    count = 0
    last = time.monotonic()
    out = sys.stdout
    try:
        tps = await consumer.partitions_of(topic_name)
        consumer.raw.assign(tps)
        if from_beginning:
            await consumer.raw.seek_to_beginning(*tps)
        else:
            # Tansu's end offset may point inside the last batch: drop records older than now.
            await consumer.raw.seek_to_end(*tps)
        while max_records is None or count < max_records:
            records = await consumer.getmany(timeout_ms=200)
            if records:
                last = time.monotonic()
            elif idle_exit_s is not None and time.monotonic() - last > idle_exit_s:
                break
            for r in records:
                if not from_beginning and r.timestamp_ms < started_ms - 1000:
                    continue
                meta = {"_topic": r.topic, "_partition": r.partition, "_offset": r.offset,
                        "_timestamp_ms": r.timestamp_ms}  # fmt: skip
                if r.event is not None:
                    line = {**to_dict(r.event), **meta}
                else:
                    line = {**meta, "_error": r.decode_error}
                out.write(orjson.dumps(line).decode() + "\n")
                count += 1
                if max_records is not None and count >= max_records:
                    break
            out.flush()
    except BrokenPipeError:
        pass
    finally:
        await consumer.stop()
    return 0


async def produce(topic_name: str, bootstrap: str | None, stdin: BinaryIO, *, raw: bool) -> int:
    """Validate JSON lines from stdin into events and write them; report bad lines."""
    topic(topic_name)
    settings = BusSettings.from_env(bootstrap)
    bad = 0
    futures = []
    async with EventProducer(settings) as producer:
        for lineno, line in enumerate(stdin, 1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            if raw:
                futures.append(await producer.send_raw(topic_name, line))
                continue
            try:
                event = from_json(topic_name, line)
                _check_encodable(topic_name, event)
            except SchemaError as exc:
                bad += 1
                _err(f"line {lineno}: {exc}")
                continue
            futures.append(await producer.send(topic_name, event))
        await producer.wait_acks(futures)
    _err(
        f"wrote {len(futures)} records to {topic_name}" + (f"; {bad} invalid lines" if bad else "")
    )
    return 1 if bad else 0


def _check_encodable(topic_name: str, event: Event) -> None:
    """Raise SchemaError when the wire cannot carry a decoded value (an integer beyond 64 bits)."""
    try:
        encode(event)
    except (OverflowError, msgspec.EncodeError) as exc:
        where = _oversized(to_dict(event))
        raise SchemaError(
            f"{topic_name}: {where or 'a value'} does not fit in 64 bits ({exc})"
        ) from None


def _oversized(value: object, path: str = "") -> str | None:
    """The path of the first integer outside [-2**63, 2**64 - 1] in decoded JSON, if any."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{path} = {value}" if not -(2**63) <= value < 2**64 else None
    if isinstance(value, dict):
        children = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value))
    else:
        return None
    for key, child in children:
        found = _oversized(child, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


async def replay(
    topic_name: str,
    out: str,
    *,
    bootstrap: str | None,
    archive: str | None,
    partitions: list[int] | None,
    start_offset: int,
    end_offset: int | None,
    since_ms: int | None,
    until_ms: int | None,
    run: str | None = None,
) -> int:
    """Copy a topic range from the live log or the archive to one Parquet file."""
    from runtime.archive.store import ArchiveStore
    from runtime.replay import (
        ReplayIncomplete,
        collect_live,
        filter_time,
        read_archive,
        records_to_table,
        write_table,
    )
    from runtime.runs import current_run

    topic(topic_name)
    if archive:
        runs = None
        if run is not None:
            known = await asyncio.to_thread(ArchiveStore(archive).runs)
            if run == "latest":
                run = known[-1] if known else run
            if run not in known:
                raise ConfigError(
                    f"no run {run!r} in {archive}; runs there: {', '.join(known) or 'none'}"
                )
            runs = [run]
        table = await asyncio.to_thread(
            read_archive, archive, topic_name, partitions=partitions,
            start_offset=start_offset, end_offset=end_offset, runs=runs,
        )  # fmt: skip
        bad = 0
    else:
        if (
            not bootstrap
            and not os.environ.get("SCALECUA_BOOTSTRAP")
            and not broker_state_file().exists()
        ):
            raise ConfigError("replay needs a live broker (SCALECUA_BOOTSTRAP) or --archive DIR")

        def progress(n: int) -> None:
            _err(f"\rreplayed {n} records")

        settings = BusSettings.from_env(bootstrap)
        live_run = await current_run(settings)
        run_id = live_run.run_id if live_run else ""
        if run is not None and run not in (run_id, "latest"):
            raise ConfigError(f"the live log is run {run_id or '(unnamed)'}, not {run}")
        try:
            records, bad = await collect_live(
                settings, topic_name, progress, partitions=partitions,
                start_offset=start_offset, end_offset=end_offset,
            )  # fmt: skip
        except ReplayIncomplete as exc:
            _err(f"\n{exc}; nothing written to {out}")
            return 3
        table = records_to_table(topic_name, records, run_id)
    table = filter_time(table, since_ms, until_ms)
    await asyncio.to_thread(write_table, table, out)
    note = f" ({bad} undecodable records skipped; see dead-letter)" if bad else ""
    _err(f"wrote {table.num_rows} {topic_name} rows to {out}{note}")
    return 0
