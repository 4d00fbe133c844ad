"""Trajectories as OpenTelemetry traces, sent by the SDK's OTLP/HTTP exporter to a real
OTLP receiver: one trace per trajectory, one span per stage, one child span per turn."""

from __future__ import annotations

import asyncio

import pytest

from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.errors import InfrastructureError
from runtime.trace.otlp import STAGE_SPANS, export_timelines, follow_live, traces_endpoint
from runtime.trace.timeline import LogIndex, build_timelines
from tests.runtime.trace.otlp_receiver import otlp_receiver
from tests.runtime.trace.story import T0, TRAJECTORY, story
from tests.runtime.trace.test_timeline import trace_log


def test_one_trace_per_trajectory_with_a_span_per_stage() -> None:
    timelines = build_timelines(LogIndex(trace_log(story(), run_id="r1")))
    with otlp_receiver() as (url, received):
        report = export_timelines(timelines, url)
    traces = received.traces()
    assert report.traces == len(traces) == len(timelines) == 5
    assert report.spans == len(received.spans) and received.requests == 1
    (mine,) = [
        spans for spans in traces.values()
        if any(s.attributes.get("scalecua.trajectory_id") == TRAJECTORY for s in spans)
    ]  # fmt: skip
    (root,) = [s for s in mine if s.parent_span_id == ""]
    assert root.name == "trajectory" and root.resource["service.name"] == "scalecua"
    assert root.attributes["scalecua.task_id"] == "alpha"
    assert (
        root.attributes["scalecua.score"] == 1.0 and root.attributes["scalecua.advantage"] == 0.7071
    )
    assert root.start_ns == T0 * 1_000_000  # the request's time, from the log
    stages = [s for s in mine if s.parent_span_id == root.span_id]
    assert sorted(s.name for s in stages) == sorted(STAGE_SPANS)
    (rollout,) = [s for s in stages if s.name == "rollout"]
    turns = [s for s in mine if s.parent_span_id == rollout.span_id]
    assert [s.name for s in sorted(turns, key=lambda s: s.start_ns)] == ["turn 0", "turn 1"]
    assert turns[0].attributes["scalecua.action"] == 'left_click {"coordinate":[100,500]}'
    (reward,) = [s for s in stages if s.name == "reward"]
    assert (reward.end_ns - reward.start_ns) == 500 * 1_000_000
    assert len(mine) == 1 + len(STAGE_SPANS) + 2
    # The environment failure reached no reward and no training: only the stages it had.
    failed = [spans for spans in traces.values() if any(
        s.attributes.get("scalecua.status") == "error" for s in spans if s.name == "trajectory")]  # fmt: skip
    assert sorted(s.name for s in failed[0] if s.name in STAGE_SPANS) == ["request", "rollout"]

    # Exported again, a trajectory keeps its trace id.
    with otlp_receiver() as (url, again):
        export_timelines(timelines[:1], url)
    assert set(again.traces()) <= set(traces)


def test_a_receiver_that_is_not_there_is_an_error() -> None:
    timelines = build_timelines(LogIndex(trace_log(story())))[:1]
    with otlp_receiver() as (url, _):
        pass  # closed again: nothing listens at url now
    with pytest.raises(InfrastructureError, match="did not take the traces"):
        export_timelines(timelines, url, timeout_s=0.5)
    assert traces_endpoint("http://h:4318/") == "http://h:4318/v1/traces"
    assert traces_endpoint("http://h:4318/v1/traces") == "http://h:4318/v1/traces"


async def test_following_a_live_run_exports_each_trajectory_once(bus_settings: BusSettings) -> None:
    stop = asyncio.Event()
    with otlp_receiver() as (url, received):
        follower = asyncio.create_task(follow_live(bus_settings, url, stop, interval_s=0.2))
        events = story()
        unsettled = [e for e in events if e[0] != "policy-updates"]
        async with EventProducer(bus_settings) as producer:
            await producer.wait_acks([await producer.send(n, e) for n, e in unsettled])
            async with asyncio.timeout(20):  # the environment failure is whole already
                while len(received.traces()) < 1:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            assert len(received.traces()) == 1  # the others wait for their training step
            updates = [e for e in events if e[0] == "policy-updates"]
            await producer.wait_acks([await producer.send(n, e) for n, e in updates])
        async with asyncio.timeout(20):
            while len(received.traces()) < 5:
                await asyncio.sleep(0.05)
        stop.set()
        assert await follower == 5
    assert len(received.traces()) == 5
