"""The trainer service against the real broker and the real tiny model: joins, one step, a
loadable checkpoint, the policy update, commits that hold exactly the unfinished groups, SFT,
resuming from S3, and a corrupt screenshot."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest
import torch

from consumers.trainer.backends import make_backend
from consumers.trainer.batching import PlanConfig
from consumers.trainer.checkpoints import METADATA, CheckpointStore
from consumers.trainer.service import Trainer, TrainerConfig
from consumers.trainer.startup import trainer_service
from runtime.blobstore import BlobStore
from runtime.bus import EventProducer, Record
from runtime.config import BusSettings
from runtime.errors import ConfigError
from runtime.policy.model import Policy, load_policy
from tests.bus_reading import committed, read_until
from tests.consumers.trainer.harness import make_group, make_rollout, publish
from topics.events import PolicyUpdate, Reward


async def test_the_trainer_trains_complete_groups_and_announces_a_loadable_checkpoint(
    bus_settings: BusSettings, tiny: Policy, blobs: BlobStore, tmp_path: Path
) -> None:
    with_images = make_group(tiny, blobs, "ga", [1.0, 0.0], segments=2)
    text_only = make_group(tiny, None, "gb", [1.0, 0.0, None], image_size=None)  # one env failure
    incomplete = make_group(tiny, blobs, "gc", [1.0, 0.0])[:1]  # its second reward never comes
    # Sample 1 of gb played again (a redelivered request): the first reward read wins.
    replay = make_rollout(tiny, None, group_id="gb", sample_index=1, group_size=3, score=1.0,
                          image_size=None, seed=999)  # fmt: skip
    first = with_images[0].reward
    rejudged = Reward(**{**{f: getattr(first, f) for f in first.__struct_fields__},
                         "judge_version": "v0", "score": 0.25, "event_id": "x"})  # fmt: skip
    await publish(bus_settings, incomplete + with_images, rewards_first=True)
    await publish(bus_settings, text_only)
    await publish(bus_settings, [replay])
    config = TrainerConfig(
        checkpoints=str(tmp_path / "ckpt"), batch_groups=2, micro_batch_tokens=2048,
        micro_batch_rows=2,
    )  # fmt: skip
    async with trainer_service(
        bus_settings, config, backend_options={"lr": 1e-3}, blobs=blobs
    ) as runner:
        trainer = runner.processor
        assert trainer.version == 0
        async with EventProducer(bus_settings) as producer:  # rejudged under another version
            await producer.wait_acks([await producer.send("reward", rejudged)])
        before = {k: v.clone() for k, v in trainer.backend.model.state_dict().items()}
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        records = await read_until(bus_settings, "policy-updates", lambda r: len(r) >= 1, 180)
        for _ in range(100):  # the commit follows the update's acknowledgement
            if trainer.stats().get("groups_trained") == 2 and not trainer._release:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        stats = runner.metrics_snapshot()
        runner.stop()
        await asyncio.wait_for(task, 60)
    update = records[0].event
    assert isinstance(update, PolicyUpdate) and update.policy_version == 1
    assert update.checkpoint_uri == str(tmp_path / "ckpt" / "v000001")
    # It names what it trained (for `scalecua trace`): both groups, each scored rollout's advantage.
    assert update.groups == ["ga", "gb"]
    assert sorted(round(a, 3) for a in update.advantages.values()) == [-0.707] * 2 + [0.707] * 2
    for key in (
        "loss",
        "kl",
        "entropy",
        "clip_frac",
        "tokens",
        "segments",
        "adv_mean",
        "step_time_s",
        "sequence_tokens",
        "computed_tokens",
    ):
        assert key in update.metrics, key
    assert update.metrics["groups"] == 2 and update.metrics["env_failures"] == 1
    # What the step's groups scored (1, 0 and 1, 0; the env failure has no score): `up`'s curve.
    assert update.metrics["pass_rate"] == 0.5 and update.metrics["reward_mean"] == 0.5
    # The tiny policy sees images: no prefix sharing, every row padded to its pass's longest.
    assert update.metrics["computed_tokens"] >= update.metrics["sequence_tokens"] > 0
    # The checkpoint is an HF folder the policy loader reads, with the trained weights.
    meta = json.loads((Path(update.checkpoint_uri) / METADATA).read_text())
    assert meta["groups"] == ["ga", "gb"] and meta["policy_version"] == 1
    assert replay.trajectory_id not in meta["trajectories"] and len(meta["trajectories"]) == 4
    assert CheckpointStore(str(tmp_path / "ckpt")).latest().version == 1
    loaded = load_policy(update.checkpoint_uri).model.state_dict()
    text = [k for k in before if ".language_model." in k]
    assert sum(not torch.equal(before[k], loaded[k]) for k in text) > len(text) // 2
    assert all(torch.equal(before[k], loaded[k]) for k in before if ".visual." in k)
    # Counters: the other judge's reward, the replayed trajectory, the env failure.
    assert stats["rewards_other_judge"] == 1 and stats["trajectories_duplicate"] == 1
    assert stats["rollouts_env_failed"] == 1 and stats["groups_trained"] == 2
    assert stats["groups_all_equal"] == 0
    assert stats["groups_pending"] == 1 and stats["steps"] == 1 and stats["consumed"] > 0
    # Commits: everything of ga and gb is past; gc's records are still held.
    for topic_name in ("segment-ready", "reward"):
        everything = await read_until(
            bus_settings, topic_name,
            lambda r, t=topic_name: len(r) >= _count(t, incomplete, with_images, text_only, replay),
            30,
        )  # fmt: skip
        offsets = await committed(bus_settings, "trainer", topic_name)
        for partition in {r.partition for r in everything}:
            mine = [r for r in everything if r.partition == partition]
            held = [r.offset for r in mine if r.event.group_id == "gc"]
            expected = min(held) if held else max(r.offset for r in mine) + 1
            assert offsets[partition] == expected, (topic_name, partition, offsets, expected)


def _count(topic_name: str, *parts) -> int:  # noqa: ANN002
    rollouts = [r for p in parts for r in (p if isinstance(p, list) else [p])]
    if topic_name == "reward":
        return len(rollouts) + 1  # and the other judge's
    return sum(len(r.segments) for r in rollouts)


async def test_a_stopped_trainer_resumes_from_its_s3_checkpoints(
    bus_settings: BusSettings, tiny: Policy, blobs: BlobStore, s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket="resume"
    )
    await publish(bus_settings, make_group(tiny, blobs, "g1", [1.0, 0.0], turns=1))
    config = TrainerConfig(checkpoints="s3://resume/ckpt", batch_groups=1, max_steps=1)
    async with trainer_service(
        bus_settings, config, backend_options={"lr": 1e-3}, blobs=blobs
    ) as runner:
        await asyncio.wait_for(runner.run(install_signal_handlers=False), 120)  # stops at max_steps
        trained = {k: v.clone() for k, v in runner.processor.backend.model.state_dict().items()}
    async with trainer_service(bus_settings, config, blobs=blobs) as runner:
        trainer = runner.processor
        assert trainer.version == 1 and trainer.steps == 1
        assert trainer._outbox == []  # version 1 is on policy-updates already
        weights = trainer.backend.model.state_dict()
        assert all(torch.equal(weights[k], v) for k, v in trained.items())
        steps = {float(s["step"]) for s in trainer.backend.optimizer.state_dict()["state"].values()}
        assert steps == {1.0}  # the AdamW moments came back too
    updates = await read_until(bus_settings, "policy-updates", lambda r: len(r) >= 1, 10)
    assert [u.event.checkpoint_uri for u in updates] == ["s3://resume/ckpt/v000001"]


async def test_sft_trains_scripted_successes_that_grpo_leaves_out(
    bus_settings: BusSettings, tiny: Policy, blobs: BlobStore, tmp_path: Path
) -> None:
    rollouts = make_group(tiny, blobs, "scripted", [1.0, 1.0, 0.0], turns=1)
    for rollout in rollouts:  # a scripted policy's turns: no sampling, no logprobs
        rollout.segments = [
            msgspec.structs.replace(s, sampled=False, logprobs=[0.0] * len(s.logprobs))
            for s in rollout.segments
        ]
    await publish(bus_settings, rollouts)
    grpo = TrainerConfig(checkpoints=str(tmp_path / "grpo"), batch_groups=1, group_id="t-grpo")
    async with trainer_service(bus_settings, grpo, blobs=blobs) as runner:
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        for _ in range(300):
            if runner.processor.stats().get("groups_without_samples"):
                break
            await asyncio.sleep(0.1)
        stats = runner.processor.stats()
        runner.stop()
        await asyncio.wait_for(task, 60)
    assert stats["rollouts_unsampled"] == 3 and stats["steps"] == 0
    sft = TrainerConfig(
        checkpoints=str(tmp_path / "sft"), batch_groups=1, group_id="t-sft", max_steps=1,
        plan=PlanConfig(objective="sft", sft_threshold=1.0), keep_states=0,
    )  # fmt: skip
    async with trainer_service(
        bus_settings, sft, backend_options={"lr": 1e-3}, blobs=blobs
    ) as runner:
        await asyncio.wait_for(runner.run(install_signal_handlers=False), 120)
        stats = runner.processor.stats()
    meta = CheckpointStore(str(tmp_path / "sft")).latest().metadata
    assert meta["objective"] == "sft" and len(meta["trajectories"]) == 2  # the two successes
    assert meta["metrics"]["nll"] > 0 and stats["rollouts_below_threshold"] == 1
    assert not (tmp_path / "sft" / "state").exists()  # keep_states=0: no optimizer state


async def test_a_corrupt_screenshot_turns_its_rollout_into_an_environment_failure(
    tiny: Policy, blobs: BlobStore, tmp_path: Path
) -> None:
    rollouts = make_group(tiny, blobs, "g", [1.0, 0.0, 0.5], turns=1)
    digest = rollouts[1].segments[0].image_refs[0].removeprefix("sha256:")
    (Path(blobs.root) / digest[:2] / digest).write_bytes(b"not the screenshot")
    config = TrainerConfig(checkpoints=str(tmp_path / "ckpt"), batch_groups=1)
    trainer = Trainer(config, make_backend("torch"), blobs, CheckpointStore(config.checkpoints))
    trainer.load()
    events = [(e, "segment-ready") for r in rollouts for e in r.segments]
    events += [(r.reward, "reward") for r in rollouts]
    for offset, (event, topic_name) in enumerate(events):
        await trainer.process(Record(topic_name, 0, offset, None, None, 0, event))
    outputs = []
    for _ in range(600):
        outputs += await trainer.tick()
        if outputs:
            break
        await asyncio.sleep(0.05)
    (update,) = [o.event for o in outputs]
    assert update.policy_version == 1 and update.metrics["env_failures"] == 1
    stats = trainer.stats()
    assert stats["rollouts_missing_images"] == 1 and stats["groups_trained"] == 1
    meta = CheckpointStore(config.checkpoints).latest().metadata
    assert rollouts[1].trajectory_id not in meta["trajectories"] and len(meta["trajectories"]) == 2


def test_keeping_a_single_checkpoint_is_refused(blobs: BlobStore, tmp_path: Path) -> None:
    """A restart resumes from the last announced version while the next is being written."""
    config = TrainerConfig(checkpoints=str(tmp_path / "ckpt"), keep_checkpoints=1)
    with pytest.raises(ConfigError, match="keep_checkpoints = 1"):
        Trainer(config, make_backend("torch"), blobs, CheckpointStore(config.checkpoints))
