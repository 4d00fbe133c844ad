"""The contract between the trainer service and a training backend (torch, megatron, ...).

The service decides what to train (groups, advantages, weights, micro-batches, the loss);
a backend owns the model, the frozen reference and the optimizer, and decides how
sequences are laid out on its devices. They meet in four types:

    Sample      one segment to train: ids, loss mask, rollout logprobs, its advantage and
                weight, image refs and sizes, the sampling settings its logprobs used
    MicroBatch  samples that go through the model together (one temperature/top-p), and
                which of them share a prompt prefix (`PrefixRun`, a layout hint a backend
                that `shares_prefixes` computes once; see consumers/trainer/shared_prefix.py)
    TokenBatch  a backend's forward output, aligned over trained positions as [rows, T]
                tensors with a 0/1 mask: exactly what `grpo.grpo_token_loss` takes
    LossFn      TokenBatch -> (scalar loss, stat sums); a backend calls it per micro-batch
                and back-propagates the loss (gradient accumulation over the step)

A megatron backend plugs in by implementing `TrainerBackend` with its own packing
(sequence packing, pipeline micro-batches) and returning the same TokenBatch.

Numbers: a backend never applies an update whose loss or gradients are not finite; it
raises `NonFiniteStep` instead, with the weights and the optimizer as they were (what
fp16/bf16 overflow on GPUs, or an absurd rollout logprob, would otherwise write into the
weights). `nonfinite_parameters` lets the service check weights before it announces them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from runtime.errors import PolicyError
from runtime.policy.processor import PolicyProcessor

__all__ = [
    "NonFiniteStep",
    "count_nonfinite",
    "Sample",
    "PrefixRun",
    "MicroBatch",
    "TokenBatch",
    "LossFn",
    "ImageLoader",
    "TrainerBackend",
]


class NonFiniteStep(PolicyError):
    """A step's loss or gradient norm was not finite: no update was applied."""

    def __init__(
        self, reason: str, parts: Sequence[dict[str, float]] = (), grad_norm: float | None = None
    ) -> None:
        super().__init__(reason)
        self.parts = list(parts)  # the loss function's stats of the micro-batches computed
        self.grad_norm = grad_norm  # None: the step stopped before the gradients were complete


def count_nonfinite(tensors: Sequence[Any]) -> int:
    """How many elements of the tensors are NaN or infinite."""
    import torch

    tensors = list(tensors)
    if not tensors:
        return 0
    with torch.no_grad():
        # A finite sum means no NaN and no infinity: one cheap reduction per tensor (2 ms for
        # the tiny policy's 20M weights against 80 ms counting); only the rest are counted.
        sums = torch.stack([t.sum(dtype=torch.float32) for t in tensors])
        suspects = torch.nonzero(~torch.isfinite(sums)).flatten().tolist()
        return sum(int((~torch.isfinite(tensors[i])).sum()) for i in suspects)


@dataclass(frozen=True, eq=False)
class Sample:
    """One training segment with the values the objective needs."""

    ids: np.ndarray  # int32 [L]
    mask: np.ndarray  # bool [L]: trained positions (never position 0)
    old_logprobs: np.ndarray  # float32 [L]: the rollout's logprobs (0 where mask is 0)
    advantage: float = 0.0
    weight: float = 1.0
    image_refs: tuple[str, ...] = ()
    image_sizes: tuple[tuple[int, int], ...] = ()  # (w, h) each image was shown at
    temperature: float = 1.0  # the logprobs' sampling settings (SFT uses 1.0 / 1.0)
    top_p: float = 1.0
    trajectory_id: str = ""
    group_id: str = ""

    @property
    def tokens(self) -> int:
        """How many tokens this sample trains."""
        return int(self.mask.sum())


@dataclass(frozen=True)
class PrefixRun:
    """Samples (indices into a micro-batch) whose first `shared` tokens are the same."""

    members: tuple[int, ...]
    shared: int  # tokens computed once for all members (0: none); no trained position among them


@dataclass(frozen=True)
class MicroBatch:
    """Samples that share one forward pass (and so one temperature and top-p)."""

    samples: tuple[Sample, ...]
    temperature: float = 1.0
    top_p: float = 1.0
    runs: tuple[PrefixRun, ...] = ()  # samples not in a run are computed as rows of their own


@dataclass
class TokenBatch:
    """Forward output over trained positions: [rows, T] tensors, mask 1 where trained."""

    logp: Any  # current policy, with autograd during a step
    old_logp: Any  # rollout logprobs
    mask: Any
    advantages: Any  # [rows]
    weights: Any  # [rows]
    ref_logp: Any = None  # frozen reference (None when the KL term is off)
    entropy: Any = None  # of the sampling distribution, per position


LossFn = Callable[[TokenBatch], tuple[Any, dict[str, float]]]
ImageLoader = Callable[[Sample], list[Any]]  # a sample's images (PIL), resized as rendered


class TrainerBackend(Protocol):
    """What the trainer service needs from a backend."""

    name: str
    shares_prefixes: bool  # computes each MicroBatch run's prefix once (packing budgets for it)

    @property
    def processor(self) -> PolicyProcessor:
        """The policy's processor (tokenizer, image processor)."""
        ...

    def load(
        self, weights: Path, *, reference: Path | None = None, optimizer_state: Path | None = None
    ) -> None:
        """Load trainable weights (an HF folder), the frozen reference and optimizer state."""
        ...

    def forward_logprobs(self, batch: MicroBatch, images: ImageLoader) -> TokenBatch:
        """Logprobs (and reference logprobs, entropy) of a micro-batch, without gradients."""
        ...

    def step(
        self, batches: Sequence[MicroBatch], loss_fn: LossFn, images: ImageLoader
    ) -> dict[str, Any]:
        """One optimisation step over the micro-batches (gradients accumulate, one update).

        Returns {"parts": the loss function's stats per micro-batch, "grad_norm",
        "micro_batches", "forward_backward_s", "optimizer_s"}. A failure leaves the weights
        and the optimizer untouched; a loss or gradient norm that is not finite raises
        NonFiniteStep (nothing updated).
        """
        ...

    def nonfinite_parameters(self) -> int:
        """How many weights of the model are NaN or infinite (0: all finite; every rank calls)."""
        ...

    def save(self, out: Path) -> None:
        """Write the trainable weights as an HF model folder (with the processor's files)."""
        ...

    def save_state(self, out: Path) -> None:
        """Write what resuming needs beyond the weights (the optimizer) into folder `out`."""
        ...
