"""Retrying work that an infrastructure failure interrupted, with exponential backoff.

The service runner (runtime/service.py) retries this way whatever touches a dependency of
the service (a record's processing, a tick, a send): until it succeeds, until a stop request
interrupts the wait (`RetryStopped`), or until the failure outlasts the `RetryPolicy`
(`ServiceHalted`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.errors import InfrastructureError, ScaleCUAError, ServiceHalted
from runtime.runner_state import ServiceMetrics

__all__ = ["RetryPolicy", "RetryStopped", "retrying"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How long an infrastructure failure is retried before the service halts."""

    first_delay_s: float = 0.2
    max_delay_s: float = 10.0
    give_up_after_s: float = 120.0


class RetryStopped(ScaleCUAError):
    """A stop request interrupted a retry: the work is done again after a restart."""


async def retrying(
    what: str,
    attempt: Callable[[], Awaitable[object]],
    policy: RetryPolicy,
    *,
    service: str,
    metrics: ServiceMetrics,
    stop: asyncio.Event | None,
    failed: InfrastructureError | None = None,
) -> None:
    """Run `attempt` until it succeeds, backing off on InfrastructureError.

    `failed` is a failure of an attempt the caller already made; `stop`, when given, ends
    a wait with RetryStopped once it is set. The caller holds no lock while this waits, so
    a rebalance is not held up by an outage.
    """
    started: float | None = None
    delay = policy.first_delay_s
    failure = failed
    while True:
        if failure is None:
            try:
                await attempt()
                return
            except InfrastructureError as exc:
                failure = exc
        now = time.monotonic()
        started = started if started is not None else now
        if now - started >= policy.give_up_after_s:
            raise ServiceHalted(
                f"{service}: {what}: {failure} "
                f"(still failing after {now - started:.0f} s of retries)"
            ) from failure
        metrics.retries += 1
        log.warning("%s: %s failed (%s); retrying in %.1f s", service, what, failure, delay)
        if stop is not None:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            if stop.is_set():
                raise RetryStopped()
        else:
            await asyncio.sleep(delay)
        delay = min(delay * 2, policy.max_delay_s)
        failure = None
