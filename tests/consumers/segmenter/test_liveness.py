"""Nothing pins the segmenter's commit for long, against the real broker: an orphan step, a
completion without steps and a trajectory missing a step go to dead-letter with what they
miss once idle past the bound; an impossible or contradictory trajectory goes at once (the
default bound is 15 minutes); the records after them are cut and committed as usual."""

from __future__ import annotations

import asyncio
import random
import subprocess
from pathlib import Path

import msgspec
import pytest
from aiokafka.partitioner import murmur2
from aiokafka.structs import RecordMetadata

from consumers.segmenter.service import Segmenter, SegmenterConfig
from runtime.blobstore import open_blob_store
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.service import ServiceRunner
from tests.bus_reading import committed, read_until
from tests.consumers.segmenter.test_service import DELTA, SCALECUA, K, _episode, _segments
from topics.events import DeadLetter, Event, RolloutStep
from topics.registry import topic

PARTITION = 5  # every record of these tests lands here, so later records move its clocks on


@pytest.fixture(scope="module")
def processor() -> PolicyProcessor:
    """The tiny policy's processor (what the synthetic rollouts were rendered with)."""
    return load_processor(resolve_policy("tiny"))


def _requests(n: int) -> list[str]:
    """`n` request ids whose records the producer puts on PARTITION of both topics."""
    count = topic("rollout-step").partitions
    assert topic("trajectory-complete").partitions == count
    ids = (f"g{i}/0" for i in range(10_000))
    return [r for r in ids if (murmur2(r.encode()) & 0x7FFFFFFF) % count == PARTITION][:n]


async def _send(producer: EventProducer, events: list[Event]) -> list[RecordMetadata]:
    sent = []
    for event in events:
        name = "rollout-step" if isinstance(event, RolloutStep) else "trajectory-complete"
        sent.append(await (await producer.send(name, event)))
    assert {m.partition for m in sent} == {PARTITION}
    return sent


async def _dead_letters(settings: BusSettings, n: int) -> list[DeadLetter]:
    records = await read_until(settings, "dead-letter", lambda rs: len(rs) >= n, timeout=90)
    return [r.event for r in records]


async def _all_committed(settings: BusSettings, ends: dict[str, int]) -> dict[str, int]:
    """The group's commits on PARTITION, once they reach `ends` (or as they are after 60 s)."""
    for _ in range(300):
        now = {t: (await committed(settings, "segmenter", t))[PARTITION] for t in ends}
        if now == ends:
            break
        await asyncio.sleep(0.2)
    return now


def _expected_segments(episodes: list[tuple[list[RolloutStep], object]]) -> int:
    return sum(1 + max(0, -(-(len(s) - K - DELTA) // DELTA)) for s, _ in episodes)


async def test_orphans_and_gaps_are_dead_lettered_after_the_idle_bound_and_the_rest_commits(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path, processor: PolicyProcessor
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    rng = random.Random(11)
    a, b, c, *good = _requests(6)
    orphan, _ = _episode(rng, blobs, processor, a, 0, 2)  # steps; no completion ever
    _, lone = _episode(rng, blobs, processor, b, 0, 3)  # a completion; no step ever
    gap_steps, gap_done = _episode(rng, blobs, processor, c, 0, 3)  # step 1 never comes
    episodes = [_episode(rng, blobs, processor, r, 0, rng.randint(1, 6)) for r in good]
    # The bound set as users set it: through the settings (file or environment), here 1 s.
    env = {**cli_env, "SCALECUA_BLOBS": blobs.url, "SCALECUA_SEGMENT_IDLE_TIMEOUT": "1"}
    argv = [*SCALECUA, "segment", "--k", str(K), "--delta", str(DELTA)]
    log = open(tmp_path / "segmenter.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        async with EventProducer(bus_settings) as producer:
            bad = await _send(producer, [*orphan, lone, gap_steps[0], gap_done, gap_steps[2]])
            await _send(producer, [*episodes[0][0], episodes[0][1]])
            first = _expected_segments(episodes[:1])
            await _segments(bus_settings, lambda out: len(out) >= first)  # read up to here
            # Nothing of the bad trajectories for longer than the bound, on either clock;
            # then the stream goes on.
            await asyncio.sleep(1.5)
            for steps, complete in episodes[1:]:
                await _send(producer, [*steps, complete])
        letters = await _dead_letters(bus_settings, len(bad))
        expected = _expected_segments(episodes)
        segments = await _segments(bus_settings, lambda out: len(out) >= expected)
        ends = {
            "rollout-step": len(orphan) + 2 + sum(len(s) for s, _ in episodes),
            "trajectory-complete": 2 + len(episodes),
        }
        commits = await _all_committed(bus_settings, ends)
    finally:
        proc.terminate()
        proc.wait(30)
    stderr = (tmp_path / "segmenter.log").read_text()[-3000:]
    assert {(d.source_topic, d.partition, d.offset) for d in letters} == {
        (m.topic, m.partition, m.offset) for m in bad
    }, stderr
    assert all(d.error_type == "incomplete" and d.service == "segmenter" for d in letters)
    reasons = {d.error.split(":")[0]: d.error for d in letters}  # trajectory id -> reason
    assert "no completion; steps held: 0-1" in reasons[orphan[0].trajectory_id]
    assert "says 3 steps; held: none; missing: 0-2" in reasons[lone.trajectory_id]
    assert "says 3 steps; held: 0, 2; missing: 1" in reasons[gap_done.trajectory_id]
    # The records after them were cut (the gap's trajectory never was) and all committed.
    assert {s.trajectory_id for s in segments} == {c.trajectory_id for _, c in episodes}
    assert len({(s.trajectory_id, s.segment_index) for s in segments}) == expected
    assert commits == ends, stderr
    assert proc.returncode == 0


async def test_steps_missing_from_a_quiet_log_are_dead_lettered_after_the_grace(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path, processor: PolicyProcessor
) -> None:
    """Issue 30, finding 6: a completion whose step 0 never reached the log, and nothing
    written after it (a quiet log: no later record moves any clock). The idle bound (15
    minutes) would hold it; the grace, set through the settings, releases it in seconds."""
    import httpx

    from runtime.broker import free_port

    blobs = open_blob_store(str(tmp_path / "blobs"))
    (request,) = _requests(1)
    steps, complete = _episode(random.Random(13), blobs, processor, request, 0, 5)
    env = {**cli_env, "SCALECUA_BLOBS": blobs.url, "SCALECUA_SEGMENT_MISSING_GRACE": "1"}
    port = free_port()
    argv = [*SCALECUA, "segment", "--k", str(K), "--delta", str(DELTA), "--metrics-port", str(port)]
    log = open(tmp_path / "segmenter.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        async with EventProducer(bus_settings) as producer:
            held = await _send(producer, [*steps[1:], complete])
        letters = await _dead_letters(bus_settings, len(held))
        commits = await _all_committed(bus_settings, {"rollout-step": 4, "trajectory-complete": 1})
        async with httpx.AsyncClient() as client:
            body = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        proc.terminate()
        proc.wait(30)
    stderr = (tmp_path / "segmenter.log").read_text()
    assert {(d.source_topic, d.offset) for d in letters} == {(m.topic, m.offset) for m in held}
    assert all(d.error_type == "incomplete" for d in letters)
    reason = letters[0].error
    assert "steps missing from the log: the completion says 5 steps; held: 1-4; missing: 0" in (
        reason
    ), reason
    assert f"WARNING consumers.segmenter.service dead-lettering {complete.trajectory_id}: " in (
        stderr
    ), stderr[-3000:]
    assert 'scalecua_steps_missing{service="segmenter"} 1.0' in body
    assert commits == {"rollout-step": 4, "trajectory-complete": 1}  # nothing pins the commit


async def test_impossible_and_contradictory_trajectories_are_dead_lettered_at_once(
    bus_settings: BusSettings, tmp_path: Path, processor: PolicyProcessor
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    rng = random.Random(12)
    bad, wrong, good = _requests(3)
    d_steps, d_done = _episode(rng, blobs, processor, bad, 0, 2)
    e_steps, e_done = _episode(rng, blobs, processor, wrong, 0, 4)
    g_steps, g_done = _episode(rng, blobs, processor, good, 0, 3)
    config = SegmenterConfig(k=K, delta=DELTA)
    assert config.idle_timeout_s >= 600  # "at once": far sooner than any idle bound
    runner = ServiceRunner(Segmenter(config, processor, blobs), bus_settings)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    try:
        async with EventProducer(bus_settings) as producer:
            # Decodable but impossible: more steps than its own limit (events themselves refuse
            # a group size of 0 or an index outside the group: those fail at decode).
            over = msgspec.structs.replace(d_done, max_steps=1)
            impossible = await _send(producer, [*d_steps, over])
            # Step 3 of a trajectory whose completion says 2 steps (either may come first).
            contradictory = await _send(
                producer, [e_steps[3], msgspec.structs.replace(e_done, num_steps=2)]
            )
            await _dead_letters(bus_settings, 5)  # both trajectories, long before any bound
            straggler = await _send(producer, [e_steps[0]])
            await _send(producer, [*g_steps, g_done])
        letters = await _dead_letters(bus_settings, 6)
        expected = _expected_segments([(g_steps, g_done)])
        segments = await _segments(bus_settings, lambda out: len(out) >= expected)
        commits = await _all_committed(bus_settings, {"rollout-step": 7, "trajectory-complete": 3})
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)
    reason = {(d.source_topic, d.offset): d.error for d in letters}
    assert set(reason) == {(m.topic, m.offset) for m in impossible + contradictory + straggler}
    # A record read after its trajectory was dead-lettered follows it there (a RecordError
    # the runner dead-letters) with the same reason: the completion may be read first.
    for m in impossible:
        assert d_done.trajectory_id in reason[m.topic, m.offset]
        assert "over its max_steps of 1" in reason[m.topic, m.offset]
    for m in contradictory:
        assert "says 2 steps but step" in reason[m.topic, m.offset]  # "step 3" or "steps 3"
    assert (
        "was dead-lettered before this record came" in reason["rollout-step", straggler[0].offset]
    )
    assert all(d.error_type == "process" for d in letters)
    assert {s.trajectory_id for s in segments} == {g_done.trajectory_id}
    assert commits == {"rollout-step": 7, "trajectory-complete": 3}
