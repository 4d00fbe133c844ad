"""Training backends: `torch` (plain PyTorch, the reference, CPU default) and `megatron` (GPUs)."""

from __future__ import annotations

from typing import Any

from consumers.trainer.backends.base import (
    ImageLoader,
    LossFn,
    MicroBatch,
    NonFiniteStep,
    Sample,
    TokenBatch,
    TrainerBackend,
)
from runtime.errors import ConfigError

__all__ = [
    "BACKENDS",
    "ImageLoader",
    "LossFn",
    "MicroBatch",
    "NonFiniteStep",
    "Sample",
    "TokenBatch",
    "TrainerBackend",
    "make_backend",
]

BACKENDS = ("torch", "megatron")


def make_backend(name: str, **options: Any) -> TrainerBackend:
    """Return an unloaded backend by name (options go to its config)."""
    if name == "torch":
        from consumers.trainer.backends.torch_backend import TorchBackend, TorchBackendConfig

        return TorchBackend(TorchBackendConfig(**options))
    if name == "megatron":
        from consumers.trainer.backends.megatron_backend import (
            MegatronBackend,
            MegatronBackendConfig,
        )

        return MegatronBackend(MegatronBackendConfig(**options))
    raise ConfigError(f"unknown trainer backend {name!r}; known: {', '.join(BACKENDS)}")
