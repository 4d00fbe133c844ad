"""kill -9 of a `scalecua train` process right after it wrote a checkpoint, before its offsets
were committed; the restart resumes from that checkpoint: no group trained twice, none lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from consumers.trainer.checkpoints import METADATA, CheckpointStore
from runtime.blobstore import open_blob_store
from runtime.config import BusSettings
from runtime.policy.model import Policy
from tests.bus_reading import committed, read_until
from tests.consumers.trainer.harness import make_group, publish, wait_while_running
from topics.events import PolicyUpdate

SCALECUA = [sys.executable, "-m", "cli"]


async def test_kill_9_between_checkpoint_and_commit_trains_every_group_exactly_once(
    bus_settings: BusSettings, cli_env: dict[str, str], tiny: Policy, tmp_path: Path
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    groups = {
        f"g{i}": make_group(tiny, blobs, f"g{i}", [1.0, 0.0, 0.5][: 2 + i % 2]) for i in range(4)
    }
    await publish(bus_settings, [r for g in groups.values() for r in g])
    ckpt = tmp_path / "ckpt"
    env = {**cli_env, "SCALECUA_BLOBS": str(tmp_path / "blobs")}
    command = [*SCALECUA, "train", "--policy", "tiny", "--batch-groups", "2", "--lr", "1e-3",
               "--checkpoints", str(ckpt), "--metrics-interval", "1"]  # fmt: skip
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            await wait_while_running((ckpt / "v000001" / METADATA).exists, [first], 240, "v1")
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
    trained_first = json.loads((ckpt / "v000001" / METADATA).read_text())["groups"]
    assert len(trained_first) == 2
    # The crash window was hit: records of the checkpoint's groups are not committed past.
    pending = []
    for topic_name in ("segment-ready", "reward"):
        offsets = await committed(bus_settings, "trainer", topic_name)
        records = await read_until(
            bus_settings, topic_name,
            lambda r, t=topic_name: len(r) >= _count(groups, t), 30,
        )  # fmt: skip
        pending += [
            r for r in records
            if r.event.group_id in trained_first and r.offset >= offsets[r.partition]
        ]  # fmt: skip
    assert pending, "the trainer committed before it was killed: the test missed its window"

    with open(tmp_path / "second.log", "wb") as log:
        second = subprocess.run(
            [*command, "--max-steps", "2"], env=env, stdout=log, stderr=subprocess.STDOUT,
            timeout=300,
        )  # fmt: skip
    output = (tmp_path / "second.log").read_text()
    assert second.returncode == 0, output[-3000:]
    assert "resuming from" in output and "version 1" in output
    store = CheckpointStore(str(ckpt))
    assert store.versions() == [1, 2]
    metas = [store.metadata(v) for v in (1, 2)]
    first_groups, second_groups = (set(m["groups"]) for m in metas)
    assert not first_groups & second_groups  # none trained twice
    assert first_groups | second_groups == set(groups)  # none lost
    trajectories = [t for m in metas for t in m["trajectories"]]
    assert len(trajectories) == len(set(trajectories)) == sum(len(g) for g in groups.values())
    updates = await read_until(
        bus_settings, "policy-updates",
        lambda r: {u.event.policy_version for u in r} >= {1, 2}, 30,
    )  # fmt: skip
    assert all(isinstance(u.event, PolicyUpdate) for u in updates)
    assert metas[1]["restart"]["finished"] or metas[1]["restart"]["floors"]
    skipped = [json.loads(line.split("metrics ", 1)[1]) for line in output.splitlines()
               if " metrics {" in line]  # fmt: skip
    assert skipped and skipped[-1].get("records_below_floor", 0) + skipped[-1].get(
        "records_late", 0
    ) >= len(pending)


def _count(groups: dict, topic_name: str) -> int:
    rollouts = [r for g in groups.values() for r in g]
    if topic_name == "reward":
        return len(rollouts)
    return sum(len(r.segments) for r in rollouts)
