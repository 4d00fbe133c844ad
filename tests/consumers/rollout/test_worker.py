"""Rollout workers and the judge on real desktops, a real broker and real policies."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from consumers.archiver.service import Archiver, ArchiverConfig
from consumers.rollout.players import ScriptedPlayer, build_player
from consumers.trainer.checkpoints import CheckpointStore
from producers.rollout_requests import publish_requests, request_group
from runtime.blobstore import BlobStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.engines.base import SamplingParams
from runtime.policy.model import init_tiny_policy, resolve_policy
from runtime.policy.processor import load_processor
from runtime.runs import run_resolver
from runtime.service import ServiceRunner
from tests.bus_reading import read_until
from tests.consumers.rollout.harness import WAIT_TASK, publish_task, services
from topics.codec import decode
from topics.events import PolicyUpdate

pytestmark = pytest.mark.desktop
SCALECUA = [sys.executable, "-m", "cli"]


def _by_trajectory(records: list) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for r in records:
        out[r.event.trajectory_id].append(r.event)
    return out


async def test_a_group_yields_ordered_steps_and_one_reward_each_and_rejudges(
    bus_settings: BusSettings, blobs: BlobStore, cli_env: dict[str, str], tmp_path: Path
) -> None:
    player = ScriptedPlayer(load_processor(resolve_policy("tiny")))
    group = request_group("mousepad_new_poem", 3, max_steps=20)
    async with services(bus_settings, player, blobs, desktops=2):
        await publish_requests(bus_settings, group)
        rewards = await read_until(bus_settings, "reward", lambda rs: len(rs) >= 3)
    completes = await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 3)
    total = sum(c.event.num_steps for c in completes)
    steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= total)
    assert len(steps) == total
    assert sorted(c.event.sample_index for c in completes) == [0, 1, 2]
    by_traj = _by_trajectory(steps)
    assert set(by_traj) == {c.event.trajectory_id for c in completes}
    for complete in completes:
        turns = by_traj[complete.event.trajectory_id]  # one partition: log order
        assert [t.step for t in turns] == list(range(complete.event.num_steps))
        assert all(t.request_id == complete.event.request_id for t in turns)
        assert all(t.response_ids and t.response_ids[-1] == 151645 for t in turns)  # <|im_end|>
        assert all(blobs.exists(t.observation_ref) for t in turns)
        assert complete.event.status == "done" and "evaluation" in complete.event.artifacts
    assert sorted(r.event.trajectory_id for r in rewards) == sorted(by_traj)
    assert all(r.event.score == 1.0 and r.event.scored for r in rewards)

    # Rejudging the history writes a second reward per trajectory, under the new version.
    env = {**cli_env, "SCALECUA_BLOBS": blobs.url}
    res = subprocess.run(
        [*SCALECUA, "rejudge", "--judge-version", "v2", "--from-beginning"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rewards"] == 3 and summary["mean_score"] == 1.0, summary
    rewards = await read_until(bus_settings, "reward", lambda rs: len(rs) >= 6)
    versions = defaultdict(set)
    for r in rewards:
        versions[r.event.trajectory_id].add(r.event.judge_version)
    assert all(v == {"osworld-metrics-v1", "v2"} for v in versions.values())

    # ...and from the archive, once the in-memory log is gone.
    archive = tmp_path / "archive"
    archiver = Archiver(
        ArchiverConfig(root=str(archive), topics=("trajectory-complete",), max_age_s=0.1),
        run_resolver(bus_settings),
    )
    runner = ServiceRunner(archiver, bus_settings)
    task = asyncio.create_task(runner.run(install_signal_handlers=False))
    while archiver.rows_written < 3 and not task.done():
        await asyncio.sleep(0.1)
    runner.stop()
    await asyncio.wait_for(task, 30)
    res = subprocess.run(
        [*SCALECUA, "rejudge", "--judge-version", "v3", "--archive", str(archive)],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rewards"] == 3 and summary["mean_score"] == 1.0, summary


class RecordingTransformersPlayer:
    """Wraps a model player's engine to keep every prompt it was given, in order."""

    def __init__(self, player) -> None:  # noqa: ANN001
        self.prompts: list[list[int]] = []
        engine = player.engine
        generate = engine.generate

        async def recording(requests):  # noqa: ANN001, ANN202
            self.prompts.extend(list(r.prompt_ids) for r in requests)
            return await generate(requests)

        engine.generate = recording


async def test_the_log_re_renders_every_prompt_the_engine_was_given(
    bus_settings: BusSettings, blobs: BlobStore
) -> None:
    from runtime.policy.observation import fit_image
    from runtime.policy.render import Turn, render_history

    player = build_player("tiny", sampling=SamplingParams(temperature=1.0, max_tokens=8))
    recorder = RecordingTransformersPlayer(player)
    async with services(bus_settings, player, blobs, observe="both", image_max_side=480):
        await publish_requests(bus_settings, request_group("mousepad_new_poem", 1, max_steps=3))
        (complete,) = await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1)
    steps = sorted(
        (r.event for r in await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 3)),
        key=lambda s: s.step,
    )
    assert complete.event.status == "max_steps" and len(steps) == 3
    system = blobs.get(steps[0].system_prompt_ref).decode()
    turns: list[Turn] = []
    for step in steps:
        image = fit_image(blobs.get(step.observation_ref), 480)
        assert list(image.size) == step.observation_size
        text = blobs.get(step.observation_text_ref).decode()
        assert text.startswith("Screen elements") and blobs.exists(step.a11y_ref)
        prompt = render_history(
            system, step.instruction, [*turns, Turn(screenshot=image, observation=text)],
            player.processor,
        )  # fmt: skip
        assert prompt.ids == recorder.prompts[step.step], f"turn {step.step} re-renders differently"
        assert step.prompt_tokens == len(prompt.ids)
        assert len(step.response_logprobs) == len(step.response_ids) > 0
        # A random tiny model writes no valid tool call: a failed turn with the reason, not a crash.
        if step.action is None:
            assert step.action_error
        turns.append(
            Turn(screenshot=image, observation=text, response=step.response_text,
                 response_ids=tuple(step.response_ids))
        )  # fmt: skip
    reward = (await read_until(bus_settings, "reward", lambda rs: len(rs) >= 1))[0].event
    assert reward.status == "max_steps" and reward.score == -0.2


TERMINAL_TASK = {
    "id": "test-terminal-marker",
    "instruction": "Read what the terminal says.",
    "config": [
        {
            "type": "launch",
            "parameters": {
                "command": ["xterm", "-e", "sh", "-c", "echo SCALECUA-MARKER-42; exec sh"]
            },
        },
        {"type": "sleep", "parameters": {"seconds": 2}},
    ],
    "evaluator": WAIT_TASK["evaluator"],
}


async def test_smollm2_plays_on_text_observations_that_include_the_terminal(
    bus_settings: BusSettings, blobs: BlobStore
) -> None:
    await publish_task(bus_settings, TERMINAL_TASK)
    player = build_player("smollm2", sampling=SamplingParams(temperature=0.8, max_tokens=24))
    async with services(bus_settings, player, blobs, observe="a11y"):
        await publish_requests(bus_settings, request_group(TERMINAL_TASK["id"], 1, max_steps=2))
        (reward,) = await read_until(bus_settings, "reward", lambda rs: len(rs) >= 1)
    steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 2)
    assert reward.event.scored and reward.event.status in ("max_steps", "done", "fail")
    first = min((r.event for r in steps), key=lambda s: s.step)
    assert first.observation_size == [] and first.response_ids and first.response_logprobs
    text = blobs.get(first.observation_text_ref).decode()
    assert "Terminal (last lines):" in text and "SCALECUA-MARKER-42" in text


def _checkpoint(root: Path, version: int, seed: int) -> str:
    """A trainer checkpoint of the tiny policy (other weights), written as the trainer does."""
    store = CheckpointStore(str(root))
    return store.write(version, lambda out: init_tiny_policy(out, seed=seed), None,
                       {"policy_version": version, "base_policy": "tiny"})  # fmt: skip


async def test_workers_load_announced_weights_and_stamp_steps_with_the_version(
    bus_settings: BusSettings, blobs: BlobStore, tmp_path: Path
) -> None:
    checkpoint = _checkpoint(tmp_path / "ckpt", 1, seed=1)
    player = build_player("tiny", sampling=SamplingParams(temperature=1.0, max_tokens=4))
    root = str(tmp_path / "ckpt")
    async with services(bus_settings, player, blobs, judge=False, checkpoints=root) as runner:
        await publish_requests(bus_settings, request_group("mousepad_new_poem", 1, max_steps=1))
        await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1)
        async with EventProducer(bus_settings) as producer:
            update = PolicyUpdate(policy_version=1, checkpoint_uri=str(checkpoint))
            await producer.send_and_wait("policy-updates", update)
        # An episode that starts before the follower has loaded the announcement plays the
        # old weights (reload between episodes): request the next one once it is loaded.
        async with asyncio.timeout(60):
            while runner.processor.player.policy_version != 1:
                await asyncio.sleep(0.05)
        await publish_requests(bus_settings, request_group("mousepad_new_poem", 1, max_steps=1))
        completes = await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 2)
    versions = sorted(c.event.policy_version for c in completes)
    assert versions == [0, 1]
    steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 2)
    assert sorted(s.event.policy_version for s in steps) == [0, 1]


async def test_policy_updates_that_are_not_the_trainers_are_refused_and_reported(
    bus_settings: BusSettings, blobs: BlobStore, tmp_path: Path
) -> None:
    # Issue 22: PolicyUpdate(999, "/nonexistent") made the scripted worker stamp every later
    # episode as version 999 and never take the trainer's real versions.
    v1 = _checkpoint(tmp_path / "ckpt", 1, seed=1)
    bogus = PolicyUpdate(policy_version=999, checkpoint_uri="/nonexistent")
    async with EventProducer(bus_settings) as producer:  # before the worker starts: catch-up
        await producer.send_and_wait(
            "policy-updates", PolicyUpdate(policy_version=1, checkpoint_uri=v1)
        )
        await producer.send_and_wait("policy-updates", bogus)
    player = ScriptedPlayer(load_processor(resolve_policy("tiny")))
    root = str(tmp_path / "ckpt")
    async with services(bus_settings, player, blobs, judge=False, checkpoints=root) as runner:
        worker = runner.processor

        async def settled(version: int, rejected: int) -> None:
            try:
                async with asyncio.timeout(60):
                    while player.policy_version != version or (
                        worker.stats()["updates_rejected"] != rejected
                    ):
                        await asyncio.sleep(0.05)
            except TimeoutError:
                raise AssertionError(f"version {player.policy_version}, not {version}") from None

        await settled(1, 1)  # the newest (999) refused, the one before it adopted
        async with EventProducer(bus_settings) as producer:  # while it runs
            # A real checkpoint announced under another version, then the trainer's next one.
            await producer.send_and_wait(
                "policy-updates", PolicyUpdate(policy_version=5, checkpoint_uri=v1)
            )
            await settled(1, 2)
            v2 = _checkpoint(tmp_path / "ckpt", 2, seed=2)
            await producer.send_and_wait(
                "policy-updates", PolicyUpdate(policy_version=2, checkpoint_uri=v2)
            )
        await settled(2, 2)
        await publish_requests(bus_settings, request_group("mousepad_new_poem", 1, max_steps=1))
        (complete,) = await read_until(bus_settings, "trajectory-complete", lambda r: len(r) >= 1)
        stats = runner.metrics_snapshot()
    steps = await read_until(bus_settings, "rollout-step", lambda r: len(r) >= 1)
    assert complete.event.policy_version == 2 and {s.event.policy_version for s in steps} == {2}
    assert stats["updates_rejected"] == 2 and stats["updates_adopted"] == 2
    letters = [
        r.event for r in await read_until(bus_settings, "dead-letter", lambda r: len(r) >= 2)
    ]
    assert [d.error_type for d in letters] == ["rejected", "rejected"]
    assert all(d.source_topic == "policy-updates" and d.service == "rollout" for d in letters)
    assert "policy version 999 from '/nonexistent' refused" in letters[0].error
    assert "/nonexistent is not a complete checkpoint" in letters[0].error
    assert f"{v1} holds policy version 1, not 5" in letters[1].error
    assert decode("policy-updates", letters[0].original_value).checkpoint_uri == "/nonexistent"


async def test_an_update_from_outside_the_checkpoint_root_is_refused_and_the_next_adopted(
    bus_settings: BusSettings, blobs: BlobStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 30: PolicyUpdate(901, file:///some/folder/evil-weights) — a folder laid out as a
    # trainer checkpoint of 901, outside the run's checkpoint root — was adopted, and the
    # trainer's next PolicyUpdate(10) was then ignored without a word.
    root = tmp_path / "ckpt"
    evil = _checkpoint(tmp_path / "some" / "folder", 901, seed=3)
    v9, v10 = _checkpoint(root, 9, seed=1), _checkpoint(root, 10, seed=2)
    player = build_player("tiny", sampling=SamplingParams(temperature=1.0, max_tokens=4))
    async with services(
        bus_settings, player, blobs, judge=False, checkpoints=str(root)
    ) as runner:  # fmt: skip
        worker = runner.processor
        async with EventProducer(bus_settings) as producer:
            for version, uri in ((901, f"file://{evil}"), (10, v10)):
                update = PolicyUpdate(policy_version=version, checkpoint_uri=uri)
                await producer.send_and_wait("policy-updates", update)
            async with asyncio.timeout(60):
                while player.policy_version != 10:
                    await asyncio.sleep(0.05)
            caplog.set_level(logging.WARNING, logger="consumers.rollout.service")
            await producer.send_and_wait(
                "policy-updates", PolicyUpdate(policy_version=9, checkpoint_uri=v9)
            )
            async with asyncio.timeout(30):
                while not any("version 9 from" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.05)
        stats = worker.stats()
    assert player.policy_version == 10
    assert stats["updates_adopted"] == 1 and stats["updates_rejected"] == 1
    (letter,) = [
        r.event for r in await read_until(bus_settings, "dead-letter", lambda r: len(r) >= 1)
    ]
    assert letter.error_type == "rejected" and letter.source_topic == "policy-updates"
    assert f"policy version 901 from 'file://{evil}' refused" in letter.error
    assert f"is not under the run's checkpoint root {root}" in letter.error
    (warning,) = [r.getMessage() for r in caplog.records if "version 9 from" in r.getMessage()]
    assert "the worker holds version 10" in warning and "only move forward" in warning


def test_the_cli_services_turn_a_group_of_requests_into_trajectories_and_rewards(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**cli_env, "SCALECUA_BLOBS": str(tmp_path / "blobs")}
    logs = [open(tmp_path / f"{n}.log", "wb") for n in ("rollout", "judge")]  # noqa: SIM115
    procs = [
        subprocess.Popen([*SCALECUA, "rollout", "--policy", "scripted", "--desktops", "2"],
                         env=env, stdout=subprocess.DEVNULL, stderr=logs[0]),
        subprocess.Popen([*SCALECUA, "judge"], env=env, stdout=subprocess.DEVNULL,
                         stderr=logs[1]),
    ]  # fmt: skip
    try:
        res = subprocess.run([*SCALECUA, "request", "mousepad_new_poem", "--n", "4"],
                             env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr
        group = json.loads(res.stdout)["group_id"]

        def tail(topic_name: str, n: int) -> list[dict]:
            out = subprocess.run(
                [*SCALECUA, "tail", topic_name, "--from-beginning", "--max", str(n),
                 "--idle-exit", "150"],
                env=env, capture_output=True, text=True, timeout=200,
            )  # fmt: skip
            return [json.loads(line) for line in out.stdout.splitlines()]

        rewards = tail("reward", 4)
        completes = tail("trajectory-complete", 4)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
    assert len(rewards) == 4 and len(completes) == 4, (tmp_path / "rollout.log").read_text()[-3000:]
    assert {r["group_id"] for r in rewards} == {group}
    assert sorted(r["sample_index"] for r in rewards) == [0, 1, 2, 3]
    assert all(r["score"] == 1.0 for r in rewards)
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]


# -- faults ------------------------------------------------------------------------------


async def _kill_desktops_when(
    settings: BusSettings,
    runner,
    attempts: set[int],  # noqa: ANN001
) -> None:
    """Kill the worker's desktops as soon as step 0 of each listed attempt is logged."""
    from runtime.bus import EventConsumer

    pool = runner.processor.pool
    async with EventConsumer(settings, ["rollout-step"], group_id=None) as consumer:
        tps = await consumer.partitions_of("rollout-step")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        while attempts:
            for r in await consumer.getmany(timeout_ms=100):
                if r.event and r.event.step == 0 and r.event.attempt in attempts:
                    attempts.discard(r.event.attempt)
                    for desktop in pool.desktops:
                        desktop._proc.kill()  # the namespace and everything in it die


@pytest.mark.parametrize("deaths", [1, 2])
async def test_a_desktop_that_dies_mid_episode_is_retried_once_on_a_fresh_one(
    bus_settings: BusSettings, blobs: BlobStore, deaths: int
) -> None:
    await publish_task(bus_settings, WAIT_TASK)
    player = ScriptedPlayer()
    async with services(bus_settings, player, blobs) as runner:
        await publish_requests(bus_settings, request_group(WAIT_TASK["id"], 1, max_steps=10))
        killer = asyncio.create_task(_kill_desktops_when(bus_settings, runner, set(range(deaths))))
        completes = await read_until(bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1)
        rewards = await read_until(bus_settings, "reward", lambda rs: len(rs) >= 1)
        await asyncio.wait_for(killer, 10)
    (complete,) = [c.event for c in completes]
    (reward,) = [r.event for r in rewards]
    steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= deaths + 1)
    attempts = {s.event.trajectory_id: s.event.attempt for s in steps}
    assert sorted(attempts.values())[0] == 0 and complete.trajectory_id != min(
        attempts, key=attempts.get
    ), "a retry must not reuse the failed attempt's trajectory id"
    if deaths == 1:
        assert complete.attempt == 1 and complete.status == "done"
        assert reward.scored and reward.score == 1.0
    else:
        assert complete.status == "error" and "desktop failed on 2 attempts" in complete.error
        assert not reward.scored and "environment failure" in reward.reason


async def test_a_worker_killed_mid_episode_loses_no_request(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    await publish_task(bus_settings, WAIT_TASK)
    env = {**cli_env, "SCALECUA_BLOBS": str(tmp_path / "blobs")}
    argv = [*SCALECUA, "rollout", "--policy", "scripted", "--tokenizer", "none", "--desktops", "1"]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "w1.log", "wb"))  # noqa: SIM115 # fmt: skip
    try:
        await publish_requests(bus_settings, request_group(WAIT_TASK["id"], 1, max_steps=10))
        await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 1)
        first.kill()  # kill -9 mid-episode: its desktop dies with it
        first.wait(10)
        second = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "w2.log", "wb"))  # noqa: SIM115 # fmt: skip
        try:
            completes = await read_until(
                bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1, timeout=180
            )
        finally:
            second.terminate()
            second.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
    (complete,) = [c.event for c in completes]
    steps = await read_until(bus_settings, "rollout-step", lambda rs: len(rs) >= 6)
    trajectories = {s.event.trajectory_id for s in steps}
    assert complete.status == "done" and complete.num_steps == 5
    assert len(trajectories) == 2, "the redelivered request must start a new trajectory"
    partial = trajectories - {complete.trajectory_id}
    assert all(s.event.request_id == complete.request_id for s in steps)
    assert partial and not any(s.event.step >= 4 for s in steps if s.event.trajectory_id in partial)


async def test_an_engine_outage_ends_the_episode_with_a_clear_error_not_a_hang(
    bus_settings: BusSettings, blobs: BlobStore
) -> None:
    from runtime.broker import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    player = build_player("tiny", engine="vllm-http", engine_url=dead, generate_timeout_s=20)
    async with services(bus_settings, player, blobs):
        await publish_requests(bus_settings, request_group("mousepad_new_poem", 1, max_steps=3))
        (complete,) = await read_until(
            bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1, timeout=90
        )
        (reward,) = await read_until(bus_settings, "reward", lambda rs: len(rs) >= 1)
    assert complete.event.status == "error" and "engine unavailable" in complete.event.error
    assert not reward.event.scored


async def test_a_blob_store_outage_ends_the_episode_with_a_clear_error(
    bus_settings: BusSettings, tmp_path: Path
) -> None:
    from runtime.blobstore import open_blob_store

    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)], check=True)
    try:
        blobs = open_blob_store(str(full))
        async with services(bus_settings, ScriptedPlayer(), blobs, judge=False):
            await publish_requests(bus_settings, request_group("mousepad_new_poem", 1))
            (complete,) = await read_until(
                bus_settings, "trajectory-complete", lambda rs: len(rs) >= 1, timeout=90
            )
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)
    assert complete.event.status == "error"
    assert "blob store unavailable" in complete.event.error, complete.event.error
