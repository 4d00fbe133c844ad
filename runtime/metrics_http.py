"""A Prometheus endpoint per service (`GET /metrics` on 127.0.0.1 by default), via prometheus-client.

Across hosts, `$SCALECUA_METRICS_HOST` names the one interface every service of a host serves
its endpoint on instead (runtime/config.py; docs/deploy.md, "Hosts apart").

Each service runner has its own registry, so several services in one process (`scalecua
up`) expose separate endpoints. The runner's counters are read at scrape time (events in
and out, dead letters, duplicates, retries, rebalances, commits), its lag and uptime are
gauges, the time to process one record is a histogram, and whatever a processor reports
from a `stats()` method (the segmenter's cuts, the sampler's batches, the trainer's loss)
appears as gauges too. Every sample carries the label `service`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from runtime.config import metrics_host

__all__ = ["ServiceMetricsExporter", "MetricsServer", "COUNTERS"]

COUNTERS = (
    "consumed", "processed", "dead_lettered", "duplicates", "produced", "commits",
    "retries", "rebalances",
)  # fmt: skip


class _Collector:
    """Turns the runner's snapshot (and the processor's stats) into metric families."""

    def __init__(self, service: str, snapshot: Callable[[], dict[str, float]]) -> None:
        self.service = service
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        for name, value in self.snapshot().items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            metric = f"scalecua_{name}"
            if name in COUNTERS:
                family = CounterMetricFamily(metric, f"{name} records", labels=["service"])
            else:
                family = GaugeMetricFamily(metric, name.replace("_", " "), labels=["service"])
            family.add_metric([self.service], float(value))
            yield family


class ServiceMetricsExporter:
    """One service's registry: its counters, gauges and the per-record processing time."""

    def __init__(self, service: str, snapshot: Callable[[], dict[str, float]]) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(service, snapshot))
        self.process_seconds = Histogram(
            "scalecua_process_seconds",
            "time to process one record",
            ["service"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120),
        ).labels(service)

    def render(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)


class MetricsServer:
    """Serves one exporter over HTTP until stopped."""

    def __init__(
        self, exporter: ServiceMetricsExporter, port: int, host: str | None = None
    ) -> None:
        # None: $SCALECUA_METRICS_HOST, else 127.0.0.1
        self.exporter, self.port, self.host = exporter, port, host or metrics_host()
        self._runner: web.AppRunner | None = None

    async def start(self) -> MetricsServer:
        """Start listening."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        return self

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = self.exporter.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
