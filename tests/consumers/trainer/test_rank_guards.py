"""The trainer's process group against a hostile host and a stalled rank (issue 30, findings
2, 8 and 12): its store and gloo listen on loopback only and no child inherits their sockets;
a value forged into the store is refused without being run; a stopped rank is warned about
and ends the group at its deadline; a terminal's Ctrl-C during a two-rank step is a stop.

Every group here is two real ranks over gloo (rank 1 a child process of this one)."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
import torch.distributed as dist

from consumers.trainer.backends import MicroBatch
from consumers.trainer.batching import GroupBook, PlanConfig, pack_micro_batches, plan_group
from consumers.trainer.checkpoints import METADATA
from consumers.trainer.grpo import GRPOConfig, StepObjective
from consumers.trainer.ranks import RankDeadline, RankFailure, RankGroup, RankSpec
from runtime.blobstore import open_blob_store
from runtime.config import BusSettings
from runtime.policy.model import Policy, default_tiny_policy
from tests.consumers.trainer.harness import JUDGE, make_group, publish, wait_while_running

SCALECUA = [sys.executable, "-m", "cli"]
_O_CLOEXEC = 0o2000000


@pytest.fixture
def group() -> Iterator[RankGroup]:
    """Two connected ranks of the torch backend (none built yet)."""
    ranks = RankGroup.spawn(2, RankSpec("torch", {"lr": 1e-3}, threads=1))
    try:
        ranks.connect()
        yield ranks
    finally:
        for proc in ranks.workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        ranks.close()


def _listening(pid: int) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def _sockets(pid: int) -> dict[str, str]:
    """fd -> `socket:[inode]` of a process's sockets."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            out[fd] = link
    return out


def _host_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback."""
    return [
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]


def test_the_store_and_gloo_listen_on_loopback_and_no_child_inherits_their_sockets(
    group: RankGroup,
) -> None:
    (rank1,) = group.workers
    ours = [(ip, port) for ip, port in _listening(os.getpid())]
    assert (("127.0.0.1", group.store.port)) in ours
    for pid in (os.getpid(), rank1.pid):
        assert all(ip == "127.0.0.1" for ip, _ in _listening(pid)), _listening(pid)
    for address in _host_addresses():  # the store's port is not reachable from the network
        with pytest.raises(OSError), socket.create_connection((address, group.store.port), 2):
            pass
    # Every socket of rank 1 is close-on-exec; a child of rank 0 started without closing its
    # descriptors (a shell, a desktop's init) holds none of rank 0's.
    for fd in _sockets(rank1.pid):
        flags = int(Path(f"/proc/{rank1.pid}/fdinfo/{fd}").read_text().split()[3], 8)
        assert flags & _O_CLOEXEC, f"rank 1's socket {fd} is inherited by its children"
    child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        leaked = set(_sockets(child.pid).values()) & set(_sockets(os.getpid()).values())
    finally:
        child.kill()
        child.wait()
    assert not leaked


class _WritesAFile:
    """A pickle that writes a file when it is loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (Path.write_text, (self.path, "written by a forged store value"))


def test_a_forged_status_in_the_store_is_refused_and_runs_nothing(
    group: RankGroup, tmp_path: Path
) -> None:
    (rank1,) = group.workers
    marker = tmp_path / "pwned"
    # Another process on the host writes rank 1's status of the next call before rank 1 can
    # (rank 1 stays in the call: its setup waits for a signal).
    intruder = dist.TCPStore("127.0.0.1", group.store.port, is_master=False,
                             timeout=timedelta(seconds=10))  # fmt: skip
    intruder.set("scalecua/status/1/1", pickle.dumps(_WritesAFile(marker)))
    with pytest.raises(RankFailure, match="status of rank 1 .* is not the ranks' protocol"):
        group.backend(RankSpec("torch", {"lr": 1e-3}, setup="signal:pause"))
    assert not marker.exists()
    assert group.broken
    rank1.kill()


def _text_batches(tiny: Policy) -> tuple[list[MicroBatch], StepObjective]:
    book = GroupBook(JUDGE)
    for offset, rollout in enumerate(make_group(tiny, None, "g", [1.0, 0.0], image_size=None)):
        for s in rollout.segments:
            book.add_segment(s, ("segment-ready", 0), offset * 10 + s.segment_index)
        book.add_reward(rollout.reward, ("reward", 0), offset)
    samples = plan_group(book.pending["g"], 0, PlanConfig()).samples
    objective = StepObjective("grpo", sum(s.tokens for s in samples), GRPOConfig(kl_coef=0.0))
    return pack_micro_batches(samples, 10_000, 1), objective


def test_a_stopped_rank_is_warned_about_and_ends_the_group_at_its_deadline(
    tiny: Policy, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 30: SIGSTOP of rank 1 mid-step left the trainer waiting 30 minutes (gloo's
    # timeout), with nothing said. Deadline: 4 x the step's time at the slowest rate so far
    # (the same batches: 4 x the first step's time; floor 1 s).
    batches, objective = _text_batches(tiny)
    deadline = RankDeadline(factor=4.0, floor_s=1.0, unmeasured_s=300.0, warn_s=0.2)
    group = RankGroup.spawn(2, RankSpec("torch", {"lr": 1e-3}, threads=1), deadline)
    (rank1,) = group.workers
    try:
        group.connect()
        backend = group.backend()
        backend.load(default_tiny_policy())
        started = time.monotonic()
        backend.step(batches, objective, lambda s: [])
        slowest = time.monotonic() - started
        outcome: list[BaseException | None] = []

        def second_step() -> None:
            try:
                backend.step(batches, objective, lambda s: [])
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - examined below
                outcome.append(exc)

        caplog.set_level(logging.WARNING, logger="consumers.trainer.ranks")
        worker = threading.Thread(target=second_step)
        started = time.monotonic()
        worker.start()
        time.sleep(min(0.1, slowest / 4))
        os.kill(rank1.pid, signal.SIGSTOP)
        seen_late = 0.0
        while worker.is_alive() and time.monotonic() - started < 4 * slowest + 30:
            seen_late = max(seen_late, backend.group_stats()["ranks_late"])
            time.sleep(0.05)
        took = time.monotonic() - started
        if worker.is_alive():  # still waiting: say where, then unblock it to end the test
            frame = sys._current_frames().get(worker.ident or 0)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "?"
            rank1.kill()
            worker.join(60)
            pytest.fail(
                f"the step was still waiting on the stopped rank after {took:.0f} s "
                f"(ended after the kill: {not worker.is_alive()}); it waited at:\n{stack}"
            )
    finally:
        if rank1.poll() is None:
            os.kill(rank1.pid, signal.SIGCONT)
        group.close()
    (error,) = outcome
    assert isinstance(error, RankFailure), repr(error)
    assert "step ran past its deadline" in str(error)
    assert f"rank 1 (pid {rank1.pid}) is stopped" in str(error)
    assert took < 4 * slowest + 10
    assert rank1.poll() is not None  # ended as a crash ends it
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("step has run" in w and "is stopped" in w for w in warnings), warnings
    assert seen_late == 1


async def test_ctrl_c_during_a_two_rank_step_is_a_stop_not_a_rank_failure(
    bus_settings: BusSettings, cli_env: dict[str, str], tiny: Policy, tmp_path: Path
) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    await publish(bus_settings, [r for g in ("g0", "g1")
                                 for r in make_group(tiny, blobs, g, [1.0, 0.0])])  # fmt: skip
    ckpt = tmp_path / "ckpt"
    command = [*SCALECUA, "train", "--policy", "tiny", "--batch-groups", "2", "--nproc", "2",
               "--checkpoints", str(ckpt), "--kl-coef", "0"]  # fmt: skip
    env = {**cli_env, "SCALECUA_BLOBS": str(tmp_path / "blobs")}
    log_path = tmp_path / "train.log"
    with open(log_path, "wb") as out:
        # Its own session: the process group a terminal's Ctrl-C is sent to.
        trainer = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        await wait_while_running(lambda: "rank 1: step of" in log_path.read_text(), [trainer],
                                 240, "a step on rank 1")  # fmt: skip
        os.killpg(trainer.pid, signal.SIGINT)
        code = trainer.wait(120)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
    output = log_path.read_text()
    assert code == 0, output[-3000:]
    assert "RankFailure" not in output and "SIGINT" not in output, output[-3000:]
    assert (ckpt / "v000001" / METADATA).exists()  # the step in flight finished and was written
