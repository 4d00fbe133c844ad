"""A test-only shim that lets megatron-core build, run and train a GPTModel on CPU.

megatron-core 0.16 hard-codes CUDA in a few places the megatron backend reaches; inside
`megatron_on_cpu()` each is redirected, explicitly and only for the tests:

- `torch.cuda.current_device()` returns "cpu": megatron places parameters, grad buffers
  and communication buffers there (DDP's buffers, rotary embeddings, gathers).
- the model-parallel RNG tracker forks the CPU generator instead of CUDA's
  (`model_parallel_cuda_manual_seed`); dropout is off, so nothing random runs anyway.
- the pipeline schedules' `torch.zeros(..., device="cuda")` token counter lands on CPU,
  and the point-to-point code's `torch.cuda.synchronize()` (pipeline stages exchanging
  shapes) does nothing.
- megatron's optimizer (`get_megatron_optimizer`) allocates its state and loss scale on
  CUDA, so the backend's optimizer is replaced by plain torch AdamW on the DDP gradient
  buffers (`param.main_grad`) with the same lr, betas, eps, weight decay and clipping, and
  megatron's gradient norm (each parameter once over the TP and PP ranks): the optimizer
  step is the one part of the megatron backend not exercised here, and with it the
  distributed optimizer.

`megatron_on_cpu()` also starts a single-process gloo group (world size 1) and megatron's
parallel state (TP = PP = 1), and undoes everything on exit; `cpu_patches()` only patches
(for the rank 0 of a process group the test starts), and `install()` patches for good (the
setup of the other ranks: `RankSpec(setup="tests.consumers.trainer.megatron_cpu:install")`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["CpuAdamW", "cpu_patches", "install", "megatron_on_cpu"]


class _CpuRNGTracker:
    """megatron's RNG tracker over the CPU generator (named states forked in and out)."""

    def __init__(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}

    def is_initialized(self) -> bool:
        return bool(self.states_)

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


def _cpu_manual_seed(seed: int, *args: Any, **kwargs: Any) -> None:
    from megatron.core.tensor_parallel import random

    tracker = _CpuRNGTracker()
    for offset, name in enumerate(
        ("data-parallel-rng", "model-parallel-rng", "expert-parallel-rng")
    ):
        tracker.add(name, seed + 2718 * offset)
    random._CUDA_RNG_STATE_TRACKER = tracker
    random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


class _CpuTorch:
    """The `torch` module as megatron's schedules see it: device="cuda" means CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(*args, device="cpu" if device == "cuda" else device, **kwargs)


class CpuAdamW:
    """Stands in for megatron's optimizer on CPU: torch AdamW on the DDP gradient buffers."""

    def __init__(self, model: Any, config: Any) -> None:
        self.config = config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.inner = torch.optim.AdamW(
            self.params,
            lr=config.lr,
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self) -> tuple[bool, float, None]:
        """Clip and step like megatron's optimizer: (updated, grad norm, zeros counted)."""
        for p in self.params:
            p.grad = p.main_grad.to(p.dtype)
        norm = self._grad_norm()
        if norm > self.config.clip_grad:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.config.clip_grad,
                                                 torch.tensor(norm))  # fmt: skip
        self.inner.step()
        return True, norm, None

    def _grad_norm(self) -> float:
        """megatron's: every parameter once (no TP duplicate, no shared embedding copy),
        squares summed over the model-parallel ranks (TP x PP)."""
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.transformer.module import param_is_not_shared

        squares = torch.zeros(1, dtype=torch.float64)
        for p in self.params:
            if param_is_not_shared(p) and tensor_parallel.param_is_not_tensor_parallel_duplicate(p):
                squares += p.grad.double().pow(2).sum()
        if dist.get_world_size() > 1:
            dist.all_reduce(squares, group=parallel_state.get_model_parallel_group())
        return float(squares.sqrt())

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


def _patches() -> list[tuple[Any, str, Any]]:
    from megatron.core import tensor_parallel
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel import random

    from consumers.trainer.backends import megatron_model

    return [
        (torch.cuda, "current_device", lambda: "cpu"),
        (torch.cuda, "synchronize", lambda *args, **kwargs: None),
        (tensor_parallel, "model_parallel_cuda_manual_seed", _cpu_manual_seed),
        (random, "model_parallel_cuda_manual_seed", _cpu_manual_seed),
        (schedules, "torch", _CpuTorch()),
        (megatron_model, "megatron_optimizer", CpuAdamW),
    ]


@contextlib.contextmanager
def cpu_patches() -> Iterator[None]:
    """megatron-core patched for CPU (no process group started), undone on exit."""
    from megatron.core.tensor_parallel import random

    with contextlib.ExitStack() as undo:
        for owner, name, value in _patches():
            undo.callback(setattr, owner, name, getattr(owner, name))
            setattr(owner, name, value)
        undo.callback(setattr, random, "_CUDA_RNG_STATE_TRACKER", None)
        undo.callback(setattr, random, "_CUDA_RNG_STATE_TRACKER_INITIALIZED", False)
        yield


def install() -> None:
    """Patch megatron-core for CPU for the rest of this process (a rank's setup)."""
    for owner, name, value in _patches():
        setattr(owner, name, value)


@contextlib.contextmanager
def megatron_on_cpu() -> Iterator[None]:
    """Patch megatron-core for CPU, start gloo (world size 1) and megatron's parallel state."""
    from megatron.core import parallel_state

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as undo:
        undo.enter_context(cpu_patches())
        dist.init_process_group(
            "gloo", init_method=f"file://{Path(tmp) / 'rendezvous'}", rank=0, world_size=1
        )
        undo.callback(dist.destroy_process_group)
        parallel_state.initialize_model_parallel(1, 1)
        undo.callback(parallel_state.destroy_model_parallel)
        yield
