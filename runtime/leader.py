"""Leader election on the log: one active member per singleton role, the others standbys.

Some services must act once per training run (the sampler writes the batches and folds
rewards into `task-stats`; the trainer owns the optimizer). Start a second copy and it
waits as a standby, taking over when the active one dies or leaves:

    service = SingletonService(settings, "sampler", open_term=lambda: open_sampler(...))
    await service.run()        # a standby until elected; then runs the processor's runner

How it works: every member of a role joins the consumer group `<role>-leader` on the
one-partition `leaders` topic, and Kafka's group protocol gives that partition to exactly
one member. Only that member runs the role's processor on a `ServiceRunner`.

- **Sticky.** The assignor gives the partition to the member that already holds it (its
  JoinGroup metadata says so; after a stall two may claim it and the newest term wins), so
  a standby joining or leaving does not move it. With nobody holding it, the member with
  the smallest id gets it.
- **Stop before handing over.** Rebalances are eager: aiokafka calls
  `on_partitions_revoked` before the member's JoinGroup, and the group's next assignment
  waits for that JoinGroup (or the member's session to expire). The holder stops its
  runner inside that callback, so a live holder has stopped acting (flushed and committed
  what it handled) before the partition can go to anyone else. A holder killed with
  kill -9 stops by dying; its session expires after `session_timeout_ms` and a standby takes
  over. A holder whose process stalls past the session timeout is taken for dead and may
  act until it notices; a lease without broker-side fencing cannot rule that out, and the
  term check below makes it rebuild its state instead of trusting what it held.
- **Terms.** The member given the partition writes `Leadership(role, term)` to `leaders`
  and waits for the acknowledgement before it acts. Every rebalance of the election group
  stops the holder's runner for a moment (revocation comes first); when the partition comes
  back and the role's last `leaders` record is still its own term, nobody acted in between,
  and it restarts a runner on the processor it kept (no state lost: in-flight work stays
  counted). Otherwise it closes its term and opens a new one, which rebuilds the state from
  the log. One exception: when the log holds no term of the role at all, its own term's
  acknowledged record is gone with the log it was in (a restarted in-memory broker), and
  nobody has acted in the new one; it writes its term there and goes on with the state it
  kept (the sampler keeps its task pool, as live tables keep their rows), telling the
  processor of the new log (`on_new_log`) as a runner does.

The election consumer uses `BusSettings`' group timeouts (on the embedded broker a JoinGroup
is held for half the session timeout, so a lone member is elected in about that long).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError

from runtime.bus import EventConsumer, EventProducer, partition_counts
from runtime.config import BusSettings
from runtime.errors import BrokerError, BrokerTimeout, InfrastructureError
from runtime.processor import Processor
from runtime.runs import ensure_run
from runtime.service import ServiceRunner
from topics.events import Leadership
from topics.registry import LEADERS

__all__ = ["SingletonService", "RoleLease", "election_group"]

log = logging.getLogger(__name__)


def election_group(role: str) -> str:
    """Return the consumer group a role's members join to elect its leader."""
    return f"{role}-leader"


class _StickyLeader(AbstractPartitionAssignor):
    """Every partition to one member: the one already holding them, else the smallest id.

    An instance (not the class) goes to aiokafka: `claim` is this member's own state, sent
    in its JoinGroup metadata. aiokafka only calls `name`, `metadata`, `assign` and
    `on_assignment` on what it is given.
    """

    name = "scalecua-sticky-leader"
    version = 0

    def __init__(self, who: str = "") -> None:
        self.claim = 0  # while holding: when its hold began (ms), so the newest claim wins
        self.cluster: Callable[[], ClusterMetadata] | None = None  # the member's metadata view
        self.who = who.replace(";", ",")  # how this member names itself to the others
        self.holder = ""  # how the holder named itself, as the last assignment says

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        """Return this member's subscription, with its claim and the partitions it sees.

        The partition counts make a rejoin after the election topic appears a change, which
        the embedded broker needs to start a new generation (see runtime/bus.py).
        """
        data = str(self.claim) if self.claim else ""
        if self.cluster is not None or self.who:
            data += ";" + (partition_counts(self.cluster(), topics) if self.cluster else "")
        if self.who:
            data += ";" + self.who
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), data.encode())

    def assign(  # type: ignore[override]
        self, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Give every subscribed partition to the holder (or the smallest member id); tell
        every member how the holder names itself."""
        claims = {m: _claim(meta.user_data) for m, meta in members.items()}
        claimed = [m for m, c in claims.items() if c]
        holder = max(claimed, key=lambda m: (claims[m], m)) if claimed else min(members)
        topics = sorted({t for meta in members.values() for t in meta.subscription})
        layout = [(t, sorted(cluster.partitions_for_topic(t) or ())) for t in topics]
        who = _who(members[holder].user_data) or f"member {holder}"
        return {
            m: ConsumerProtocolMemberAssignment(
                self.version, layout if m == holder else [], who.encode()
            )
            for m in members
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:  # type: ignore[override]
        """Note how the holder names itself (the rebalance listener tracks the hold)."""
        self.holder = (assignment.user_data or b"").decode(errors="replace")


def _claim(data: bytes | None) -> int:
    try:
        return int((data or b"").split(b";")[0] or b"0")
    except ValueError:  # a member of another version: no claim
        return 0


def _who(data: bytes | None) -> str:
    fields = (data or b"").split(b";")
    return fields[2].decode(errors="replace") if len(fields) > 2 else ""


def _election_consumer(
    settings: BusSettings, role: str, assignor: _StickyLeader
) -> AIOKafkaConsumer:
    """A member of `role`'s election group, assigned by `assignor` (not started)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        client_id=settings.client_id,
        group_id=election_group(role),
        enable_auto_commit=False,
        auto_offset_reset="latest",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        rebalance_timeout_ms=settings.rebalance_timeout_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        request_timeout_ms=settings.request_timeout_ms,
        metadata_max_age_ms=settings.metadata_max_age_ms,
        partition_assignment_strategy=(assignor,),
    )
    assignor.cluster = lambda: consumer._client.cluster
    return consumer


async def _keep_polling(consumer: AIOKafkaConsumer, role: str) -> None:
    """Poll an election member whose partition is paused, until cancelled: aiokafka leaves a
    group whose consumer is not polled for a while."""
    while True:
        try:
            await consumer.getmany(timeout_ms=1000)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broker hiccup: the group protocol retries by itself
            log.warning("%s: election poll failed: %s", role, exc)
            await asyncio.sleep(1.0)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, service: SingletonService) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.service._stand_down()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned and self.service._consumer is not None:
            self.service._consumer.pause(*assigned)  # held, not read: no fetch every few ms
        self.service._assigned(any(tp.topic == LEADERS for tp in assigned))


class SingletonService:
    """Runs a role's processor on a `ServiceRunner` only while this process is its leader."""

    def __init__(
        self,
        settings: BusSettings,
        role: str,
        open_term: Callable[[], AbstractAsyncContextManager[Processor]],
        *,
        runner_options: dict | None = None,
        stop_timeout_s: float | None = None,
    ) -> None:
        self.settings = settings
        self.role = role
        self.open_term = open_term  # loads the role's state from the log; yields its processor
        self.runner_options = runner_options or {}
        # A runner that does not stop within this is cancelled: the election must answer
        # before the group's rebalance timeout or it drops this member.
        self.stop_timeout_s = stop_timeout_s or settings.rebalance_timeout_ms / 2000
        self.processor: Processor | None = None  # the current term's, None while standby
        self.runner: ServiceRunner | None = None  # set while acting
        self.terms = 0  # terms this process opened
        self.term: str | None = None
        self.active = asyncio.Event()  # set while the runner runs
        self._assignor = _StickyLeader()
        self._held = False  # given the partition and not revoked since
        self._lost = False  # the last assignment gave the partition to another member
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()  # a take-over and a stand-down never interleave
        self._term_stack: contextlib.AsyncExitStack | None = None
        self._task: asyncio.Task | None = None  # the runner's run()
        self._failure: BaseException | None = None
        self._consumer: AIOKafkaConsumer | None = None  # the election's

    def stop(self) -> None:
        """Ask the service to stop its runner (if active), leave the election and return."""
        self._stop.set()
        self._changed.set()

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Wait as a standby, act while elected, until stop() or SIGTERM/SIGINT.

        Raises what stopped the runner if it stopped on its own (ServiceHalted).
        """
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        consumer = self._consumer = _election_consumer(self.settings, self.role, self._assignor)
        poll: asyncio.Task | None = None
        try:
            # Subscribed after start(), which would otherwise wait for the first assignment.
            await _bounded(consumer.start(), self.settings.connect_timeout_s, "connecting")
            consumer.subscribe([LEADERS], listener=_Listener(self))
            log.info("%s: in the election (group %s); standby until elected", self.role,
                     election_group(self.role))  # fmt: skip
            poll = asyncio.create_task(_keep_polling(consumer, self.role))
            while not self._stop.is_set():
                waits = [asyncio.create_task(self._changed.wait())]
                if self._task is not None:
                    waits.append(self._task)
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                waits[0].cancel()
                self._changed.clear()
                async with self._lock:
                    self._reap()
                    if self._failure is not None:
                        raise self._failure
                    if self._stop.is_set():
                        break
                    if self._held and self._task is None:
                        try:
                            await self._take_over()
                        except InfrastructureError as exc:  # the broker is away: try again
                            log.warning("%s: taking over failed (%s); retrying", self.role, exc)
                            loop.call_later(1.0, self._changed.set)
                    elif self._lost and self._term_stack is not None:
                        await self._close_term()
        finally:
            async with self._lock:
                await self._stop_runner(timeout_s=60.0)  # leaving: no rebalance waits on it
                await self._close_term()
            if poll is not None:
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10)  # leaves the election group
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        if self._failure is not None:
            raise self._failure

    # -- the election ------------------------------------------------------------------
    def _assigned(self, held: bool) -> None:
        if held and not self._assignor.claim:
            self._assignor.claim = int(time.time() * 1000)
        elif not held:
            self._assignor.claim = 0
        # A partition the log does not have yet (a restarted broker before `topics create`)
        # goes to nobody: the term is not lost to another member.
        cluster = self._consumer._client.cluster if self._consumer is not None else None
        exists = cluster is None or bool(cluster.partitions_for_topic(LEADERS))
        self._held, self._lost = held, not held and exists
        self._changed.set()

    async def _stand_down(self) -> None:
        """The partition is being revoked: stop acting before the group reassigns it."""
        self._held = False
        async with self._lock:
            await self._stop_runner()
        self._changed.set()

    # -- terms -------------------------------------------------------------------------
    async def _take_over(self) -> None:
        last = await self._last_term() if self._term_stack is not None else None
        if self._term_stack is not None and last == self.term:
            log.info("%s: still term %s; resuming with the state kept", self.role, self.term)
        elif self._term_stack is not None and last is None:
            await self._carry_term_over()
        else:
            await self._close_term()
            await self._open_term()
        if not self._held:  # revoked while the term opened: the stand-down waits for us
            return
        runner = ServiceRunner(self.processor, self.settings, **self.runner_options)
        self.runner = runner
        self._task = asyncio.create_task(runner.run(install_signal_handlers=False))
        self.active.set()

    async def _open_term(self) -> None:
        term = uuid.uuid4().hex[:12]
        async with EventProducer(self.settings) as producer:  # acknowledged before acting
            await producer.send_and_wait(LEADERS, Leadership(role=self.role, term=term))
        stack = contextlib.AsyncExitStack()
        try:
            self.processor = await stack.enter_async_context(self.open_term())
        except BaseException:
            await stack.aclose()
            raise
        self._term_stack, self.term = stack, term
        self.terms += 1
        log.info("%s: active (term %s)", self.role, term)

    async def _carry_term_over(self) -> None:
        """Go on with the open term in a log that replaced the one it was opened in."""
        async with EventProducer(self.settings) as producer:  # acknowledged before acting
            await producer.send_and_wait(LEADERS, Leadership(role=self.role, term=self.term))
        # The topics exist now; the run record may still be on its way (first record wins).
        run_id = (await ensure_run(self.settings)).run_id
        log.warning("%s: the log changed under this service (run %s, without term %s: a "
                    "restarted broker?); the term goes on in it with the state it kept",
                    self.role, run_id, self.term)  # fmt: skip
        hook = getattr(self.processor, "on_new_log", None)
        if hook is not None:
            await hook(run_id)

    async def _close_term(self) -> None:
        if self._term_stack is not None:
            stack, self._term_stack = self._term_stack, None
            self.processor = None
            await stack.aclose()
            log.info("%s: term %s closed; standby", self.role, self.term)

    async def _last_term(self) -> str | None:
        """Return the term of the role's last `leaders` record (None if there is none)."""
        last = None
        async with EventConsumer(self.settings, [LEADERS], group_id=None) as reader:
            async for batch in reader.catch_up(LEADERS):
                for record in batch:
                    if isinstance(record.event, Leadership) and record.event.role == self.role:
                        last = record.event.term
        return last

    # -- the runner --------------------------------------------------------------------
    async def _stop_runner(self, timeout_s: float | None = None) -> None:
        """Stop the runner gracefully (flush, commit, leave its group); cancel it if slow."""
        task, runner = self._task, self.runner
        if task is None:
            return
        runner.stop()
        timeout_s = timeout_s or self.stop_timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            log.warning("%s: runner did not stop within %.0f s; cancelling it", self.role,
                        timeout_s)  # fmt: skip
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except asyncio.CancelledError:
            # A runner that ended cancelled is stopped; only a cancellation of this task
            # goes on up. (Raised out of the election's revocation listener, it would end
            # aiokafka's coordination task: the election then never rejoins, silently.)
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise
            log.info("%s: the runner ended cancelled", self.role)
        except Exception:  # kept by _reap, raised by run()
            pass
        self._reap()

    def _reap(self) -> None:
        """Forget a finished runner; keep its failure (a runner only ends on its own by failing)."""
        task = self._task
        if task is None or not task.done():
            return
        self._task, self.runner = None, None
        self.active.clear()
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
        elif not task.cancelled() and not self._stop.is_set() and self._held:
            self._failure = RuntimeError(f"{self.role}: the runner ended on its own")


async def _bounded(coro, timeout_s: float, what: str):  # noqa: ANN001, ANN202 - any awaitable
    try:
        return await asyncio.wait_for(coro, timeout=timeout_s)
    except TimeoutError as exc:
        raise BrokerTimeout(f"{what} did not finish within {timeout_s:.0f}s") from exc
    except KafkaError as exc:
        raise BrokerError(f"{what} failed: {exc}") from exc


class RoleLease:
    """A singleton role held by a service that refuses to start beside another instead of
    waiting as a standby (the trainer: its callers drive its runner from the start).

        lease = await RoleLease(settings, "trainer").join()
        if not lease.held:
            raise ConfigError(f"another trainer is active: {lease.holder}")
        ...  # act until `lease.lost` is set; then `await lease.release()`

    It joins the role's election as a `SingletonService` member does, naming itself (host and
    pid unless told) in its JoinGroup metadata, and the assignor tells every member how the
    holder named itself. A member given nothing while the election topic exists is not the
    holder. While held, `lost` is set if the role goes to another member (this process
    stalled past the session timeout): the service must stop acting.
    """

    def __init__(self, settings: BusSettings, role: str, who: str | None = None) -> None:
        self.settings = settings
        self.role = role
        self.who = who or f"{socket.gethostname()} pid {os.getpid()}"
        self.held = False
        self.lost = asyncio.Event()  # set when the role went to another member
        self._assignor = _StickyLeader(self.who)
        self._decided = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._poll: asyncio.Task | None = None

    @property
    def holder(self) -> str:
        """How the member holding the role names itself (this one's name when held)."""
        return self.who if self.held else self._assignor.holder or "another member"

    async def join(self, timeout_s: float = 60.0) -> RoleLease:
        """Join the role's election and return once it says who holds the role."""
        s = self.settings
        consumer = self._consumer = _election_consumer(s, self.role, self._assignor)
        try:
            await _bounded(consumer.start(), s.connect_timeout_s, "connecting")
            consumer.subscribe([LEADERS], listener=_LeaseListener(self))
            self._poll = asyncio.create_task(_keep_polling(consumer, self.role))
            await _bounded(self._decided.wait(), timeout_s, f"the {self.role} election")
        except BaseException:
            await self.release()
            raise
        if self.held:
            log.info("%s: this process (%s) holds the role", self.role, self.who)
        return self

    async def release(self) -> None:
        """Leave the election: the role passes to the next member that joins."""
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll
            self._poll = None
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._consumer.stop(), 10)
            self._consumer = None

    def _assigned(self, assigned: set[TopicPartition]) -> None:
        held = any(tp.topic == LEADERS for tp in assigned)
        consumer = self._consumer
        if consumer is None:
            return
        if held:
            consumer.pause(*assigned)  # held, not read
            self._assignor.claim = self._assignor.claim or int(time.time() * 1000)
        # A partition the log does not have yet (a broker before `topics create`) goes to
        # nobody: it says nothing about another member; nor does an assignment that still
        # names this member the holder.
        exists = bool(consumer._client.cluster.partitions_for_topic(LEADERS))
        another = exists and self._assignor.holder != self._assignor.who
        if not self._decided.is_set():
            if held or another:
                self.held = held
                self._decided.set()
        elif self.held and not held and another:
            self.held = False
            self._assignor.claim = 0
            log.error("%s: the role went to another member (%s); this process stops acting",
                      self.role, self._assignor.holder)  # fmt: skip
            self.lost.set()


class _LeaseListener(ConsumerRebalanceListener):
    def __init__(self, lease: RoleLease) -> None:
        self.lease = lease

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Nothing to stop: the holder keeps its claim, and the sticky assignor the role."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.lease._assigned(assigned)
