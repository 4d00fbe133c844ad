"""The trainer across ranks: one process group, rank 0 drives, every rank computes.

    rank 0 (the trainer service)                      ranks 1..N-1
    consumes, joins groups, forms the step's batch
    backend.step(batches, loss, images) ──broadcast──▶ backend.step(batches, loss, their images)
        all ranks step together (FSDP2, or megatron's TP/PP/DP), gradients summed
    checkpoint written by rank 0 (weights gathered)    take part in the gathers
    announce on policy-updates, then commit offsets   wait for the next call

A backend is SPMD (every rank calls `load`, `step`, `save` ... with the same arguments);
`DrivenBackend` is that backend as the service on rank 0 sees it: each call is broadcast
to the other ranks (`serve` runs their loop), made on rank 0 too, and its outcome agreed on.
The service keeps its one-process order — train, write the checkpoint, announce it, commit
— because only rank 0 talks to the log and the checkpoint store.

A rank's screenshots come from the blob store (the same store, by URL), loaded by the
rank that trains them, once per step (consumers/trainer/backends/step_images.py).

Failures end the group: a rank that dies (kill -9, out of memory) breaks rank 0's next
collective or is seen gone by its parent, and a call whose outcome the ranks do not share
leaves them out of step (another rank raised what rank 0 did not, or never finished what
rank 0 gave up on). An error of rank 0's alone after every rank finished the call (writing
the checkpoint, which only rank 0 does) is an ordinary error: the group is in step. Either way rank 0 raises
`RankFailure`; the service stops without finishing, releasing or committing the step's
groups, and the other ranks are stopped. A restart resumes from the last announced
checkpoint and the committed offsets, as after a kill -9 of a one-process trainer: nothing
trained twice, nothing skipped. Errors the ranks agree on (a non-finite step, a missing
screenshot) are ordinary: every rank raised the same one and the group goes on.

A rank that stops without dying (SIGSTOP, a hung driver) is caught by the clock: every call
has a deadline derived from the slowest calls of its kind so far, scaled to its size (a
step's tokens; `rank_deadline.py`); past twice the expected time it is late (warned,
`ranks_late`), past the deadline the group is ended as a crash ends it (the spawned ranks
are killed, which breaks rank 0's collectives at once).

Launch: `scalecua train --nproc N` spawns ranks 1..N-1 itself (`python -m
consumers.trainer.ranks`, killed with their parent, in a process group of their own so a
terminal's Ctrl-C reaches rank 0 alone, which stops the group in order), or `torchrun
--nproc-per-node N -m cli train ...` starts N copies and the ranks above 0 serve.
gloo on CPU, NCCL on GPUs. Every rank must see the checkpoint folders rank 0 names (one
node, or a shared filesystem).

Trust: the ranks rendezvous on a TCP store that any process reaching its port can write,
so nothing read from it is unpickled: a rank's status is JSON, checked field by field, and
anything else ends the group. A spawned group's store and gloo sockets listen on 127.0.0.1
only (torch's store would listen on every interface); under torchrun the store is
torchrun's and gloo binds `GLOO_SOCKET_IFNAME` (loopback when MASTER_ADDR is), so across
hosts the rendezvous port must be firewalled (docs/trainer.md). Every socket of a rank is
close-on-exec (gloo opens its own inheritable), so no child of a rank inherits one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec

from consumers.trainer.backends import make_backend
from consumers.trainer.rank_deadline import CallClock, RankDeadline, Verdict
from consumers.trainer.rank_wire import (
    MESSAGE_CHARS,
    RankStatus,
    bind_collectives_to_loopback,
    bind_torchrun_collectives,
    loopback_store,
    no_inherited_sockets,
    process_state,
    read_status,
)
from consumers.trainer.shared_prefix import batch_cost
from runtime.errors import ConfigError, ScaleCUAError
from runtime.service_logs import child_log_path

__all__ = [
    "RankFailure",
    "RankSpec",
    "RankDeadline",
    "RankGroup",
    "DrivenBackend",
    "torchrun_rank",
    "serve",
    "main",
]

log = logging.getLogger(__name__)

_SPEC_ENV = "SCALECUA_RANK_SPEC"
_PARENT_ENV = "SCALECUA_RANK_PARENT"
_STATUS = "scalecua/status/{seq}/{rank}"
_JOINED = "scalecua/joined/{rank}"
_WATCH_S = 0.25  # how often the clock of the call in flight is read
_STUCK_EXIT_S = 30.0  # torchrun: rank 0 still stuck this long after a deadline exits
_COLLECTIVE_GRACE_S = 5.0  # rank 0's collectives time out this long after the call's deadline
_STUCK_SAY_S = 10.0  # rank 0 still in its call this long after a deadline: its stack is logged


class RankFailure(ScaleCUAError):
    """A rank of the trainer's process group died or fell out of step: the group is over."""


@dataclass(frozen=True)
class RankSpec:
    """What every rank builds: the backend, its options, where its screenshots come from."""

    backend: str = "torch"
    options: dict[str, Any] = field(default_factory=dict)  # the backend's config
    blobs: str | None = None  # blob store URL the other ranks load screenshots from
    setup: str | None = None  # "module:function" ranks above 0 call before building a backend
    threads: int = 0  # torch CPU threads per rank (0: torch's default)

    @property
    def device(self) -> str:
        """The backend's device."""
        return str(self.options.get("device", "cpu"))

    @property
    def dist_backend(self) -> str:
        """gloo on CPU, NCCL on GPUs."""
        return "nccl" if self.device.startswith("cuda") else "gloo"


def torchrun_rank() -> tuple[int, int] | None:
    """(rank, world size) when torchrun (or another launcher setting RANK) started us."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def _encode_spec(spec: RankSpec) -> str:
    return msgspec.json.encode(spec).decode()


def _decode_spec(text: str) -> RankSpec:
    try:
        return msgspec.json.decode(text, type=RankSpec)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"${_SPEC_ENV} is not a rank spec: {exc}") from None


def _call_setup(setup: str | None) -> None:
    if setup:
        import importlib

        module, _, function = setup.partition(":")
        getattr(importlib.import_module(module), function)()


def _images_for(spec: RankSpec) -> Any:
    """The screenshot loader of a rank above 0 (from the blob store the spec names)."""
    if spec.blobs is None:
        return lambda sample: []
    from consumers.trainer.screenshots import load_images
    from runtime.blobstore import open_blob_store

    blobs = open_blob_store(spec.blobs)
    return lambda sample: load_images(blobs, sample)


class RankGroup:
    """This process as rank 0 of the trainer's process group, and the ranks it drives."""

    def __init__(
        self, world_size: int, spec: RankSpec, deadline: RankDeadline | None = None
    ) -> None:
        self.world_size = world_size
        self.spec = spec
        self.workers: list[subprocess.Popen] = []  # ranks 1.. when this process spawned them
        self.store: Any = None
        self.broken = False
        self.clock = CallClock(deadline or RankDeadline())  # times the calls it drives
        self.late = 0  # ranks the call in flight waits on past its late mark (0: on time)
        self._seq = 0
        self._backend: DrivenBackend | None = None
        self._waiting_on: list[int] = []  # ranks yet to report the call rank 0 finished
        self._caller = threading.get_ident()  # the thread making the call in flight
        self._expired: str | None = None  # why the clock ended the group
        self._closed = threading.Event()

    # -- starting -------------------------------------------------------------------------
    @classmethod
    def spawn(cls, nproc: int, spec: RankSpec, deadline: RankDeadline | None = None) -> RankGroup:
        """Start ranks 1..nproc-1 as child processes (call `connect` next; main thread only:
        the children die with the thread that started them)."""
        if nproc < 2:
            raise ConfigError("a process group of the trainer has at least 2 ranks")
        if torchrun_rank() is not None:
            raise ConfigError("under torchrun the process group is torchrun's: drop --nproc")
        group = cls(nproc, spec, deadline)
        group.store = loopback_store(nproc)
        bind_collectives_to_loopback()  # rank 0's own gloo sockets (the children's: env)
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH", "")
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(group.store.port),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            _SPEC_ENV: _encode_spec(spec),
            _PARENT_ENV: str(os.getpid()),
            # The same code as this rank, wherever the package is imported from.
            "PYTHONPATH": package_root + (os.pathsep + path if path else ""),
        }
        for rank in range(1, nproc):
            env_rank = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            # Under `scalecua up` a rank's lines go next to its service's log, not the console.
            log_path = child_log_path(f"rank{rank}")
            out = None if log_path is None else log_path.open("a", encoding="utf-8")
            try:
                group.workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "consumers.trainer.ranks"],
                        env=env_rank,
                        stdout=out,
                        stderr=out,
                        # A terminal's Ctrl-C goes to its foreground process group: rank 0
                        # alone gets it and stops the group in order.
                        process_group=0,
                    )  # fmt: skip
                )
            finally:
                if out is not None:
                    out.close()  # the child holds its own copy
        log.info("trainer: started ranks 1-%d of %d (pids %s)", nproc - 1, nproc,
                 ", ".join(str(p.pid) for p in group.workers))  # fmt: skip
        return group

    def connect(self, timeout_s: float = 600.0) -> None:
        """Wait for every spawned rank to join, then start the process group (blocking)."""
        import torch.distributed as dist

        keys = [_JOINED.format(rank=r) for r in range(1, self.world_size)]
        deadline = time.monotonic() + timeout_s
        while not self.store.check(keys):
            self.check()
            if time.monotonic() > deadline:
                self.close()
                raise RankFailure(f"the trainer's ranks did not join within {timeout_s:.0f} s")
            time.sleep(0.05)
        dist.init_process_group(self.spec.dist_backend, store=self.store, rank=0,
                                world_size=self.world_size)  # fmt: skip
        no_inherited_sockets()
        self._start_watch()
        log.info("trainer: rank 0 of %d, process group up (%s)", self.world_size,
                 self.spec.dist_backend)  # fmt: skip

    @classmethod
    def join(cls, spec: RankSpec, deadline: RankDeadline | None = None) -> RankGroup:
        """Rank 0 of a group torchrun started (the other ranks run `serve`)."""
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _get_default_store

        found = torchrun_rank()
        if found is None or found[0] != 0:
            raise ConfigError("RankGroup.join is rank 0's; the other ranks serve")
        group = cls(found[1], spec, deadline)
        if not dist.is_initialized():
            bind_torchrun_collectives()
            dist.init_process_group(spec.dist_backend)
        group.store = _get_default_store()
        no_inherited_sockets()
        group._start_watch()
        return group

    # -- using ----------------------------------------------------------------------------
    def backend(self, spec: RankSpec | None = None) -> DrivenBackend:
        """Build the spec's backend on every rank (replacing the one before) and drive it."""
        spec = spec or self.spec
        if self._backend is not None:
            self._backend.close()
        self._command("use", spec)
        try:
            local = make_backend(spec.backend, **spec.options)
        except Exception as exc:
            self._outcome("use", exc)
            raise
        self._outcome("use", None)
        self._backend = DrivenBackend(self, local)
        return self._backend

    def check(self) -> None:
        """Raise RankFailure if a rank this process started has exited, or the call in flight
        ran past its deadline."""
        if self._expired is not None:
            raise RankFailure(self._expired)
        for rank, proc in enumerate(self.workers, start=1):
            code = proc.poll()
            if code is not None:
                self.broken = True
                raise RankFailure(f"rank {rank} of the trainer (pid {proc.pid}) exited with "
                                  f"{_exit_text(code)}: the process group is over")  # fmt: skip

    def close(self) -> None:
        """Stop the other ranks (asked nicely when the group is healthy) and the group."""
        import torch.distributed as dist

        self._closed.set()
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        if dist.is_initialized() and not self.broken:
            try:
                self._command("exit", None)
            except RankFailure:
                pass
        for proc in self.workers:
            try:
                proc.wait(timeout=30 if not self.broken else 5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if dist.is_initialized():
            dist.destroy_process_group()

    def stats(self) -> dict[str, float]:
        """The call in flight: how long it has run (0 when idle) and how many ranks are late."""
        verdict = self.clock.verdict()
        return {
            "rank_call_s": 0.0 if verdict is None else verdict.elapsed_s,
            "ranks_late": float(self.late),
        }

    # -- the protocol ---------------------------------------------------------------------
    def _command(self, method: str, payload: Any, size: float = 1.0) -> None:
        """Send a call to the other ranks (they make it and report how it went); `size` is
        its work in the units its kind is timed by (a step's tokens)."""
        import torch.distributed as dist

        if self.broken:
            raise RankFailure("the trainer's process group is over (an earlier rank failure)")
        self.check()
        self._seq += 1
        self._caller = threading.get_ident()  # whose stack to show if the call never returns
        if method != "exit":
            self.clock.start(method if method == "use" else payload[0], size)
            verdict = self.clock.verdict()
            if verdict is not None:
                _bound_collectives(verdict.deadline_s + _COLLECTIVE_GRACE_S)
        try:
            dist.broadcast_object_list([(self._seq, method, payload)], src=0)
        except RuntimeError as exc:  # a rank is gone: its connection closed under us
            self.clock.finish(succeeded=False)
            self.broken = True
            self.check()  # the clock's reason, when it ended the group
            raise RankFailure(f"sending {method} to the trainer's ranks failed: {exc}") from exc

    def _outcome(self, method: str, error: BaseException | None) -> None:
        """Compare rank 0's outcome of the last call with every other rank's: raise rank 0's
        error when the group is still in step, RankFailure when it is not."""
        succeeded = False
        try:
            self._agree(method, error)
            succeeded = error is None
        finally:
            self.clock.finish(succeeded)
            self._waiting_on = []
            no_inherited_sockets()  # a call may have opened sockets (a backend's new groups)

    def _agree(self, method: str, error: BaseException | None) -> None:
        keys = {r: _STATUS.format(seq=self._seq, rank=r) for r in range(1, self.world_size)}
        # A rank that agreed on rank 0's error reports at once; one still computing what
        # rank 0 gave up on would never report.
        deadline = None if error is None else time.monotonic() + 120.0
        look = time.monotonic() + 1.0  # when to note which ranks have not reported
        while not self.store.check(list(keys.values())):
            try:
                self.check()
            except RankFailure as gone:
                if error is not None:
                    raise RankFailure(f"{gone} ({method} failed on rank 0: {error!r})") from error
                raise
            if deadline is not None and time.monotonic() > deadline:
                self.broken = True
                raise RankFailure(f"{method} failed on rank 0 ({error!r}) but not on every "
                                  "rank: the ranks are out of step") from error  # fmt: skip
            if time.monotonic() > look:
                look = time.monotonic() + 1.0
                self._waiting_on = [r for r, k in keys.items() if not self.store.check([k])]
            time.sleep(0.01)
        statuses: dict[int, RankStatus] = {}
        for rank, key in keys.items():
            try:
                statuses[rank] = read_status(self.store.get(key), self._seq, rank)
            except ValueError as exc:  # anyone reaching the store could have written it
                self.broken = True
                raise RankFailure(
                    f"{method}: the status of rank {rank} in the trainer's store is not the "
                    f"ranks' protocol ({exc}): refused, and the process group is over"
                ) from error
        for key in keys.values():
            self.store.delete_key(key)
        failed = {r: s for r, s in statuses.items() if s.error_type is not None}
        if error is not None:
            # Every other rank finished the call's collectives, so rank 0 did too: its
            # error came after them (a checkpoint rank 0 alone writes) or every rank raised
            # the same one (a step the ranks agreed to skip). The group is in step.
            if all(s.error_type == type(error).__name__ for s in failed.values()):
                raise error
        elif not failed:
            return
        self.broken = True
        rank, status = next(iter(failed.items()))
        raise RankFailure(f"{method}: rank {rank} raised {status.error_type}: "
                          f"{status.message[:500]} while rank 0 "
                          f"{'succeeded' if error is None else f'raised {error!r}'}: "
                          "the ranks are out of step") from error  # fmt: skip

    # -- the clock ------------------------------------------------------------------------
    def _start_watch(self) -> None:
        threading.Thread(target=self._watch, name="trainer-ranks-clock", daemon=True).start()

    def _watch(self) -> None:
        """Judge the call in flight: warn while it is late, end the group at its deadline."""
        warn_next = 0.0
        while not self._closed.wait(_WATCH_S):
            verdict = self.clock.verdict()
            if verdict is None or not verdict.late or self._expired is not None:
                self.late, warn_next = 0, 0.0
                continue
            laggards = self._laggards()
            self.late = max(1, len(laggards))
            who = "; ".join(laggards) or "no rank is stopped or gone: every rank is in the call"
            if verdict.expired:
                self._expire(verdict, who)
                return
            if time.monotonic() >= warn_next:
                warn_next = time.monotonic() + self.clock.deadline.warn_s
                log.warning("trainer: %s has run %.0f s (%s); %s; the process group ends at "
                            "%.0f s", verdict.kind, verdict.elapsed_s, _usual(verdict), who,
                            verdict.deadline_s)  # fmt: skip

    def _laggards(self) -> list[str]:
        """The spawned ranks that are stopped or gone, and the ranks yet to report the call."""
        out = []
        for rank, proc in enumerate(self.workers, start=1):
            state = process_state(proc.pid)
            if state in ("T", "t"):
                out.append(f"rank {rank} (pid {proc.pid}) is stopped")
            elif state is None or state in ("Z", "X"):
                out.append(f"rank {rank} (pid {proc.pid}) is gone")
        named = {int(text.split()[1]) for text in out}
        out += [f"rank {r} has not reported" for r in self._waiting_on if r not in named]
        return out

    def _expire(self, verdict: Verdict, who: str) -> None:
        """End the group as a crash does: its calls raise RankFailure, the spawned ranks die."""
        self._expired = (
            f"{verdict.kind} ran past its deadline of {verdict.deadline_s:.0f} s "
            f"({_usual(verdict)}): {who}; the trainer's process group is over"
        )
        self.broken = True
        log.error("trainer: %s", self._expired)
        for proc in self.workers:  # their connections close: rank 0's collectives fail at once
            if proc.poll() is None:
                try:  # the rank's whole process group: no descendant keeps its sockets open
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
        if not self._closed.wait(_STUCK_SAY_S) and self.clock.call:
            frame = sys._current_frames().get(self._caller)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(gone)"
            log.error("trainer: rank 0 is still in %s %.0f s after its deadline; it waits "
                      "at:\n%s", verdict.kind, _STUCK_SAY_S, stack)  # fmt: skip
        if (
            not self.workers
            and not self._closed.wait(_STUCK_EXIT_S - _STUCK_SAY_S)
            and self.clock.call
        ):
            # torchrun's ranks are not ours to kill, and rank 0 is stuck in a collective
            # with them: exit (as kill -9 would), and torchrun ends the others.
            log.error("trainer: rank 0 is still stuck in %s; exiting", verdict.kind)
            logging.shutdown()
            os._exit(1)


def _bound_collectives(seconds: float) -> None:
    """Give rank 0's collectives from now on this timeout, on every process group.

    A rank killed at the deadline usually fails rank 0's collective at once (its connection
    closes), but a gloo collective of FSDP's (an all-gather in flight) can miss the close
    and wait out its timeout: 30 minutes by default. Bounded by the call's deadline, it
    fails just after the clock has ended the group. Only rank 0 bounds its collectives: the
    other ranks wait for rank 0's next call for as long as the trainer is idle.
    """
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    if not dist.is_initialized():
        return
    timeout = timedelta(seconds=seconds)
    for group in list(_world.pg_map):
        try:
            group.set_timeout(timeout)
        except (AttributeError, RuntimeError) as exc:  # a backend without per-call timeouts
            log.debug("trainer: cannot bound the collectives of %r: %s", group, exc)


def _usual(verdict: Verdict) -> str:
    if verdict.expected_s is None:
        return f"the first {verdict.kind}"
    return f"at the slowest rate so far it takes {verdict.expected_s:.1f} s"


class DrivenBackend:
    """A TrainerBackend whose every call runs on all ranks of a RankGroup (rank 0's view)."""

    def __init__(self, group: RankGroup, local: Any) -> None:
        self.group = group
        self.local = local  # rank 0's own backend
        self.name = local.name
        self._open = True

    @property
    def shares_prefixes(self) -> bool:
        """Whether MicroBatch runs get their prefix computed once (the ranks' backend's say)."""
        return bool(self.local.shares_prefixes)

    @property
    def processor(self) -> Any:
        """The policy's processor."""
        return self.local.processor

    def _call(self, method: str, *args: Any) -> Any:
        self.group._command("call", (method, args))
        try:
            result = getattr(self.local, method)(*args)
        except Exception as exc:
            self.group._outcome(method, exc)
            raise
        self.group._outcome(method, None)
        return result

    def load(
        self, weights: Path, *, reference: Path | None = None, optimizer_state: Path | None = None
    ) -> None:
        """Load the weights, reference and optimizer state on every rank."""
        self.group._command("call", ("load", (weights,), {"reference": reference,
                                                          "optimizer_state": optimizer_state}))  # fmt: skip
        try:
            self.local.load(weights, reference=reference, optimizer_state=optimizer_state)
        except Exception as exc:
            self.group._outcome("load", exc)
            raise
        self.group._outcome("load", None)

    def forward_logprobs(self, batch: Any, images: Any) -> Any:
        """Logprobs of a micro-batch (every rank computes it; rank 0's result)."""
        return self._images_call("forward_logprobs", (batch,), images)

    def step(self, batches: Any, loss_fn: Any, images: Any) -> dict[str, Any]:
        """One optimisation step on every rank; each loads its screenshots itself."""
        return self._images_call("step", (batches, loss_fn), images)

    def _images_call(self, method: str, args: tuple, images: Any) -> Any:
        batches = args[0] if isinstance(args[0], list | tuple) else [args[0]]
        self.group._command("images", (method, args), sum(batch_cost(b) for b in batches))
        try:
            result = getattr(self.local, method)(*args, images)
        except Exception as exc:
            self.group._outcome(method, exc)
            raise
        self.group._outcome(method, None)
        return result

    def nonfinite_parameters(self) -> int:
        """Non-finite weights over every rank."""
        return int(self._call("nonfinite_parameters"))

    def save(self, out: Path) -> None:
        """Write the HF folder (rank 0 writes; every rank takes part)."""
        self._call("save", out)

    def save_state(self, out: Path) -> None:
        """Write the optimizer state (every rank takes part)."""
        self._call("save_state", out)

    def check(self) -> None:
        """Raise RankFailure if a rank of the group is gone or its call ran past its deadline."""
        self.group.check()

    def group_stats(self) -> dict[str, float]:
        """The process group's call in flight (how long it has run, how many ranks are late)."""
        return self.group.stats()

    def close(self) -> None:
        """Release the backend on every rank (the group stays)."""
        if self._open and hasattr(self.local, "close"):
            self.local.close()
        self._open = False


def _exit_text(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"


# -- ranks above 0 ------------------------------------------------------------------------------
def serve(spec: RankSpec | None = None) -> int:
    """Run a rank above 0: join the process group, then make rank 0's calls until told to stop."""
    import torch
    import torch.distributed as dist

    found = torchrun_rank()
    if found is None or found[0] == 0:
        raise ConfigError("serve runs ranks above 0 (RANK and WORLD_SIZE in the environment)")
    rank, world_size = found
    spec = spec or _decode_spec(os.environ[_SPEC_ENV])
    if spec.threads:
        torch.set_num_threads(spec.threads)
    if _PARENT_ENV in os.environ:  # spawned by rank 0: die with it
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != int(os.environ[_PARENT_ENV]):
            return 1  # rank 0 is already gone
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              world_size, is_master=False, timeout=timedelta(minutes=30))  # fmt: skip
        store.set(_JOINED.format(rank=rank), str(os.getpid()))
        dist.init_process_group(spec.dist_backend, store=store, rank=rank, world_size=world_size)
    else:  # torchrun
        bind_torchrun_collectives()
        dist.init_process_group(spec.dist_backend)
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    no_inherited_sockets()
    log.info("rank %d of %d (pid %d) joined the trainer's process group", rank, world_size,
             os.getpid())  # fmt: skip
    backend: Any = None
    images = _images_for(spec)
    while True:
        box: list[Any] = [None]
        try:
            dist.broadcast_object_list(box, src=0)
        except RuntimeError as exc:
            log.error("rank %d: rank 0 is gone (%s); leaving", rank, exc)
            return 1
        seq, method, payload = box[0]
        if method == "exit":
            break
        status = RankStatus(seq, rank)
        try:
            if method == "use":
                if backend is not None and hasattr(backend, "close"):
                    backend.close()
                backend = None
                _call_setup(payload.setup)
                backend = make_backend(payload.backend, **payload.options)
                images = _images_for(payload)
            elif method == "call":
                name, args, *kwargs = payload
                getattr(backend, name)(*args, **(kwargs[0] if kwargs else {}))
            elif method == "images":
                name, args = payload
                if name == "step":
                    log.info("rank %d: step of %d micro-batches", rank, len(args[0]))
                getattr(backend, name)(*args, images)
        except Exception as exc:  # reported to rank 0, which decides whether the group goes on
            status = RankStatus(seq, rank, type(exc).__name__, str(exc)[:MESSAGE_CHARS])
            log.warning("rank %d: %s raised %r", rank, method, exc)
        no_inherited_sockets()  # a call may have opened sockets (a backend's new groups)
        store.set(_STATUS.format(seq=seq, rank=rank), msgspec.json.encode(status))
    if backend is not None and hasattr(backend, "close"):
        backend.close()
    dist.destroy_process_group()
    return 0


def main() -> int:
    """Entry point of a spawned rank (`python -m consumers.trainer.ranks`)."""
    rank = os.environ.get("RANK", "?")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s rank{rank} %(name)s %(message)s")  # fmt: skip
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return serve()


if __name__ == "__main__":
    sys.exit(main())
