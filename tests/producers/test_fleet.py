"""The fleet replayer: recorded trajectories answer new rollout requests, paced, through the
real broker and the real segmenter, which cuts a replay exactly as it cut the recording."""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path

import pytest

from consumers.segmenter.service import Segmenter, SegmenterConfig
from producers.fleet.replay import (
    Recording,
    Recordings,
    ThinkTime,
    assemble,
    new_trajectory_id,
    replay_complete,
    replay_step,
)
from producers.fleet.service import FleetConfig, FleetReplayer, load_recordings
from producers.rollout_requests import publish_requests, request_group
from runtime.archive.layout import events_to_table
from runtime.archive.store import ArchiveStore
from runtime.blobstore import BlobStore, open_blob_store
from runtime.config import BusSettings
from runtime.errors import ConfigError
from runtime.policy.model import resolve_policy
from runtime.policy.observation import fit_image
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.policy.render import HistoryRenderer
from runtime.service import ServiceRunner
from tests.bus_reading import read_until
from tests.consumers.trainer.harness import screenshot_png
from topics.events import RolloutRequest, RolloutStep, SegmentReady, TrajectoryComplete

SYSTEM = "You operate a computer with one tool call per turn."
INSTRUCTION = "Write hello into notes.txt."
K, DELTA, TURNS = 2, 1, 4  # a 4-turn episode in a window of 2+1 screenshots: 2 segments


@pytest.fixture(scope="module")
def processor() -> PolicyProcessor:
    """The tiny policy's tokenizer and image processor (the recording's renderer)."""
    return load_processor(resolve_policy("tiny"))


def _recorded(processor: PolicyProcessor, blobs: BlobStore, name: str, seed: int) -> list:
    """One recorded trajectory as a rollout worker logs it (steps, then its completion)."""
    system_ref = blobs.put(SYSTEM.encode())
    renderer = HistoryRenderer(SYSTEM, INSTRUCTION, processor, window=(K, DELTA))
    rng = random.Random(seed)
    trajectory = f"{name}/0@0{seed:07x}"
    events: list = []
    for t in range(TURNS):
        png = screenshot_png(seed * 10 + t)
        image = fit_image(png, 112)
        prompt = renderer.observe(image, "")
        response = [rng.randrange(1000, 5000) for _ in range(3)]
        renderer.respond(response)
        events.append(RolloutStep(
            trajectory_id=trajectory, step=t, task_id="notes", group_id=name,
            request_id=f"{name}/0", response_ids=response, response_logprobs=[-0.5] * 3,
            observation_ref=blobs.put(png), observation_size=list(image.size),
            instruction=INSTRUCTION, system_prompt_ref=system_ref, temperature=0.8,
            context_window=[K, DELTA], prompt_tokens=len(prompt.ids),
        ))  # fmt: skip
    events.append(TrajectoryComplete(
        trajectory_id=trajectory, status="done", num_steps=TURNS, task_id="notes",
        group_id=name, request_id=f"{name}/0", artifacts={"evaluation": "sha256:" + "0" * 64},
    ))  # fmt: skip
    return events


def _archive(root: Path, events: list) -> None:
    """Write events to an archive as the archiver does (one file per topic, run `rec`)."""
    store = ArchiveStore(str(root))
    for event_type, topic in ((RolloutStep, "rollout-step"),
                              (TrajectoryComplete, "trajectory-complete")):  # fmt: skip
        chosen = [e for e in events if isinstance(e, event_type)]
        rows = [(0, i, e.ts_ms, e.trajectory_id.encode(), e) for i, e in enumerate(chosen)]
        store.write(topic, 0, "rec", 0, len(rows) - 1, events_to_table(event_type, rows))


def test_only_whole_trajectories_are_recordings() -> None:
    steps = [RolloutStep(trajectory_id=t, step=i) for t in ("a", "b") for i in range(2)]
    steps = [s for s in steps if not (s.trajectory_id == "b" and s.step == 1)]  # b lost a step
    done = [TrajectoryComplete(trajectory_id=t, status="done", num_steps=2, task_id="x")
            for t in ("a", "b")]  # fmt: skip
    done.append(TrajectoryComplete(trajectory_id="c", status="error", num_steps=0))
    whole, left = assemble(steps + steps[:1], done)  # a step written twice counts once
    assert [r.complete.trajectory_id for r in whole] == ["a"]
    assert [s.step for s in whole[0].steps] == [0, 1]
    assert left == {"error": 1, "steps_missing": 1, "no_steps": 0}


def test_recordings_of_a_task_are_handed_out_in_turn() -> None:
    whole, _ = assemble(
        [RolloutStep(trajectory_id=t, step=0) for t in ("a", "b")],
        [TrajectoryComplete(trajectory_id=t, status="done", num_steps=1, task_id="x")
         for t in ("a", "b")],
    )  # fmt: skip
    pool = Recordings(whole)
    assert [pool.pick("x").complete.trajectory_id for _ in range(3)] == ["a", "b", "a"]
    assert pool.pick("other") is None and pool.tasks() == ["x"] and len(pool) == 2


def test_think_time_is_the_paper_pace_over_the_compression() -> None:
    think = ThinkTime(turn_s=10.8, jitter=0.25, compression=10)
    rng = random.Random(0)
    draws = [think.draw(rng) for _ in range(1000)]
    assert 1.08 * 0.75 <= min(draws) and max(draws) <= 1.08 * 1.25
    assert think.offered_steps_per_s(600) == pytest.approx(600 / 1.08)
    for bad in ({"jitter": 1.0}, {"compression": 0}, {"turn_s": -1}):
        with pytest.raises(ValueError):
            ThinkTime(**bad)


def test_a_replayed_turn_takes_the_requests_identity() -> None:
    step = RolloutStep(trajectory_id="old/0@0abc", step=3, task_id="x", group_id="old",
                       request_id="old/0", policy_version=7, response_ids=[1, 2])  # fmt: skip
    request = RolloutRequest(task_id="x", group_id="new", group_size=8, sample_index=5,
                             policy_version=2)  # fmt: skip
    trajectory = new_trajectory_id(request)
    replayed = replay_step(step, request, trajectory, "w", "fleet-replay:h:1")
    assert trajectory.startswith("new/5@0") and replayed.trajectory_id == trajectory
    assert (replayed.group_id, replayed.request_id, replayed.policy_version) == ("new", "new/5", 2)
    assert replayed.response_ids == [1, 2] and replayed.step == 3
    assert replayed.event_id != step.event_id and replayed.producer_id == "fleet-replay:h:1"
    complete = TrajectoryComplete(trajectory_id="old/0@0abc", status="done", num_steps=4,
                                  artifacts={"evaluation": "sha256:x"})  # fmt: skip
    end = replay_complete(Recording((step,), complete), request, trajectory, "w", "p", 1.5)
    assert (end.group_size, end.sample_index, end.artifacts) == (8, 5, complete.artifacts)
    assert end.seconds == 1.5 and end.trajectory_id == trajectory


def test_an_archive_without_whole_trajectories_is_refused(tmp_path: Path) -> None:
    _archive(tmp_path, [RolloutStep(trajectory_id="a", step=0),
                        TrajectoryComplete(trajectory_id="a", status="error", num_steps=0)])  # fmt: skip
    with pytest.raises(ConfigError, match="no whole trajectory"):
        load_recordings(str(tmp_path))


async def test_the_fleet_replays_recordings_through_the_real_segmenter(
    bus_settings: BusSettings, processor: PolicyProcessor, tmp_path: Path
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    recorded = _recorded(processor, blobs, "ga", 1) + _recorded(processor, blobs, "gb", 2)
    _archive(tmp_path / "archive", recorded)
    recordings, run = load_recordings(str(tmp_path / "archive"))
    assert run == "rec" and len(recordings) == 2
    think = ThinkTime(turn_s=0.2, jitter=0.5)
    fleet = ServiceRunner(FleetReplayer(FleetConfig(environments=4, think=think),
                                        Recordings(recordings)), bus_settings)  # fmt: skip
    segmenter = ServiceRunner(
        Segmenter(SegmenterConfig(k=K, delta=DELTA), processor, blobs), bus_settings
    )
    requests = request_group("notes", 3) + request_group("unknown-task", 1)
    tasks = [asyncio.create_task(r.run(install_signal_handlers=False)) for r in (fleet, segmenter)]
    try:
        await publish_requests(bus_settings, requests)
        last = await read_until(bus_settings, "segment-ready",
                                lambda rs: sum(r.event.is_last for r in rs) >= 3, 120)  # fmt: skip
        ends = await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 4, 30)
        steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 12, 30)
    finally:
        fleet.stop()
        segmenter.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    segments: dict[str, list[SegmentReady]] = {}
    for record in last:
        segments.setdefault(record.event.trajectory_id, []).append(record.event)
    recorded_ids = {e.trajectory_id for e in recorded}
    assert len(segments) == 3 and not recorded_ids & set(segments)
    cuts = sorted(
        (tuple(tuple(s.input_ids) for s in sorted(v, key=lambda s: s.segment_index))
         for v in segments.values()),
    )  # fmt: skip
    # Round robin: recordings a, b, a; the two replays of a are cut alike, b differently.
    assert len(set(cuts)) == 2 and all(len(c) == 2 for c in cuts)
    error = [r.event for r in ends if r.event.status == "error"]
    assert len(error) == 1 and "no recording of task 'unknown-task'" in error[0].error
    assert all(r.event.producer_id.startswith("fleet-replay:") for r in steps + ends)
    by_trajectory: dict[str, list[int]] = {}
    for record in steps:
        by_trajectory.setdefault(record.event.trajectory_id, []).append(record.event.ts_ms)
    gaps = [b - a for ts in map(sorted, by_trajectory.values()) for a, b in itertools.pairwise(ts)]
    assert min(gaps) >= 0.2 * 0.5 * 1000 - 5  # paced: a think time of at least 0.1 s per turn
