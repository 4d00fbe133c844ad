"""The `megatron` backend: megatron-core on GPUs (tensor/pipeline parallel, distributed optimizer).

It trains the text decoder of a Llama- or Qwen2-style policy (SmolLM2, Qwen2.5, and the
language model of Qwen2.5-VL on text-only segments) as a megatron-core `GPTModel` built from
the policy's HF config with the local layer spec:

    load      HF safetensors -> megatron's layout (QKV fused per query group, [gate; up]
              fused, vocab padded; `megatron_layout.py`), sharded over TP ranks, split over
              PP stages (`megatron_model.py` builds, `megatron_checkpoint.py` reads); a
              frozen reference model the same way when the KL term is on
    step      the step's micro-batches are shared out over the data-parallel ranks and go
              through megatron's forward-backward schedule (no pipelining, or 1F1B with
              PP > 1); on the last stage each row's own trained positions go through the
              vocabulary head and become a TokenBatch — the same sampling
              distribution (`sampling_logprobs`: temperature, top-p) as the torch backend —
              and the trainer's LossFn gives the loss; gradients sum over micro-batches
              and data-parallel ranks (the loss is already normalised by the step's token
              count); then megatron's optimizer (`get_megatron_optimizer`: AdamW, gradient
              clipping, optionally the distributed optimizer) steps once, unless a loss or
              (fp32/bf16; fp16 is megatron's loss scaler's) a gradient is not finite:
              NonFiniteStep, nothing updated
    save      megatron's layout -> an HF folder (safetensors), the same files the torch
              backend writes, loadable by `load_policy` and the rollout engines

Refused with a clear error: the vision tower of Qwen2.5-VL (a sample with images; the
tower's weights are carried through checkpoints untouched — the torch backend, which shards
the whole vision-language model with FSDP2, is the VLM path), sequence and context
parallelism, RoPE scaling, sliding-window attention, biased Llama projections.

Every rank makes the same calls (SPMD): with TP x PP x DP > 1 GPUs, each rank builds the
backend and calls load/step/save with the same arguments — driven by the trainer service on
rank 0 (consumers/trainer/ranks.py: `scalecua train --backend megatron --nproc N`, or
torchrun). megatron-core hard-codes CUDA (optimizer, schedules, buffers): on CPU it runs
only under the test shim in tests/consumers/trainer/megatron_cpu.py, without megatron's own
optimizers (and so without the distributed optimizer), which check for CUDA tensors.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from consumers.trainer.backends import megatron_model, spmd
from consumers.trainer.backends.base import (
    ImageLoader,
    LossFn,
    MicroBatch,
    NonFiniteStep,
    Sample,
    TokenBatch,
    count_nonfinite,
)
from consumers.trainer.backends.megatron_checkpoint import (
    HFCheckpoint,
    gather_hf_state,
    load_hf_weights,
    load_optimizer_state,
    optimizer_manifest,
    save_optimizer_state,
    untrained_tensors,
    write_hf_folder,
)
from consumers.trainer.backends.megatron_layout import (
    MegatronLayout,
    hf_prefix,
    megatron_layout,
    text_architecture,
)
from consumers.trainer.backends.megatron_model import (
    build_gpt,
    optimizer_config,
    start_parallel,
    wrap_ddp,
)
from consumers.trainer.backends.torch_backend import _is_processor_file
from consumers.trainer.shared_prefix import batch_cost
from runtime.errors import ConfigError, PolicyError
from runtime.policy.logprobs import sampling_logprobs
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor

__all__ = ["MegatronBackend", "MegatronBackendConfig"]

_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class MegatronBackendConfig:
    """Parallelism, precision and optimizer of the megatron backend."""

    lr: float = 3e-6  # AdamW learning rate (paper: 3e-6), constant
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0  # megatron leaves biases and norms undecayed
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    dtype: str = "bfloat16"  # parameters' dtype; bf16/fp16 keep fp32 main weights in the optimizer
    device: str = "cuda"  # megatron-core runs on CUDA ("cpu" only under the test shim)
    tensor_parallel: int = 1  # TP: ranks each layer's matrices are split across
    pipeline_parallel: int = 1  # PP: stages the layers are split across
    distributed_optimizer: bool = False  # shard optimizer state over data-parallel ranks
    recompute_activations: bool = False  # recompute each layer in backward (activation memory)
    entropy: bool = True  # compute the sampling entropy per token (a metric)
    entropy_grad: bool = False  # ...with gradients (only for a non-zero entropy bonus)
    seed: int = 1234  # megatron's model-parallel RNG (dropout is off: nothing random runs)
    dist_backend: str = "nccl"  # when the backend starts torch.distributed itself


@dataclass
class _Item:
    """One micro-batch as the model and the loss see it (tensors on the device)."""

    index: int  # the micro-batch's position in the step (-1: a data-parallel filler)
    ids: Any  # [b, s] right-padded token ids
    positions: Any  # [b, s]
    causal: Any  # [1, 1, s, s] bool, True where attention is masked
    rows: Any  # [n] the row of each trained position, row by row
    cols: Any  # [n] ...and its position in the row: only these reach the vocabulary head
    target_ids: Any  # [n] the tokens there
    counts: list[int]  # trained positions per row
    mask: Any  # [b, t] 1 where row r has its t-th trained token (t < counts[r])
    old_logp: Any  # [b, t]
    advantages: Any  # [b]
    weights: Any  # [b]
    temperature: float
    top_p: float
    ref_logp: Any = None  # [b, t], filled in on the last stage before the training pass


class MegatronBackend:
    """megatron-core trainer backend; see the module docstring."""

    name = "megatron"
    shares_prefixes = False  # packs its own sequences; MicroBatch runs are ignored

    def __init__(self, config: MegatronBackendConfig | None = None) -> None:
        self.config = config or MegatronBackendConfig()
        cfg = self.config
        try:
            import megatron.core  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "the megatron backend needs megatron-core: pip install 'scalecua[megatron]'"
            ) from exc
        if cfg.dtype not in _DTYPES:
            raise ConfigError(f"megatron backend: dtype must be one of {', '.join(_DTYPES)}")
        if cfg.tensor_parallel < 1 or cfg.pipeline_parallel < 1:
            raise ConfigError("megatron backend: parallel sizes must be at least 1")
        self.model: Any = None  # the policy: megatron DDP around this rank's GPTModel
        self.reference: Any = None  # the frozen reference GPTModel (None without the KL term)
        self.optimizer: Any = None
        self.layout: MegatronLayout | None = None
        self._processor: PolicyProcessor | None = None
        self._files: dict[str, bytes] = {}  # config, generation config, processor files
        self._passthrough: dict[str, Any] = {}  # checkpoint tensors not trained (vision tower)

    # -- placement ------------------------------------------------------------------------
    @property
    def processor(self) -> PolicyProcessor:
        """The policy's processor."""
        if self._processor is None:
            raise PolicyError("the megatron backend has not loaded a policy yet")
        return self._processor

    @property
    def device(self) -> Any:
        """Where megatron-core put this rank's tensors (its own hard-coded choice)."""
        import torch

        return torch.cuda.current_device()

    # -- loading --------------------------------------------------------------------------
    def load(
        self, weights: Path, *, reference: Path | None = None, optimizer_state: Path | None = None
    ) -> None:
        """Build the model from an HF folder, load the reference and the optimizer state."""
        from transformers import AutoConfig

        folder = resolve_policy(weights)
        hf_config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        arch = text_architecture(hf_config)
        cfg = self.config
        if arch.num_kv_heads % cfg.tensor_parallel or arch.num_heads % cfg.tensor_parallel:
            raise ConfigError(f"TP={cfg.tensor_parallel} does not divide the attention heads")
        if arch.num_layers % cfg.pipeline_parallel:
            raise ConfigError(
                f"PP={cfg.pipeline_parallel} does not divide {arch.num_layers} layers"
            )
        start_parallel(cfg)
        with HFCheckpoint(folder) as ckpt:
            self.layout = megatron_layout(arch, hf_prefix(ckpt.keys), cfg.tensor_parallel)
            gpt = build_gpt(arch, cfg, self.layout)
            load_hf_weights(self._global_names(gpt), ckpt.read, self.layout, cfg.tensor_parallel)
            self._passthrough = untrained_tensors(ckpt, self.layout) if _is_first_rank() else {}
        self._processor = load_processor(folder)
        self._files = {
            f.name: f.read_bytes()
            for f in sorted(folder.iterdir())
            if f.is_file()
            and (f.name in ("config.json", "generation_config.json") or _is_processor_file(f.name))
        }
        self.model = wrap_ddp(gpt, cfg)
        self.reference = None
        if reference is not None:
            ref_folder = resolve_policy(reference)
            ref_config = AutoConfig.from_pretrained(str(ref_folder), local_files_only=True)
            if text_architecture(ref_config) != arch:
                raise PolicyError(f"the reference {ref_folder} is not the policy's architecture")
            ref = build_gpt(arch, cfg, self.layout)
            with HFCheckpoint(ref_folder) as ref_ckpt:
                ref_layout = megatron_layout(arch, hf_prefix(ref_ckpt.keys), cfg.tensor_parallel)
                load_hf_weights(self._global_names(ref), ref_ckpt.read, ref_layout,
                                cfg.tensor_parallel)  # fmt: skip
            self.reference = ref.requires_grad_(False).eval()
        # (looked up at call time: the CPU test shim replaces it)
        self.optimizer = megatron_model.megatron_optimizer(self.model, optimizer_config(cfg))
        if optimizer_state is not None:
            load_optimizer_state(self.optimizer, self._manifest(), Path(optimizer_state))

    def _global_names(self, gpt: Any) -> Iterator[tuple[str, str, Any]]:
        """(local name, global name, parameter) of this rank's parameters."""
        assert self.layout is not None
        for local, param in gpt.named_parameters():
            name = local
            if local.startswith("decoder.layers."):
                _, _, index, rest = local.split(".", 3)
                number = gpt.decoder.layers[int(index)].layer_number  # 1-based, global
                name = f"decoder.layers.{number - 1}.{rest}"
            elif local == "output_layer.weight" and self.layout.arch.tied_embeddings:
                name = "embedding.word_embeddings.weight"  # the last stage's tied copy
            yield local, name, param

    # -- micro-batches --------------------------------------------------------------------
    def _item(self, batch: MicroBatch, index: int) -> _Item:
        import torch

        _refuse_images(batch.samples, self.processor)
        samples, device = batch.samples, self.device
        width = max(len(s.ids) for s in samples)
        ids = torch.zeros((len(samples), width), dtype=torch.long)
        for i, s in enumerate(samples):
            ids[i, : len(s.ids)] = torch.from_numpy(s.ids.astype(np.int64))
        if any(s.mask[0] for s in samples if len(s.mask)):
            raise PolicyError("a trained position 0 has no prefix to predict it from")
        # Right padding: positions are as in the row. Each row's own trained positions only.
        cols = [np.flatnonzero(s.mask) for s in samples]
        counts = [len(c) for c in cols]
        rows = np.concatenate([np.full(n, r) for r, n in enumerate(counts)]).astype(np.int64)
        flat = np.concatenate(cols).astype(np.int64)
        slots = max(counts, default=0)
        mask = torch.zeros((len(samples), slots))
        old = torch.zeros((len(samples), slots))
        for i, s in enumerate(samples):
            mask[i, : counts[i]] = 1.0
            old[i, : counts[i]] = torch.from_numpy(s.old_logprobs[cols[i]].astype(np.float32))
        rows_t, cols_t = torch.from_numpy(rows), torch.from_numpy(flat)
        return _Item(
            index=index,
            ids=ids.to(device),
            positions=torch.arange(width).expand(len(samples), -1).to(device),
            causal=torch.ones((width, width), dtype=torch.bool).triu(1)[None, None].to(device),
            rows=rows_t.to(device),
            cols=cols_t.to(device),
            target_ids=ids[rows_t, cols_t].to(device),
            counts=counts,
            mask=mask.to(device),
            old_logp=old.to(device),
            advantages=torch.tensor([s.advantage for s in samples]).to(device),
            weights=torch.tensor([s.weight for s in samples]).to(device),
            temperature=batch.temperature,
            top_p=batch.top_p,
        )

    def _forward(self, gpt: Any, item: _Item) -> Any:
        """This stage's output: hidden states, or on the last stage logits [n, 1, V_padded]."""
        embedded = None
        if gpt.pre_process:
            embedded = gpt.embedding(input_ids=item.ids, position_ids=item.positions)
        rope = gpt.rotary_pos_emb(item.ids.shape[1])
        hidden = gpt.decoder(
            hidden_states=embedded, attention_mask=item.causal, rotary_pos_emb=rope
        )
        if not gpt.post_process:
            return hidden
        # Only the positions that predict a trained token go through the vocabulary head,
        # each row's own (hidden states are [s, b, h]: position p is predicted at p - 1).
        weight = (
            gpt.shared_embedding_or_output_weight()
            if gpt.share_embeddings_and_output_weights
            else None
        )
        picked = hidden[item.cols - 1, item.rows].unsqueeze(1)
        logits, _ = gpt.output_layer(picked, weight=weight, runtime_gather_output=True)
        return logits

    def _token_batch(self, item: _Item, logits: Any, entropy: bool = True) -> TokenBatch:
        import torch

        assert self.layout is not None
        cfg = self.config
        logits = logits[:, 0, : self.layout.arch.vocab_size].float()
        logp_all = sampling_logprobs(logits, item.temperature, item.top_p)
        del logits
        logp = logp_all.gather(-1, item.target_ids.unsqueeze(-1)).squeeze(-1)
        ent = None
        if entropy and cfg.entropy:
            with torch.set_grad_enabled(cfg.entropy_grad and torch.is_grad_enabled()):
                source = logp_all if cfg.entropy_grad else logp_all.detach()
                probs = source.exp()
                # Top-p leaves -inf outside the nucleus: 0 · -inf must count as 0.
                ent = -torch.where(probs > 0, probs * source, torch.zeros_like(probs)).sum(-1)
        return TokenBatch(
            logp=_per_row(logp, item.counts),
            old_logp=item.old_logp,
            mask=item.mask,
            advantages=item.advantages,
            weights=item.weights,
            ref_logp=item.ref_logp,
            entropy=None if ent is None else _per_row(ent, item.counts),
        )

    def _loss(
        self, item: _Item, loss_fn: LossFn | None, entropy: bool, logits: Any
    ) -> tuple[Any, Any, dict]:
        """megatron's loss callback: (loss, tokens, what the schedule hands back)."""
        import torch

        tokens = torch.tensor(int(item.mask.sum()), dtype=torch.int, device=self.device)
        token_batch = self._token_batch(item, logits, entropy)
        if loss_fn is None:  # forward only: collect the logprobs
            out = {
                "index": item.index,
                "logp": token_batch.logp.detach(),
                "entropy": token_batch.entropy,
            }
            return token_batch.logp.sum() * 0.0, tokens, out
        loss, stats = loss_fn(token_batch)
        if item.index < 0:  # a data-parallel filler: runs the collectives, changes nothing
            return loss * 0.0, tokens, {"index": -1}
        return loss, tokens, {"index": item.index, "stats": stats}

    def _schedule(
        self, model: Any, items: list[_Item], loss_fn: LossFn | None, entropy: bool = True
    ) -> list[dict]:
        """Run megatron's forward(-backward) schedule over the items; last stage's outputs."""
        import torch
        from megatron.core.pipeline_parallel import get_forward_backward_func

        gpt = getattr(model, "module", model)

        def forward_step(data: Iterator[_Item], _model: Any) -> tuple[Any, Callable]:
            item = next(data)
            return self._forward(gpt, item), partial(self._loss, item, loss_fn, entropy)

        forward_only = loss_fn is None
        with torch.set_grad_enabled(not forward_only):
            return get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iter(items),
                model=[model],
                num_microbatches=len(items),
                seq_length=max(int(i.ids.shape[1]) for i in items),
                micro_batch_size=max(int(i.ids.shape[0]) for i in items),
                forward_only=forward_only,
            )

    def _with_reference(self, items: list[_Item]) -> None:
        """Fill in the reference logprobs (on the last stage) by a forward-only pass."""
        if self.reference is None:
            return
        for out in self._schedule(self.reference, items, None, entropy=False):
            next(i for i in items if i.index == out["index"]).ref_logp = out["logp"]

    # -- the protocol ---------------------------------------------------------------------
    def forward_logprobs(self, batch: MicroBatch, images: ImageLoader) -> TokenBatch:
        """Logprobs, reference logprobs and entropy of a micro-batch, without gradients."""
        if self.model is None:
            raise PolicyError("the megatron backend has not loaded a policy yet")
        item = self._item(batch, 0)
        self._with_reference([item])
        outs = self._schedule(self.model, [item], None)
        found = _from_last_stage(
            {
                "logp": outs[0]["logp"].cpu(),
                "entropy": None if outs[0]["entropy"] is None else outs[0]["entropy"].cpu(),
                "ref": None if item.ref_logp is None else item.ref_logp.cpu(),
            }
            if outs
            else None
        )
        return TokenBatch(
            logp=found["logp"],
            old_logp=item.old_logp.cpu(),
            mask=item.mask.cpu(),
            advantages=item.advantages.cpu(),
            weights=item.weights.cpu(),
            ref_logp=found["ref"],
            entropy=found["entropy"],
        )

    def step(
        self, batches: Sequence[MicroBatch], loss_fn: LossFn, images: ImageLoader
    ) -> dict[str, Any]:
        """Forward/backward every micro-batch through megatron's schedule, one optimizer step."""
        from megatron.core import parallel_state

        if self.optimizer is None:
            raise PolicyError("the megatron backend has not loaded a policy yet")
        if not batches:
            raise PolicyError("a step needs at least one micro-batch")
        started = time.monotonic()
        # Data parallelism: each of the D ranks takes its share (`spmd.share`: costs balanced);
        # one without any runs the first with its loss times zero, so every rank joins the
        # same collectives.
        dp = parallel_state.get_data_parallel_world_size()
        rank = parallel_state.get_data_parallel_rank()
        share = spmd.share([batch_cost(b) for b in batches], dp)[rank]
        mine = [(i, batches[i]) for i in share] or [(-1, batches[0])]
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        try:
            items = [self._item(b, i) for i, b in mine]
            self._with_reference(items)
            outs = self._schedule(self.model, items, loss_fn)
            # Each micro-batch's stats once: from its last stage, tensor-parallel rank 0.
            own = outs if parallel_state.get_tensor_model_parallel_rank() == 0 else []
            parts = sorted(
                (o for o in spmd.gather(own) if o["index"] >= 0), key=lambda o: o["index"]
            )
            stats = [o["stats"] for o in parts]
            bad_loss = [i for i, part in enumerate(stats) if not math.isfinite(part["loss"])]
            if bad_loss:
                raise NonFiniteStep(
                    f"micro-batch {bad_loss[0]}: the loss is {stats[bad_loss[0]]['loss']}", stats
                )
            # megatron's optimizer checks gradients only under fp16 loss scaling (where it
            # also lowers the scale: that check must stay its own); in fp32 and bf16 it would
            # apply NaN, so they are checked here, on every rank alike.
            if self.config.dtype != "float16" and not self._gradients_finite():
                raise NonFiniteStep("the gradients are not finite", stats, math.nan)
        except BaseException:
            self.model.zero_grad_buffer()  # a failed step leaves no trace
            self.optimizer.zero_grad()
            raise
        forward_backward_s = time.monotonic() - started
        updated, grad_norm, _ = self.optimizer.step()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        if not updated:  # fp16 loss-scale overflow: megatron skipped the update
            raise NonFiniteStep(
                "the gradients overflowed under fp16 loss scaling (megatron lowered the scale)",
                stats,
                math.inf,
            )
        return {
            "parts": stats,
            "grad_norm": float(grad_norm or 0.0),
            "micro_batches": len(batches),
            "forward_backward_s": forward_backward_s,
            "optimizer_s": time.monotonic() - started - forward_backward_s,
        }

    def _gradients_finite(self) -> bool:
        """Whether every rank's accumulated gradients (DDP's buffers) are finite."""
        import torch

        buffers = self.model.buffers + getattr(self.model, "expert_parallel_buffers", [])
        local = all(bool(torch.isfinite(b.grad_data).all()) for b in buffers)
        return spmd.sum_over_ranks(int(not local), self.device) == 0

    def nonfinite_parameters(self) -> int:
        """How many weights are NaN or infinite, over every rank (replicas counted each time)."""
        local = count_nonfinite(list(self.model.module.parameters()))
        return spmd.sum_over_ranks(local, self.device)

    # -- saving ---------------------------------------------------------------------------
    def hf_state_dict(self) -> dict[str, Any]:
        """The trained weights in HF layout (on the first rank; every rank must call)."""
        assert self.layout is not None
        cfg = self.config
        names = self._global_names(self.model.module)
        return gather_hf_state(names, self.layout, cfg.tensor_parallel, cfg.pipeline_parallel)

    def save(self, out: Path) -> None:
        """Write the weights (safetensors, HF layout) and the processor's files as an HF folder."""
        import torch.distributed as dist

        try:
            tensors = self.hf_state_dict()
            if _is_first_rank():
                write_hf_folder({**self._passthrough, **tensors}, self._files, self.config.dtype,
                                Path(out))  # fmt: skip
        finally:  # also when rank 0's write fails: no rank is left waiting in the barrier
            if dist.get_world_size() > 1:
                dist.barrier()

    def save_state(self, out: Path) -> None:
        """Write the optimizer's state: optimizer.pt (a manifest) and one file per model rank."""
        import torch.distributed as dist

        try:
            save_optimizer_state(self.optimizer, self._manifest(), Path(out))
        finally:
            if dist.get_world_size() > 1:
                dist.barrier()

    def close(self) -> None:
        """Release megatron's parallel state (the process group stays), e.g. before another
        backend with other TP/PP sizes is built in this process."""
        from megatron.core import parallel_state

        self.model = self.reference = self.optimizer = None
        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()

    def _manifest(self) -> dict[str, Any]:
        cfg = self.config
        return optimizer_manifest(cfg.tensor_parallel, cfg.pipeline_parallel,
                                  cfg.distributed_optimizer)  # fmt: skip


# -- helpers ----------------------------------------------------------------------------------
def _per_row(values: Any, counts: list[int]) -> Any:
    """Flat per-position values, row after row, as [rows, max count] (zeros after each row's)."""
    import torch

    width = max(counts, default=0)
    parts = torch.split(values, counts)
    return torch.stack([torch.nn.functional.pad(p, (0, width - p.shape[0])) for p in parts])


def _refuse_images(samples: Sequence[Sample], processor: PolicyProcessor) -> None:
    """The backend trains the text decoder only; a sample with images cannot go through it."""
    image_id = processor.image_token_id if processor.is_multimodal else None
    for s in samples:
        if s.image_refs or (image_id is not None and bool((s.ids == image_id).any())):
            raise PolicyError(
                "the megatron backend trains the text model only: the vision model (Qwen2.5-VL's "
                "vision tower) is not supported by this backend yet; train segments with images "
                "with the torch backend"
            )


def _is_first_rank() -> bool:
    import torch.distributed as dist

    return dist.get_rank() == 0


def _from_last_stage(value: Any) -> Any:
    """The last pipeline stage's value on every stage."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return value
    group = parallel_state.get_pipeline_model_parallel_group()
    box = [value]
    last = dist.get_global_rank(group, parallel_state.get_pipeline_model_parallel_world_size() - 1)
    dist.broadcast_object_list(box, src=last, group=group)
    return box[0]
