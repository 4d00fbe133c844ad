"""megatron-core objects for the megatron backend, from its config and an HF architecture.

    start_parallel     the process group (joined, or a one-rank group) and megatron's
                       TP/PP/DP state, on the rank's GPU
    build_gpt          a GPTModel (local layer spec: RMSNorm, SwiGLU, RoPE, grouped-query
                       attention) for this rank's TP shard and PP stage, ready for weights
    wrap_ddp           megatron's DistributedDataParallel around it (gradient buffers)
    optimizer_config   AdamW as megatron's OptimizerConfig
    megatron_optimizer megatron's optimizer (CUDA only: the CPU test shim replaces it)

megatron-core hard-codes CUDA; on CPU these run only under tests/consumers/trainer/megatron_cpu.py.
"""

from __future__ import annotations

import math
import os
import socket
from typing import Any

from runtime.errors import ConfigError

__all__ = [
    "start_parallel",
    "transformer_config",
    "build_gpt",
    "wrap_ddp",
    "optimizer_config",
    "megatron_optimizer",
    "finalize_grads",
    "mark_tensor_parallel",
]


def start_parallel(cfg: Any) -> None:
    """Join (or start) the process group and initialise megatron's parallel state."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    if cfg.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("the megatron backend needs CUDA GPUs; on CPU use the torch backend")
        index = torch.device(cfg.device).index or 0
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", index)))
    elif not _places_on_cpu():
        raise ConfigError(
            "megatron-core hard-codes CUDA: the megatron backend runs with --device cuda "
            "(on CPU only under the test shim tests/consumers/trainer/megatron_cpu.py)"
        )
    if not dist.is_initialized():
        if "RANK" in os.environ:  # torchrun
            dist.init_process_group(backend=cfg.dist_backend)
        else:
            port = _free_port()
            dist.init_process_group(
                backend=cfg.dist_backend,
                rank=0,
                world_size=1,
                init_method=f"tcp://127.0.0.1:{port}",
            )
    tp, pp = cfg.tensor_parallel, cfg.pipeline_parallel
    if dist.get_world_size() % (tp * pp):
        raise ConfigError(f"world size {dist.get_world_size()} is not a multiple of TP·PP")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tp, pp)
    got = (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_world_size(),
    )
    if got != (tp, pp):
        raise ConfigError(f"megatron is already initialised with TP, PP = {got}, not {tp, pp}")
    if not tensor_parallel.get_cuda_rng_tracker().is_initialized():
        tensor_parallel.model_parallel_cuda_manual_seed(cfg.seed)


def transformer_config(arch: Any, cfg: Any) -> Any:
    """megatron's TransformerConfig for an HF text architecture under the backend's config."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    dtype = getattr(torch, cfg.dtype)
    recompute: dict[str, Any] = {}
    if cfg.recompute_activations:
        recompute = {
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        }
    return TransformerConfig(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.ffn_hidden_size,
        num_attention_heads=arch.num_heads,
        num_query_groups=arch.num_kv_heads,
        kv_channels=arch.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=arch.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=arch.qkv_bias,
        hidden_dropout=0.0,  # no dropout: the importance ratio starts at exactly 1
        attention_dropout=0.0,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=cfg.dtype == "bfloat16",
        fp16=cfg.dtype == "float16",
        tensor_model_parallel_size=cfg.tensor_parallel,
        pipeline_model_parallel_size=cfg.pipeline_parallel,
        perform_initialization=False,  # every weight comes from the checkpoint
        gradient_accumulation_fusion=False,  # needs APEX's CUDA extension
        # The LossFn divides by the step's token count itself: megatron must neither
        # average over micro-batches nor data-parallel ranks (sums, see _finalize_grads).
        calculate_per_token_loss=True,
        variable_seq_lengths=True,  # micro-batches differ in rows and length
        moe_token_dispatcher_type="alltoall",  # (a dense model; "allgather" forbids the above)
        **recompute,
    )


def build_gpt(arch: Any, cfg: Any, layout: Any) -> Any:
    """This rank's GPTModel (its TP shard, its PP stage), weights uninitialised."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    gpt = GPTModel(
        config=transformer_config(arch, cfg),
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=layout.padded_vocab,
        max_sequence_length=arch.max_positions,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        parallel_output=False,  # logits gathered over TP: top-p needs the whole vocabulary
        share_embeddings_and_output_weights=arch.tied_embeddings,
        position_embedding_type="rope",
        rotary_base=arch.rope_theta,  # (annotated int: a float base works the same)
    ).to(torch.cuda.current_device())
    mark_tensor_parallel(gpt)
    return gpt


def mark_tensor_parallel(gpt: Any) -> None:
    """Mark each TP-split weight as such, as megatron's initialisation would have.

    Built with `perform_initialization=False` (every weight comes from the checkpoint),
    megatron never sets `tensor_model_parallel` on its split weights, and its optimizer
    then counts them in the gradient norm on TP rank 0 only, as if they were replicated:
    with TP > 1 the norm (and so the clipping) would miss the other ranks' shards.
    """
    from megatron.core.tensor_parallel.layers import (
        ColumnParallelLinear,
        RowParallelLinear,
        VocabParallelEmbedding,
        set_tensor_model_parallel_attributes,
    )

    for module in gpt.modules():
        if isinstance(module, ColumnParallelLinear | VocabParallelEmbedding):
            dim = 0
        elif isinstance(module, RowParallelLinear):
            dim = 1
        else:
            continue
        weight = getattr(module, "weight", None)
        if weight is not None and not hasattr(weight, "tensor_model_parallel"):
            stride = getattr(module, "stride", 1)
            set_tensor_model_parallel_attributes(weight, True, dim, stride)


def wrap_ddp(gpt: Any, cfg: Any) -> Any:
    """megatron's DistributedDataParallel around the model (its gradient buffers)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp = DistributedDataParallel(
        gpt.config,
        DistributedDataParallelConfig(
            grad_reduce_in_fp32=True,
            use_distributed_optimizer=cfg.distributed_optimizer,
        ),
        gpt,
    )
    gpt.config.no_sync_func = ddp.no_sync
    gpt.config.finalize_model_grads_func = finalize_grads
    return ddp


def finalize_grads(models: list[Any], num_tokens: Any = None, **kwargs: Any) -> None:
    """megatron's gradient finalisation without its division by the token count."""
    from megatron.core.distributed import finalize_model_grads

    finalize_model_grads(models, None, **kwargs)


def optimizer_config(cfg: Any) -> Any:
    """AdamW with the backend's settings as megatron's OptimizerConfig."""
    import torch
    from megatron.core.optimizer import OptimizerConfig

    return OptimizerConfig(
        optimizer="adam",  # decoupled weight decay: AdamW
        lr=cfg.lr,
        min_lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        adam_beta1=cfg.betas[0],
        adam_beta2=cfg.betas[1],
        adam_eps=1e-8,
        # With clipping off megatron reports no norm: an infinite bound measures, never clips.
        clip_grad=cfg.grad_clip if cfg.grad_clip > 0 else math.inf,
        bf16=cfg.dtype == "bfloat16",
        fp16=cfg.dtype == "float16",
        params_dtype=getattr(torch, cfg.dtype),
        use_distributed_optimizer=cfg.distributed_optimizer,
    )


def megatron_optimizer(model: Any, config: Any) -> Any:
    """megatron's optimizer for the DDP-wrapped model (CUDA only; the CPU test shim replaces it)."""
    from megatron.core.optimizer import get_megatron_optimizer

    optimizer = get_megatron_optimizer(config, [model])
    if config.fp16:  # loss scaling enters the backward pass through the model config
        model.module.config.grad_scale_func = optimizer.scale_loss
    return optimizer


def _places_on_cpu() -> bool:
    import torch

    try:
        return str(torch.cuda.current_device()) == "cpu"
    except (AssertionError, RuntimeError):
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
