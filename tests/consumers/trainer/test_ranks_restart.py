"""kill -9 of rank 1 of a two-rank `scalecua train --nproc 2` in the middle of a step: the
group ends, a restart (two ranks under torchrun) resumes from the last announced checkpoint
and the committed offsets, and the checkpoints and their groups equal those of a two-rank
run nobody interrupted."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

from consumers.trainer.checkpoints import METADATA, CheckpointStore
from runtime.blobstore import open_blob_store
from runtime.config import BusSettings
from runtime.policy.model import Policy
from tests.bus_reading import committed, read_until
from tests.consumers.trainer.harness import make_group, publish, wait_while_running

SCALECUA = [sys.executable, "-m", "cli"]


async def test_kill_9_of_rank_1_mid_step_ends_the_group_and_the_restart_trains_as_if_uninterrupted(
    bus_settings: BusSettings, cli_env: dict[str, str], tiny: Policy, tmp_path: Path
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    # Two waves: a step trains exactly one wave, in both runs (the log alone would not fix
    # which groups complete first).
    waves = [
        {g: make_group(tiny, blobs, g, [1.0, 0.0], turns=2, segments=2) for g in ("g0", "g1")},
        {g: make_group(tiny, blobs, g, [0.0, 1.0, 0.5], turns=2, segments=2)
         for g in ("g2", "g3")},
    ]  # fmt: skip
    env = {**cli_env, "SCALECUA_BLOBS": str(tmp_path / "blobs")}

    def train(run: str) -> list[str]:
        return ["train", "--policy", "tiny", "--batch-groups", "2", "--lr", "1e-3",
                "--kl-coef", "0", "--micro-batch-rows", "1", "--group", run,
                "--checkpoints", str(tmp_path / run), "--metrics-interval", "1"]  # fmt: skip

    def command(run: str) -> list[str]:
        return [*SCALECUA, *train(run), "--nproc", "2"]

    def start(run: str, extra: list[str] = ()) -> subprocess.Popen:  # type: ignore[assignment]
        log = open(tmp_path / f"{run}.log", "ab")  # noqa: SIM115 - the process writes it
        return subprocess.Popen([*command(run), *extra], env=env, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip

    def text(run: str) -> str:
        return (tmp_path / f"{run}.log").read_text(errors="replace")

    await publish(bus_settings, [r for g in waves[0].values() for r in g])
    plain = start("plain", ["--max-steps", "2"])
    killed = start("killed")
    try:
        await wait_while_running(lambda: all((tmp_path / r / "v000001" / METADATA).exists()
                                for r in ("plain", "killed")), [plain, killed], 300, "v1")  # fmt: skip
        await publish(bus_settings, [r for g in waves[1].values() for r in g])
        # Rank 1 of the second run starts step 2: kill it there.
        await wait_while_running(lambda: text("killed").count("rank 1: step of") >= 2, [killed], 120,
                    "step 2 on rank 1")  # fmt: skip
        pid = int(re.search(r"rank 1 of 2 \(pid (\d+)\) joined", text("killed")).group(1))
        os.kill(pid, signal.SIGKILL)
        assert await asyncio.to_thread(killed.wait, 60) != 0  # the group ended with it
        assert await asyncio.to_thread(plain.wait, 300) == 0, text("plain")[-3000:]
    finally:
        for proc in (plain, killed):
            if proc.poll() is None:
                proc.kill()
    output = text("killed")
    assert "rank 1 of the trainer" in output and "exited with signal SIGKILL" in output, output[
        -3000:
    ]
    killed_store = CheckpointStore(str(tmp_path / "killed"))
    assert killed_store.versions() == [1]  # step 2 never happened
    # Nothing of wave 2 is committed: its records are read again.
    wave2 = {r.trajectory_id for g in waves[1].values() for r in g}
    records = await read_until(bus_settings, "reward", lambda r: len(r) >= 10, 30)
    offsets = await committed(bus_settings, "killed", "reward")
    assert all(r.offset >= offsets[r.partition] for r in records if r.event.trajectory_id in wave2)

    # The restart is torchrun's: the same group, launched the other way.
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2", "-m",
                "cli", *train("killed")]  # fmt: skip
    restarted = subprocess.run([*torchrun, "--max-steps", "2"], env=env, timeout=300,
                               capture_output=True, text=True)  # fmt: skip
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert "resuming from" in restarted.stderr and "on 2 ranks" in restarted.stderr
    plain_store = CheckpointStore(str(tmp_path / "plain"))
    assert killed_store.versions() == plain_store.versions() == [1, 2]
    for version, wave in ((1, waves[0]), (2, waves[1])):
        ours, theirs = killed_store.metadata(version), plain_store.metadata(version)
        assert ours["groups"] == theirs["groups"] == sorted(wave)
        assert ours["trajectories"] == theirs["trajectories"]
        assert ours["trajectories"] == sorted(r.trajectory_id for g in wave.values() for r in g)
    # The restarted step started from v1's weights and optimizer state, as the plain run's did
    # (a step from anywhere else moves weights by ~lr = 1e-3).
    ours = load_file(str(tmp_path / "killed" / "v000002" / "model.safetensors"))
    theirs = load_file(str(tmp_path / "plain" / "v000002" / "model.safetensors"))
    assert max(float((ours[k] - theirs[k]).abs().max()) for k in theirs) < 1e-4

    def announced(records: list) -> set[int]:  # noqa: ANN001
        return {r.event.policy_version for r in records if "/killed/" in r.event.checkpoint_uri}

    updates = await read_until(bus_settings, "policy-updates", lambda r: announced(r) >= {1, 2})
    assert announced(updates) == {1, 2}
