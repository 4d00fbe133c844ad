"""The segmenter service against the real broker: out-of-order topics, superseded attempts,
kill -9 and restart (nothing lost, identical segments re-emitted), and the acceptance check:
each trajectory's mask-1 tokens across its segments are its response ids, with their logprobs."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from runtime.blobstore import BlobStore, open_blob_store
from runtime.bus import EventConsumer, EventProducer
from runtime.config import BusSettings
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.policy.prompts import system_prompt
from runtime.policy.render import HistoryRenderer
from tests.bus_reading import committed_total
from topics.events import RolloutStep, SegmentReady, TrajectoryComplete

SCALECUA = [sys.executable, "-m", "cli"]
K, DELTA = 2, 1


@pytest.fixture(scope="module")
def processor() -> PolicyProcessor:
    """The tiny policy's processor (what the synthetic rollouts were rendered with)."""
    return load_processor(resolve_policy("tiny"))


def _episode(
    rng: random.Random,
    blobs: BlobStore,
    processor: PolicyProcessor,
    request: str,
    attempt: int,
    turns: int,
) -> tuple[list[RolloutStep], TrajectoryComplete]:
    """A rollout as the worker logs it: rendered with the window, ids sampled, events built."""
    system = system_prompt("osworld")
    system_ref = blobs.put(system.encode())
    renderer = HistoryRenderer(system, f"task of {request}", processor, window=(K, DELTA))
    trajectory = f"{request}@{attempt}{rng.randrange(16**7):07x}"
    steps = []
    for t in range(turns):
        shot = blobs.put(f"png {trajectory} {t}".encode())  # only its ref and size matter here
        text = f"observation {t}: " + " ".join(
            rng.choice(["ok", "cell", "B7", "✓"]) for _ in range(5)
        )
        text_ref = blobs.put(text.encode())
        size = (rng.choice([112, 168]), 112)

        class Shot:  # rendering reads only the size
            pass

        image = Shot()
        image.size = size
        prompt = renderer.observe(image, text)
        ids = [rng.randrange(200, 5000) for _ in range(rng.randint(1, 9))]
        renderer.respond(ids)
        steps.append(
            RolloutStep(
                trajectory_id=trajectory, step=t, request_id=request, attempt=attempt,
                group_id=request.split("/")[0], task_id="t", response_ids=ids,
                response_logprobs=[-rng.random() for _ in ids], observation_ref=shot,
                observation_size=list(size), observation_text_ref=text_ref,
                instruction=f"task of {request}", system_prompt_ref=system_ref,
                context_window=[K, DELTA], prompt_tokens=len(prompt.ids), temperature=0.8,
            )
        )  # fmt: skip
    complete = TrajectoryComplete(
        trajectory_id=trajectory, status="max_steps", num_steps=turns, task_id="t",
        group_id=request.split("/")[0], request_id=request, attempt=attempt, group_size=2,
        sample_index=int(request.split("/")[1]),
    )  # fmt: skip
    return steps, complete


async def _segments(settings: BusSettings, done, timeout: float = 90) -> list[SegmentReady]:  # noqa: ANN001
    out: list[SegmentReady] = []
    async with EventConsumer(settings, ["segment-ready"], group_id=None) as consumer:
        tps = await consumer.partitions_of("segment-ready")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while not done(out) and time.monotonic() < deadline:
            out += [r.event for r in await consumer.getmany(timeout_ms=200) if r.event]
    return out


def _check_acceptance(steps: list[RolloutStep], segments: list[SegmentReady]) -> None:
    """Mask-1 tokens across a trajectory's segments, in order, are its response ids."""
    by_traj: dict[str, dict[int, SegmentReady]] = defaultdict(dict)
    for s in segments:
        previous = by_traj[s.trajectory_id].get(s.segment_index)
        if previous is not None:  # a re-emitted duplicate must be identical
            assert (previous.input_ids, previous.loss_mask, previous.logprobs) == (
                s.input_ids, s.loss_mask, s.logprobs)  # fmt: skip
        by_traj[s.trajectory_id][s.segment_index] = s
    responses: dict[str, list[RolloutStep]] = defaultdict(list)
    for step in steps:
        responses[step.trajectory_id].append(step)
    for trajectory, parts in by_traj.items():
        ordered = [parts[i] for i in sorted(parts)]
        assert [p.segment_index for p in ordered] == list(range(ordered[0].num_segments))
        trained = [i for p in ordered for i, m in zip(p.input_ids, p.loss_mask, strict=True) if m]
        lps = [lp for p in ordered for lp, m in zip(p.logprobs, p.loss_mask, strict=True) if m]
        turns = sorted(responses[trajectory], key=lambda s: s.step)
        assert trained == [i for s in turns for i in s.response_ids]
        # A scripted turn samples nothing: its tokens train with logprob 0.0 (SFT data only).
        assert lps == [
            lp for s in turns for lp in (s.response_logprobs or [0.0] * len(s.response_ids))
        ]
        assert all(len(p.image_refs) <= K + DELTA for p in ordered)


async def test_segmenter_survives_kill_9_and_cuts_every_trajectory_exactly(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path, processor: PolicyProcessor
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    rng = random.Random(3)
    finished: list[tuple[list[RolloutStep], TrajectoryComplete]] = []
    partial: list[RolloutStep] = []
    for g in range(12):
        for i in range(2):
            request = f"g{g}/{i}"
            if i == 0 and g % 4 == 0:  # a superseded attempt: steps, never a completion
                partial += _episode(rng, blobs, processor, request, 0, 3)[0][:2]
                finished.append(_episode(rng, blobs, processor, request, 1, rng.randint(1, 9)))
            else:
                finished.append(_episode(rng, blobs, processor, request, 0, rng.randint(1, 9)))
    expected = sum(1 + max(0, -(-(len(s) - K - DELTA) // DELTA)) for s, _ in finished)
    env = {**cli_env, "SCALECUA_BLOBS": blobs.url}
    argv = [*SCALECUA, "segment", "--k", str(K), "--delta", str(DELTA)]
    log = open(tmp_path / "segmenter.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        async with EventProducer(bus_settings) as producer:
            futures = [await producer.send("rollout-step", s) for s in partial]
            for n, (steps, complete) in enumerate(finished):
                if n % 3 == 0:  # the completion may arrive before the steps
                    futures.append(await producer.send("trajectory-complete", complete))
                futures += [await producer.send("rollout-step", s) for s in steps]
                if n % 3 != 0:
                    futures.append(await producer.send("trajectory-complete", complete))
                if n == len(finished) // 2:
                    await producer.wait_acks(futures)
                    futures = []
                    await _segments(bus_settings, lambda out: len(out) >= 3)
                    proc.kill()  # kill -9 in the middle of the stream
                    proc.wait(10)
                    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
            await producer.wait_acks(futures)
        segments = await _segments(
            bus_settings,
            lambda out: len({(s.trajectory_id, s.segment_index) for s in out}) >= expected,
        )
        await asyncio.sleep(1.0)  # any late duplicate would show now
        segments = await _segments(bus_settings, lambda out: False, timeout=1)
    finally:
        proc.terminate()
        proc.wait(30)
    unique = {(s.trajectory_id, s.segment_index) for s in segments}
    assert len(unique) == expected, (tmp_path / "segmenter.log").read_text()[-3000:]
    assert {s.trajectory_id for s in segments} == {c.trajectory_id for _, c in finished}
    assert not {p.trajectory_id for p in partial} & {s.trajectory_id for s in segments}
    _check_acceptance([s for steps, _ in finished for s in steps], segments)
    assert proc.returncode == 0
    # Superseded attempts were released: the group committed every record of both topics.
    n_steps = len(partial) + sum(len(steps) for steps, _ in finished)
    assert await committed_total(bus_settings, "segmenter", "rollout-step") == n_steps
    assert await committed_total(bus_settings, "segmenter", "trajectory-complete") == len(finished)


@pytest.mark.desktop
async def test_over_a_run_of_the_services_segments_hold_exactly_the_response_tokens(
    bus_settings: BusSettings, tmp_path: Path, processor: PolicyProcessor
) -> None:
    from consumers.rollout.players import ScriptedPlayer
    from consumers.segmenter.service import Segmenter, SegmenterConfig
    from producers.rollout_requests import publish_requests, request_group
    from runtime.service import ServiceRunner
    from tests.bus_reading import read_until
    from tests.consumers.rollout.harness import services

    blobs = open_blob_store(str(tmp_path / "blobs"))
    player = ScriptedPlayer(processor, context_window=(K, DELTA))
    segmenter = Segmenter(SegmenterConfig(k=K, delta=DELTA), processor, blobs)
    runner = ServiceRunner(segmenter, bus_settings)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    try:
        async with services(bus_settings, player, blobs, desktops=2, judge=False):
            await publish_requests(bus_settings, request_group("mousepad_new_poem", 2))
            completes = await read_until(
                bus_settings, "trajectory-complete", lambda rs: len(rs) >= 2
            )
        total = sum(c.event.num_steps for c in completes)
        steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= total)
        expected = sum(1 + max(0, -(-(c.event.num_steps - K - DELTA) // DELTA)) for c in completes)
        segments = await _segments(bus_settings, lambda out: len(out) >= expected)
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)
    assert len(segments) == expected and expected > 2
    assert not any(s.sampled for s in segments)  # scripted: supervised data only
    _check_acceptance([r.event for r in steps], segments)
