"""The service runner: consume → process → produce → commit, for every scalecua service.

Checkpointing is explicit: outputs derived from a batch are sent and acknowledged first,
then offsets are committed, and only offsets whose outputs were acknowledged. A stateful
processor reports, per partition, the lowest offset it still needs (its low-watermark); the
runner commits that instead of the next offset, so after a crash the processor re-reads
what it had only in memory.

Failures come in two kinds, kept apart:

- **The record's fault** — it does not decode, its processing raises (anything but an
  `InfrastructureError`; `RecordError` says so explicitly), or its outputs cannot be sent
  (an event of the wrong type for the topic, one larger than the request limit). It goes to
  `dead-letter` with the reason and its bytes (cut to a bound, with the original size and
  sha256), its offset is committed, and the stream goes on (runtime/outbox.py).
- **The service's own dependency failed** — an `InfrastructureError` (the archive's storage,
  the broker, a remote service). Nothing is dead-lettered: the runner retries with
  exponential backoff (runtime/retry.py) and, if the failure outlasts it, stops with
  `ServiceHalted` without committing anything past the failing record.

Rebalancing: records are handled one at a time under a lock that the partition-revocation
callback also takes, so a revocation waits for at most the record in hand, sends the
outputs handled so far, commits what is acknowledged (while a stateful processor still
reports what it holds), hands the partitions to the processor and drops them; records of
revoked partitions still in the fetched batch are skipped (their new owner reads them from
the committed offset). Commits go only to partitions currently assigned, and a commit the
group rejects mid-rebalance is logged, not fatal: those records are re-read later.

A log that changes underneath: a restarted in-memory broker comes back empty on the same
address, and every position the runner holds belongs to the old log. Before any commit (and
at every rebalance, and every `run_check_interval_s`) the runner re-reads the log's run
record (runtime/runs.py `RunWatch`); it never commits into a log whose run is not the one
its positions came from. When the run changed, it drops what the processor holds for the
old log (as on a revocation), tells the processor (`on_new_log(run_id)`), and reads the new
log from its beginning, logging a warning that names both runs; commits the group made in
the new log (all verified the same way) are trusted after a rebalance.

Dedup: a processor with `dedup = True` never sees a record whose `dedup_id()` the runner
already handled on that partition (compacted topics excepted: there the id names the
latest version, not one occurrence). See runtime/dedup.py for how the window survives
restarts. Its `remember(record)` is shown the records the warm-up re-reads from before the
committed offset (handled by a predecessor, never processed again), so it can rebuild what
it knows about finished work from the log. What a processor is: runtime/processor.py.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import traceback
from collections.abc import Awaitable, Callable

import orjson
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from runtime.bus import EventConsumer, EventProducer, Record
from runtime.config import BusSettings
from runtime.dedup import DedupWindow
from runtime.errors import BrokerError, InfrastructureError, ServiceHalted
from runtime.outbox import Outbox, Staged
from runtime.processor import Processor, StatefulProcessor
from runtime.retry import RetryPolicy, RetryStopped, retrying
from runtime.runner_state import Partitions, ServiceMetrics
from runtime.runs import RunWatch
from runtime.service_logs import as_service
from topics.registry import topic

__all__ = ["ServiceRunner"]

log = logging.getLogger(__name__)

_FRESH_FETCH_S = 5.0  # read_to_end trusts a partition's end fetched at most this long ago


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, runner: ServiceRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.runner._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.runner._on_assigned(set(assigned))


class ServiceRunner:
    """Runs one processor in a consumer group until stopped."""

    def __init__(
        self,
        processor: Processor,
        settings: BusSettings,
        *,
        group_id: str | None = None,
        poll_timeout_ms: int = 100,
        metrics_interval_s: float = 30.0,
        commit_interval_s: float = 0.25,
        metrics_port: int | None = None,
        retry: RetryPolicy | None = None,
        dedup_window: int = 10_000,
        run_check_interval_s: float = 10.0,
    ) -> None:
        self.processor = processor
        self.settings = settings
        self.group_id = group_id or processor.name
        self.poll_timeout_ms = poll_timeout_ms
        self.metrics_interval_s = metrics_interval_s
        # Committing every batch costs a broker round trip per poll; committing at most this
        # often keeps latency flat and only widens what a crash re-reads (at-least-once holds).
        self.commit_interval_s = commit_interval_s
        self._last_commit = 0.0
        self.metrics_port = metrics_port  # serve GET /metrics here (Prometheus text)
        self.retry = retry or RetryPolicy()
        self.dedup_window = dedup_window  # ids remembered per partition when dedup is on
        # Besides before every commit and at rebalances, check the log's run this often (an
        # idle service commits nothing, so it would otherwise notice a new log only later).
        self.run_check_interval_s = run_check_interval_s
        self._watch: RunWatch | None = None
        self._last_run_check = 0.0
        self._log_changed = False  # the run record says our positions belong to another log
        self.metrics = ServiceMetrics()
        # aiokafka clients must be created inside the running loop: see run().
        self.consumer: EventConsumer | None = None
        self.producer: EventProducer | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()  # one record, a flush or a rebalance at a time
        self._partitions = Partitions()  # ownership, positions and dedup window of each
        self._outbox = Outbox(processor.name, settings, self.metrics)  # handled, not acknowledged
        self._stateful = isinstance(processor, StatefulProcessor)
        self._dedup = bool(processor.dedup)
        self.ready = asyncio.Event()  # set once partitions are first assigned
        self._running = False  # between the consumer's start and the end of the loop
        self._drain_from_ms: int | None = None  # set by drain(); wall clock, as fetches are
        self._drained = asyncio.Event()
        from runtime.metrics_http import ServiceMetricsExporter

        self.exporter = ServiceMetricsExporter(self.processor.name, self.metrics_snapshot)
        self._process_seconds = self.exporter.process_seconds
        processor.bind_reader(self.read_to_end)

    def stop(self) -> None:
        """Ask the runner to finish the current batch, flush, commit and exit."""
        self._stop.set()

    async def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until what its partitions held when called is processed and sent; False if not.

        Call it once upstream producers have stopped: the runner keeps consuming until a fetch
        answered after this call shows no record left, so a stop after it leaves no work
        behind. False when the runner is not running or the timeout passes first.
        """
        if not self._running:
            return False
        self._drained.clear()
        self._drain_from_ms = int(1000 * time.time())
        deadline = time.monotonic() + timeout_s
        try:
            while not self._drained.is_set():
                if not self._running or time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.05)
            return True
        finally:
            self._drain_from_ms = None

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Consume until stop() or SIGTERM/SIGINT, then shut down gracefully.

        Raises ServiceHalted when an infrastructure failure outlasts the retry policy.
        What the service logs meanwhile is attributed to it (runtime/service_logs.py).
        """
        with as_service(self.processor.name):
            await self._run(install_signal_handlers)

    async def _run(self, install_signal_handlers: bool) -> None:
        loop = asyncio.get_running_loop()
        self.consumer = EventConsumer(
            self.settings, list(self.processor.topics), self.group_id,
            co_partitioned=bool(self.processor.co_partitioned),
            join_on_start=False,
        )  # fmt: skip
        self.producer = EventProducer(self.settings)
        self._watch = RunWatch(self.settings)
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        await self.producer.start()
        metrics_server = None
        if self.metrics_port is not None:
            from runtime.metrics_http import MetricsServer

            metrics_server = await MetricsServer(self.exporter, self.metrics_port).start()
        clean = False
        try:
            await self.consumer.start()
            await self._watch.start()
            self._last_run_check = time.monotonic()
            # Subscribed after connecting: joining the group then takes as long as the group
            # takes (while the loop polls and logs), not the connect timeout.
            self.consumer.raw.subscribe(list(self.processor.topics), listener=_Rebalance(self))
            self._running = True
            await self._loop()
            self._running = False
            await self._shutdown()
            clean = True
        except ServiceHalted:
            await self._commit()  # only what is acknowledged; the failing record is re-read
            self.log_metrics()
            raise
        finally:
            self._running = False
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            if metrics_server:
                await metrics_server.stop()
            await self._watch.stop()
            await self.consumer.stop()
            # After a failure, a failed flush must not replace the error that stopped us.
            await (self.producer.stop() if clean else self.producer.abort())

    async def _loop(self) -> None:
        last_metrics = time.monotonic()
        paused = False
        try:
            while not self._stop.is_set():
                limit = self.processor.wants()
                if (
                    limit == 0
                ):  # the processor is full: keep polling (and heartbeating), fetch nothing
                    self.consumer.raw.pause(*self.consumer.raw.assignment())
                    paused = True
                elif paused:
                    self.consumer.raw.resume(*self.consumer.raw.assignment())
                    paused = False
                records = await self._poll(limit)
                self._partitions.fetched()
                for record in records:
                    await self._handle(record)
                if self._log_shrank() or (
                    time.monotonic() - self._last_run_check >= self.run_check_interval_s
                ):
                    await self._check_run()
                if self._log_changed:
                    await self._new_log()
                if self._stateful:
                    await self._retrying("tick", self._tick_once)
                await self._retrying("send", self._flush_once)
                if time.monotonic() - self._last_commit >= self.commit_interval_s:
                    await self._commit()
                    if self._log_changed:
                        await self._new_log()
                if self._drain_from_ms is not None and await self._caught_up(self._drain_from_ms):
                    self._drained.set()
                if time.monotonic() - last_metrics >= self.metrics_interval_s:
                    last_metrics = time.monotonic()
                    self.log_metrics()
        except RetryStopped:
            log.info(
                "%s: stopping during a retry; the record is re-read later", self.processor.name
            )

    async def _poll(self, limit: int | None) -> list[Record]:
        """Fetch the next records; while the group has assigned nothing yet, say so now and then.

        aiokafka's getmany waits for an assignment however long it takes, so it is bounded here.
        """
        if self.consumer.raw.assignment():
            return await self.consumer.getmany(
                timeout_ms=self.poll_timeout_ms, max_records=limit or None
            )
        waited = time.monotonic()
        while not self._stop.is_set():
            try:
                return await asyncio.wait_for(
                    self.consumer.getmany(
                        timeout_ms=self.poll_timeout_ms, max_records=limit or None
                    ),
                    timeout=5.0,
                )
            except TimeoutError:
                if time.monotonic() - waited >= 30.0:
                    waited = time.monotonic()
                    missing = [t for t in self.processor.topics
                               if not self.consumer.raw.partitions_for_topic(t)]  # fmt: skip
                    why = (f"; the broker has no topic {', '.join(missing)} (clients never create "
                           "topics: `scalecua topics create` does)" if missing else "")  # fmt: skip
                    log.warning("%s: the group %s has assigned no partition yet%s; still waiting",
                                self.processor.name, self.group_id, why)  # fmt: skip
        return []

    # -- the log's run ------------------------------------------------------------------
    async def _check_run(self) -> str:
        """Re-read the log's run; flag a change for the loop. Return the watch's verdict."""
        self._last_run_check = time.monotonic()
        verdict = await self._watch.verdict()
        if verdict == RunWatch.CHANGED:
            self._log_changed = True
        return verdict

    def _log_shrank(self) -> bool:
        """Whether a partition's end is now below a position we reached: the log was replaced."""
        assignment = self.consumer.raw.assignment()
        for tp, position in self._partitions.acked().items():
            high = self.consumer.raw.highwater(tp) if tp in assignment else None
            if high is not None and high < position:
                return True
        return False

    async def _new_log(self) -> None:
        """Drop every position and held record of the old log and read the new one from 0."""
        async with self._lock:
            old, new = self._watch.run_id, self._watch.latest
            owned = self._partitions.owned()
            log.warning("%s: the log changed under this service (run %s -> %s: a restarted "
                        "broker?); its positions of the old log are dropped and the new log "
                        "is read from its beginning", self.processor.name, old, new)  # fmt: skip
            if self._stateful:
                try:
                    self._outbox.stage(await self.processor.on_revoked(owned))
                except InfrastructureError as exc:
                    log.warning("%s: could not persist what it held of the old log: %s",
                                self.processor.name, exc)  # fmt: skip
            for tp in owned:
                self._partitions[tp].reset()  # as on a revocation, but it stays owned
            self._watch.accept()
            self._log_changed = False
            await self.processor.on_new_log(new)
            if self._stateful:
                await self.processor.on_assigned(owned)
            if self._dedup:
                for tp in owned:
                    if not topic(tp.topic).compacted:
                        self._partitions[tp].window = DedupWindow(self.dedup_window)
            assignment = self.consumer.raw.assignment()
            for tp in owned:
                if tp in assignment:
                    self._seek(tp, 0)

    async def _shutdown(self) -> None:
        if self._stateful:
            async with self._lock:
                try:
                    self._outbox.stage(await self.processor.close())
                except InfrastructureError as exc:  # its low-watermark still holds what is lost
                    log.error(
                        "%s: close failed, nothing more committed: %s", self.processor.name, exc
                    )
        try:
            await self._retrying("send", self._flush_once, stoppable=False)
        except ServiceHalted as exc:
            log.error("%s: %s", self.processor.name, exc)
        await self._commit()
        self.log_metrics()

    async def _caught_up(self, since_ms: int) -> bool:
        """True when fetches answered after `since_ms` show every record handled and sent."""
        if self._outbox.pending:
            return False
        assignment = self.consumer.raw.assignment()
        # A fetch answered just before an upstream's last write can be read just after
        # drain() began: only answers a few fetch waits later count as current.
        fresh = since_ms + 10 * self.settings.fetch_max_wait_ms + 100
        for tp in assignment:
            polled = self.consumer.raw.last_poll_timestamp(tp)
            if polled is None or polled < fresh:
                return False
        return await self.consumer.at_end(assignment)

    async def read_to_end(self, tp: TopicPartition) -> bool:
        """Whether every record of an assigned partition up to its end was handed over.

        The end is the high-watermark of a fetch answered in the last few seconds: one older
        than that (the broker away) says nothing about what the log holds now.
        """
        consumer = self.consumer.raw if self.consumer is not None else None
        if consumer is None or tp not in consumer.assignment() or self._partitions.is_stale(tp):
            return False
        polled = consumer.last_poll_timestamp(tp)
        if polled is None or time.time() * 1000 - polled > 1000 * _FRESH_FETCH_S:
            return False
        return await self.consumer.at_end([tp])

    def lag(self) -> int:
        """Return how many records of the assigned partitions are not yet processed."""
        if self.consumer is None:
            return 0
        total = 0
        assignment = self.consumer.raw.assignment()
        for tp, nxt in self._partitions.acked().items():
            hw = self.consumer.raw.highwater(tp) if tp in assignment else None
            if hw is not None:
                total += max(0, hw - nxt)
        return total

    def positions(self) -> dict[int, int]:
        """Return, per partition number, the next offset whose outputs are acknowledged."""
        return {tp.partition: offset for tp, offset in self._partitions.acked().items()}

    def metrics_snapshot(self) -> dict[str, float]:
        """Return the counters, the current lag, and the processor's own stats."""
        return {**self.processor.stats(), **self.metrics.as_dict(), "lag": self.lag()}

    def log_metrics(self) -> None:
        """Write one structured metrics line."""
        line = {"service": self.processor.name, **self.metrics_snapshot()}
        log.info("metrics %s", orjson.dumps(line).decode())

    # -- records ------------------------------------------------------------------------
    async def _handle(self, record: Record) -> None:
        """Process one record into staged outputs, retrying infrastructure failures."""
        try:
            await self._handle_once(record)
        except InfrastructureError as exc:  # rare: only now pay for the retry machinery
            what = f"{record.topic}[{record.partition}]@{record.offset}"
            await self._retrying(what, lambda: self._handle_once(record), failed=exc)

    async def _handle_once(self, record: Record) -> None:
        async with self._lock:
            tp = record.tp
            if self._partitions.is_stale(tp):
                return  # fetched before a seek or a rebalance: read again from there
            if not self._partitions.owns(tp):
                if tp in self.consumer.raw.assignment():
                    # Assigned, but the assignment callback has not run yet: read it again
                    # once it has (aiokafka may fetch before it calls the listener).
                    self._seek(tp, record.offset)
                return  # else revoked since it was fetched: its new owner reads it
            state = self._partitions[tp]
            if record.offset < state.resume:
                self._remember(record, state.window)  # before the committed offset: handled
                return
            started = time.perf_counter()
            staged = await self._process(record, state.window)
            self._process_seconds.observe(time.perf_counter() - started)
            self.metrics.consumed += 1
            self._outbox.add(staged)
            state.position = record.offset + 1

    async def _process(self, record: Record, window: DedupWindow | None) -> list[Staged]:
        """Return the encoded outputs of one record, or its dead letter."""
        if record.event is None:
            reason = record.decode_error or "undecodable"
            return [self._outbox.dead_letter(record, "decode", reason)]
        dedup_id = record.event.dedup_id() if window is not None else None
        if dedup_id is not None and dedup_id in window:
            self.metrics.duplicates += 1
            return []
        try:
            outputs = await self.processor.process(record)
        except InfrastructureError:
            raise
        except Exception as exc:  # a bad record must not stop the stream
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition,
                        record.offset, reason[:300])  # fmt: skip
            tb = traceback.format_exc(limit=3)
            return [self._outbox.dead_letter(record, "process", f"{reason}\n{tb}")]
        staged, problem = self._outbox.encode(outputs, record)
        if dedup_id is not None:
            window.add(dedup_id)
        if problem:
            log.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition,
                        record.offset, problem[:300])  # fmt: skip
            return [self._outbox.dead_letter(record, "output", problem)]
        self.metrics.processed += 1
        return staged

    def _remember(self, record: Record, window: DedupWindow | None) -> None:
        if window is not None and record.event is not None:
            window.add(record.event.dedup_id())
            self.processor.remember(record)

    # -- sending ------------------------------------------------------------------------
    async def _tick_once(self) -> bool:
        async with self._lock:
            self._outbox.stage(await self.processor.tick())
        return True

    async def _flush_once(self) -> bool:
        async with self._lock:
            await self._flush_locked()
        return True

    async def _flush_locked(self) -> None:
        """Send staged outputs, wait for every ack, then let their positions be committed.

        A failure to send raises BrokerError (runtime/outbox.py) with the outputs kept staged.
        """
        await self._outbox.flush(self.producer)
        self._partitions.acknowledged()

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[], Awaitable[object]],
        *,
        stoppable: bool = True,
        failed: InfrastructureError | None = None,
    ) -> None:
        """Run `attempt` until it succeeds, backing off on InfrastructureError (runtime/retry.py).

        `failed` is a failure of an attempt the caller already made. The lock is not held
        while waiting, so a rebalance is not held up by an outage.
        """
        await retrying(
            what, attempt, self.retry, service=self.processor.name, metrics=self.metrics,
            stop=self._stop if stoppable else None, failed=failed,
        )  # fmt: skip

    # -- commits and rebalances ---------------------------------------------------------
    def _commit_offsets(self) -> dict[TopicPartition, int]:
        offsets: dict[TopicPartition, int] = {}
        assignment = self.consumer.raw.assignment()
        for tp, target in self._partitions.acked().items():
            if not self._partitions.owns(tp) or tp not in assignment:
                continue
            if self._stateful:
                held = self.processor.low_watermark(tp)
                if held is not None:
                    target = min(target, held)
            if self._partitions[tp].committed != target:
                offsets[tp] = target
        return offsets

    async def _commit(self) -> None:
        self._last_commit = time.monotonic()
        if self._outbox.pending:
            # Outputs wait for their acknowledgement (a failed flush, before a halt or at
            # shutdown). A stateful processor released the records they came from, so its
            # low-watermark no longer holds them: committing now could skip them for good.
            return
        offsets = self._commit_offsets()
        if not offsets:
            return
        # Positions are only worth committing into the log they came from (see the module doc).
        verdict = await self._check_run()
        if verdict != RunWatch.SAME:
            log.warning("%s: nothing committed: the log's run is %s", self.processor.name,
                        "another" if verdict == RunWatch.CHANGED else "unreadable")  # fmt: skip
            return
        try:
            await self.consumer.commit(offsets)
        except (BrokerError, KafkaError) as exc:
            # Mid-rebalance the group refuses commits; what was not committed is re-read
            # by whoever owns the partition next, and consumers drop duplicates by id.
            log.warning("%s: commit not accepted (%s); re-read later", self.processor.name, exc)
            return
        for tp, offset in offsets.items():
            self._partitions.of(tp).committed = offset
        self.metrics.commits += 1

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.metrics.rebalances += 1
        async with self._lock:
            try:
                await self._flush_locked()
                # Commit while the processor still reports what it holds: most processors
                # forget revoked partitions' records without persisting them, and a commit
                # after that would skip them for the new owner. What on_revoked persists
                # (the archiver's flush) is re-read and skipped as already written.
                await self._commit()
                if self._stateful:
                    self._outbox.stage(await self.processor.on_revoked(revoked))
                    await self._flush_locked()
            except InfrastructureError as exc:
                log.warning("%s: could not flush before a rebalance (%s); the new owner "
                            "re-reads from the last commit", self.processor.name, exc)  # fmt: skip
            # What is left of the batch in hand is re-read from the commit.
            self._partitions.revoke(revoked)
            # Outputs of revoked partitions that could not be sent stay staged: at-least-once.

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self._lock:
            self._partitions.assign(assigned)
            # A restarted broker forgets the group, so its members rejoin: the assignment is
            # where a new log shows first. Positions now come from the group's commits in that
            # log, all verified (see _commit), so only what the processor knows is reset.
            if await self._check_run() == RunWatch.CHANGED:
                old = self._watch.run_id
                self._watch.accept()
                self._log_changed = False
                log.warning("%s: the log changed under this service (run %s -> %s: a restarted "
                            "broker?); reading the new log from the group's positions in it",
                            self.processor.name, old, self._watch.run_id)  # fmt: skip
                await self.processor.on_new_log(self._watch.run_id)
            if self._stateful:
                await self.processor.on_assigned(assigned)
            if self._dedup:
                await self._warm_dedup(assigned)
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(assigned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        names = " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items())
        log.info("%s assigned %d partitions: %s", self.processor.name, len(assigned), names)
        self.ready.set()

    def _seek(self, tp: TopicPartition, offset: int) -> None:
        """Move a partition's position; its records in the batch in hand are then stale."""
        self.consumer.raw.seek(tp, offset)
        self._partitions.of(tp).stale = True

    async def _warm_dedup(self, assigned: set[TopicPartition]) -> None:
        """Give each partition a window and re-read the ids just before its committed offset."""
        for tp in assigned:
            if topic(tp.topic).compacted:
                continue  # there the id names the latest version: every update must pass
            state = self._partitions.of(tp)
            state.window = DedupWindow(self.dedup_window)
            committed = await self.consumer.raw.committed(tp)
            if committed:
                state.resume = committed
                self._seek(tp, max(0, committed - self.dedup_window))
