"""Timelines as OpenTelemetry traces, exported over OTLP/HTTP with the official SDK.

One trace per trajectory (its id derived from the run and the trajectory, so exporting a
trajectory again gives the same trace id), under one root span `trajectory`, with one span
per stage that happened:

    trajectory                       request → the last stage reached
    ├─ request                       request → the first turn starts (waiting for a worker)
    ├─ rollout                       first turn starts → complete
    │  └─ turn 0, turn 1, …          each turn, from its start to its record
    ├─ reward                        complete → the first reward
    ├─ segments                      complete → the last segment
    ├─ trained                       segments → training done (the wait for the group and
    │                                B groups, and the step itself)
    └─ announced                     training done → the update on `policy-updates`

Spans are made after the fact, with the times the log holds; attributes carry the task,
group, versions, score and advantage (`scalecua.*`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace as otel
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from runtime.config import BusSettings
from runtime.errors import InfrastructureError
from runtime.trace.reading import read_live_log
from runtime.trace.timeline import LogIndex, Timeline, build_timelines

__all__ = [
    "STAGE_SPANS",
    "ExportReport",
    "traces_endpoint",
    "timeline_spans",
    "export_timelines",
    "settled",
    "follow_live",
]

STAGE_SPANS = ("request", "rollout", "reward", "segments", "trained", "announced")
_BATCH = 512  # spans per OTLP request


@dataclass(frozen=True)
class ExportReport:
    """What an export sent."""

    traces: int
    spans: int
    endpoint: str


class _TraceIds(RandomIdGenerator):
    """Random span ids; the trace id of the trajectory being built."""

    def __init__(self) -> None:
        self.trace_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id or super().generate_trace_id()


def traces_endpoint(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (`http://host:4318`) or the URL itself."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def _trace_id(run_id: str, trajectory_id: str) -> int:
    digest = hashlib.sha256(f"{run_id}\0{trajectory_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def _ns(ms: float) -> int:
    return int(round(ms * 1_000_000))


def _attributes(t: Timeline) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scalecua.trajectory_id": t.trajectory_id,
        "scalecua.request_id": t.request_id,
        "scalecua.group_id": t.group_id,
        "scalecua.task_id": t.task_id,
        "scalecua.sample_index": t.sample_index,
        "scalecua.attempt": t.attempt,
        "scalecua.turns": len(t.turns),
    }
    if t.policy_version is not None:
        out["scalecua.policy_version"] = t.policy_version
    if t.completion:
        out["scalecua.status"] = t.completion.status
    if t.rewards:
        out["scalecua.score"] = t.rewards[0].score
        out["scalecua.judge_version"] = t.rewards[0].judge_version
    if t.training:
        out["scalecua.trained_version"] = t.training.version
        if t.training.advantage is not None:
            out["scalecua.advantage"] = t.training.advantage
    return out


def _stages(t: Timeline) -> list[tuple[str, float, float, dict[str, Any]]]:
    """(name, start ms, end ms, attributes) of each stage span whose two ends are known."""
    first = t.turns[0].started_ms if t.turns else None
    complete = t.completion.at_ms if t.completion else None
    out: list[tuple[str, float | None, float | None, dict[str, Any]]] = []
    r = t.request
    out.append(("request", r.at_ms if r else None, first, {
        "scalecua.batch": r.batch if r and r.batch is not None else -1,
        "scalecua.drawn": r.drawn if r else "", "scalecua.ema": r.ema if r and r.ema is not None
        else -1.0,
    }))  # fmt: skip
    c = t.completion
    out.append(("rollout", first, complete, {
        "scalecua.status": c.status if c else "", "scalecua.num_steps": c.num_steps if c else 0,
        "scalecua.error": (c.error or "") if c else "",
    }))  # fmt: skip
    w = t.rewards[0] if t.rewards else None
    out.append(("reward", complete, w.at_ms if w else None, {
        "scalecua.score": w.score if w else 0.0, "scalecua.judge_version": w.judge_version if w
        else "", "scalecua.reason": w.reason if w else "",
    }))  # fmt: skip
    s = t.segments
    out.append(("segments", complete, s.at_ms if s else None, {
        "scalecua.segments": s.count if s else 0, "scalecua.tokens": s.tokens if s else 0,
        "scalecua.trained_tokens": s.trained_tokens if s else 0,
    }))  # fmt: skip
    tr = t.training
    out.append(("trained", s.at_ms if s else None, tr.trained_ms if tr else None, {
        "scalecua.version": tr.version if tr else 0, "scalecua.step_started_ms":
        tr.step_started_ms if tr else 0.0,
    }))  # fmt: skip
    out.append(("announced", tr.trained_ms if tr else None, tr.announced_ms if tr else None, {
        "scalecua.version": tr.version if tr else 0,
        "scalecua.checkpoint_uri": tr.checkpoint_uri if tr else "",
    }))  # fmt: skip
    return [(n, a, b, attrs) for n, a, b, attrs in out if a is not None and b is not None]


def timeline_spans(
    timelines: Iterable[Timeline], service_name: str = "scalecua"
) -> list[ReadableSpan]:
    """The finished spans of each timeline's trace (built with the SDK, not yet exported)."""
    collected = InMemorySpanExporter()
    ids = _TraceIds()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}), id_generator=ids,
        shutdown_on_exit=False,
    )  # fmt: skip
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("scalecua.trace")
    for t in timelines:
        stages = _stages(t)
        times = [ms for _, a, b, _ in stages for ms in (a, b)] + [
            ms for turn in t.turns for ms in (turn.started_ms, turn.at_ms)
        ]
        if not times:
            continue
        ids.trace_id = _trace_id(t.run_id, t.trajectory_id)
        attrs = {**_attributes(t), "scalecua.run_id": t.run_id}
        root = tracer.start_span("trajectory", attributes=attrs, start_time=_ns(min(times)))
        ids.trace_id = 0
        inside = otel.set_span_in_context(root)
        for name, start, end, extra in stages:
            span = tracer.start_span(name, context=inside, attributes=extra, start_time=_ns(start))
            if name == "rollout":
                rollout = otel.set_span_in_context(span)
                for turn in t.turns:
                    tracer.start_span(
                        f"turn {turn.step}", context=rollout, start_time=_ns(turn.started_ms),
                        attributes={
                            "scalecua.step": turn.step, "scalecua.policy_version": turn.policy_version,
                            "scalecua.tokens": turn.tokens, "scalecua.prompt_tokens": turn.prompt_tokens,
                            "scalecua.action": turn.action_text,
                            "scalecua.observation": ",".join(turn.observation),
                            "scalecua.screenshot": turn.screenshot or "",
                        },
                    ).end(end_time=_ns(turn.at_ms))  # fmt: skip
            span.end(end_time=_ns(end))
        root.end(end_time=_ns(max(times)))
    provider.shutdown()
    return list(collected.get_finished_spans())


def export_timelines(
    timelines: Sequence[Timeline], endpoint: str, timeout_s: float = 10.0
) -> ExportReport:
    """Send each timeline's trace to an OTLP/HTTP receiver; raise when it refuses or is away."""
    url = traces_endpoint(endpoint)
    spans = timeline_spans(timelines)
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
    try:
        for i in range(0, len(spans), _BATCH):
            if exporter.export(spans[i : i + _BATCH]) is not SpanExportResult.SUCCESS:
                raise InfrastructureError(
                    f"the OTLP receiver at {url} did not take the traces (see the log above)"
                )
    finally:
        exporter.shutdown()
    traces = len({s.context.trace_id for s in spans if s.context is not None})
    return ExportReport(traces=traces, spans=len(spans), endpoint=url)


def settled(timeline: Timeline) -> bool:
    """Whether a trajectory's trace is whole: announced, or ended by an environment failure."""
    if timeline.training is not None:
        return True
    failed = timeline.completion is not None and timeline.completion.status == "error"
    return failed or any(not w.scored for w in timeline.rewards)


async def follow_live(
    settings: BusSettings,
    endpoint: str,
    stop: asyncio.Event,
    interval_s: float = 10.0,
    pool_factor: int = 3,
    on_export: Callable[[ExportReport], None] | None = None,
) -> int:
    """Export each trajectory of the live log once its trace is settled, until `stop`; then
    the rest as they are. Returns the traces exported. Each pass re-reads the log."""
    done: set[str] = set()
    while True:
        last = stop.is_set()
        index = LogIndex(await read_live_log(settings), pool_factor=pool_factor)
        ready = [t for t in build_timelines(index) if t.trajectory_id not in done]
        if not last:
            ready = [t for t in ready if settled(t)]
        if ready:
            report = await asyncio.to_thread(export_timelines, ready, endpoint)
            done.update(t.trajectory_id for t in ready)
            if on_export is not None:
                on_export(report)
        if last:
            return len(done)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
