"""The service runner's outbox: outputs encoded and checked, then sent and held until acknowledged.

An output that cannot be sent for what it is (not an `Output`, an event of the wrong type for
its topic, one over the request limit, one the broker refuses as too large) becomes a dead
letter: of the record it came from, or, for outputs no record produced (a tick, a close, a
revocation), of the outputs themselves. Any other failure to send keeps the outputs staged,
in order, for another try.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka.errors import MessageSizeTooLargeError

from runtime.bus import EventProducer, Record
from runtime.config import BusSettings
from runtime.errors import BrokerError, ConfigError
from runtime.processor import Output
from runtime.runner_state import ServiceMetrics
from topics.codec import encode
from topics.events import DeadLetter
from topics.registry import DEAD_LETTER, topic

__all__ = ["Outbox", "Staged"]

log = logging.getLogger(__name__)

_RECORD_OVERHEAD = 512  # bytes a record's framing adds to its key and value
# Errors of one record that resending cannot fix; anything else from the broker is retried.
_RECORD_LEVEL_ERRORS = (MessageSizeTooLargeError,)


@dataclass
class Staged:
    """One encoded output waiting for its acknowledgement, and the record it came from."""

    topic: str
    value: bytes
    key: bytes | None
    source: Record | None


class Outbox:
    """The outputs one service has staged and not yet seen acknowledged."""

    def __init__(self, service: str, settings: BusSettings, metrics: ServiceMetrics) -> None:
        self.service = service
        self.settings = settings
        self.metrics = metrics  # counts what is produced and dead-lettered
        self._staged: list[Staged] = []

    @property
    def pending(self) -> bool:
        """Whether outputs wait to be sent or acknowledged."""
        return bool(self._staged)

    def add(self, staged: list[Staged]) -> None:
        """Stage outputs already encoded (those of a record, or its dead letter)."""
        self._staged.extend(staged)

    def stage(self, outputs: object) -> None:
        """Stage outputs that come from no record (tick, close, revoke)."""
        staged, problem = self.encode(outputs, None)
        if problem:
            log.error("%s: unsendable output dead-lettered: %s", self.service, problem)
            staged = [self.dead_letter_orphan(outputs, problem)]
        self._staged.extend(staged)

    def encode(self, outputs: object, source: Record | None) -> tuple[list[Staged], str | None]:
        """Validate and encode outputs; return them, or the reason they cannot be sent."""
        if not isinstance(outputs, list | tuple):
            return [], f"the processor returned {type(outputs).__name__}, not a list of Output"
        staged: list[Staged] = []
        for out in outputs:
            if not isinstance(out, Output):
                return [], f"the processor returned a {type(out).__name__}, not an Output"
            try:
                spec = topic(out.topic)
            except ConfigError as exc:
                return [], f"output to an unknown topic: {exc}"
            if not isinstance(out.event, spec.event_type):
                return [], (
                    f"output to {out.topic} is a {type(out.event).__name__}; "
                    f"{out.topic} takes {spec.event_type.__name__}"
                )
            try:
                value = encode(out.event)
            except Exception as exc:  # a field holding something msgpack cannot carry
                return [], f"output to {out.topic} does not encode: {type(exc).__name__}: {exc}"
            key = out.key if out.key is not None else spec.key_of(out.event)
            size = len(value) + len(key or b"") + _RECORD_OVERHEAD
            if size > self.settings.max_request_size:
                return [], (
                    f"output to {out.topic} is {size} bytes, over the request limit of "
                    f"{self.settings.max_request_size}"
                )
            staged.append(Staged(out.topic, value, key, source))
        return staged, None

    def dead_letter(self, record: Record, kind: str, reason: str) -> Staged:
        """Return the dead letter of a record, encoded."""
        self.metrics.dead_lettered += 1
        letter = record.dead_letter(kind, reason, self.service)
        return Staged(DEAD_LETTER, encode(letter), letter.original_key, None)

    def dead_letter_orphan(self, outputs: object, reason: str) -> Staged:
        """Return the dead letter of outputs no record produced, encoded."""
        self.metrics.dead_lettered += 1
        letter = DeadLetter.about(
            source_topic="", partition=-1, offset=-1, error=reason, error_type="output",
            service=self.service, value=repr(outputs).encode(errors="replace"),
        )  # fmt: skip
        return Staged(DEAD_LETTER, encode(letter), None, None)

    async def flush(self, producer: EventProducer) -> None:
        """Send what is staged and wait for every acknowledgement.

        A send the broker refuses for the record itself (too large) becomes a dead letter of
        the source record; any other failure raises BrokerError with the unsent outputs kept.
        """
        while self._staged:
            sends, self._staged = self._staged, []
            futures: list[asyncio.Future] = []
            failure: BaseException | None = None
            for s in sends:
                try:
                    futures.append(await producer.send_raw(s.topic, s.value, s.key))
                except BrokerError as exc:  # the send buffer stayed full: the broker is away
                    failure = exc
                    break
            unsent = sends[len(futures) :]
            sends = sends[: len(futures)]
            try:
                results = await asyncio.wait_for(
                    asyncio.gather(*futures, return_exceptions=True),
                    self.settings.request_timeout_ms / 1000 + 5,
                )
            except TimeoutError:
                results = [BrokerError("no acknowledgement in time")] * len(sends)
            again: list[Staged] = []
            for s, result in zip(sends, results, strict=True):
                if not isinstance(result, BaseException):
                    self.metrics.produced += 1
                elif not isinstance(result, _RECORD_LEVEL_ERRORS):
                    again.append(s)  # the broker's fault: send it again after a backoff
                    failure = result
                elif s.topic == DEAD_LETTER:
                    log.error("%s: the broker refused a dead letter (%r); its record stays "
                              "in %s", self.service, result, s.topic)  # fmt: skip
                else:
                    reason = f"the broker refused an output to {s.topic}: {result!r}"
                    if s.source is not None:
                        again.append(self.dead_letter(s.source, "output", reason))
                    else:
                        again.append(self.dead_letter_orphan(s.value[:1024], reason))
            self._staged = again + unsent + self._staged
            if failure is not None:
                raise BrokerError(f"sending {len(again) + len(unsent)} records failed: {failure!r}")
