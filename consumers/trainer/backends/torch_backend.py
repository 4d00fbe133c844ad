"""The `torch` backend: plain PyTorch on one device, or fully sharded over a process group.

It holds the trainable policy, a frozen copy of the reference policy for the KL term (only
when the KL coefficient is non-zero) and an AdamW optimizer. A step runs forward and
backward per micro-batch, letting gradients accumulate (the loss is already normalised by
the whole step's token count), then clips the gradient norm and takes one optimizer step —
unless a loss or the gradient norm is not finite: then it raises NonFiniteStep with the
weights and the optimizer untouched.

Logprobs are computed the way `runtime.policy.logprobs.token_logprobs` computes them — the
same model inputs (`model_inputs`, with `mm_token_type_ids`), the same sampling
distribution (`sampling_logprobs`: temperature, top-p) — so for unchanged weights the
importance ratio starts at 1. Only what is trained is computed past the decoder: each row's
own trained positions go through the vocabulary head (not the union of a micro-batch's
rows), and each screenshot is loaded, preprocessed and (vision tower frozen) encoded once
per step however many segments show it (`step_images.py`). The model stays in eval mode
while training (no dropout) for the same reason, unless gradient checkpointing is on
(transformers only checkpoints in train mode).

The vision tower (`visual`, `vision_tower`, `vision_model`) is frozen by default: its
activations then carry no autograd graph either.

Across ranks (a process group of N > 1, see consumers/trainer/ranks.py): every rank loads
the policy and shards it with FSDP2 (`fsdp.py`: parameters, gradients and AdamW state in N
shards, the whole vision-language model included); a step deals the micro-batches out
(`spmd.share`), every rank runs the same number of passes (a rank short of one repeats the
cheapest micro-batch with its loss times zero), gradients are summed over ranks, and a
failed input or a non-finite loss or gradient on any rank stops the step on every rank.
Checkpoints are gathered to rank 0 and are the same HF folders one rank writes.

Shared prefixes (one rank, text-only policies, `share_prefixes`): a micro-batch's runs
(consumers/trainer/shared_prefix.py) go through the model as one forward over the common
prefix, whose keys and values (with their autograd graph) the members' branches, packed
end to end into rows of about `branch_row_tokens` under a block-causal mask, attend to in
a second forward; the other samples are left-padded rows as before. Logprobs and
gradients equal the rows' to float rounding (tested); a GRPO group's shared first prompt
is then computed once instead of n times (bench/shared_prefix.py). Sharded, every rank must
make the same forward calls, so each micro-batch is one pass of rows there.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from consumers.trainer.backends import fsdp, spmd
from consumers.trainer.backends.base import (
    ImageLoader,
    LossFn,
    MicroBatch,
    NonFiniteStep,
    Sample,
    TokenBatch,
    count_nonfinite,
)
from consumers.trainer.backends.step_images import ImageBatch, StepImages
from consumers.trainer.shared_prefix import batch_cost, pack_branches
from runtime.errors import PolicyError
from runtime.policy.logprobs import model_inputs, sampling_logprobs
from runtime.policy.model import load_policy
from runtime.policy.processor import PolicyProcessor

__all__ = ["TorchBackend", "TorchBackendConfig"]

_VISION_MODULES = ("visual", "vision_tower", "vision_model")
# Files of a model folder that save_pretrained writes itself; everything else at the top
# level (tokenizer, chat template, image processor config) is copied into a checkpoint.
_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")
_MODEL_SUFFIXES = (".safetensors", ".bin", ".index.json", ".pt", ".gguf")


@dataclass(frozen=True)
class TorchBackendConfig:
    """Optimizer and placement of the torch backend (defaults: the paper's lr)."""

    lr: float = 3e-6  # AdamW learning rate (paper: 3e-6)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    dtype: str = "float32"  # parameters' dtype ("bfloat16" on a GPU)
    device: str = "cpu"  # across ranks on GPUs: "cuda" (each rank its LOCAL_RANK device)
    freeze_vision: bool = True  # the vision tower (and its merger) stays as it is
    gradient_checkpointing: bool = False  # trade compute for activation memory
    share_prefixes: bool = True  # compute a prompt prefix that samples share once (text-only)
    branch_row_tokens: int = 512  # ...packing the branches after it into rows of about this
    entropy: bool = True  # compute the sampling entropy per token (a metric)
    entropy_grad: bool = False  # ...with gradients (only for a non-zero entropy bonus)


def _rows(values: list[Any], width: int) -> Any:
    """Per-row 1-D tensors stacked into [rows, width], zero-padded on the right."""
    import torch

    return torch.stack([torch.nn.functional.pad(v, (0, width - v.shape[0])) for v in values])


def _is_processor_file(name: str) -> bool:
    """Top-level files of a model folder that are neither weights, config nor trainer state."""
    if name in _MODEL_FILES or name.startswith((".", "scalecua")):
        return False
    return not name.endswith(_MODEL_SUFFIXES)


def _scorer(model: Any) -> Any:
    """The module every forward goes through: the model's hidden states at chosen (row,
    position) pairs projected through its vocabulary head (also the FSDP root)."""
    import torch

    class Scorer(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.model = inner

        def forward(
            self, inputs: dict[str, Any], rows: Any, cols: Any, images: ImageBatch | None,
            role: str,
        ) -> Any:  # fmt: skip
            if images is not None:
                inputs = dict(inputs, image_grid_thw=images.grid.to(inputs["input_ids"].device))
                if images.store.reuse_features:
                    from transformers.modeling_outputs import BaseModelOutputWithPooling

                    features = images.features(self.model, role)
                    inputs["mm_encoder_outputs"] = {
                        "image": BaseModelOutputWithPooling(pooler_output=features)
                    }
                else:
                    dtype = next(self.model.parameters()).dtype
                    inputs["pixel_values"] = images.pixel_values().to(inputs["input_ids"].device,
                                                                      dtype)  # fmt: skip
            use_cache = "past_key_values" in inputs  # a branch batch attends to a prefix's cache
            hidden = self.model.model(**inputs, use_cache=use_cache).last_hidden_state
            # Row r's position p is predicted by its hidden state at p - 1.
            return self.model.get_output_embeddings()(hidden[rows, cols - 1])

    return Scorer(model)


class TorchBackend:
    """Plain-PyTorch trainer backend; see the module docstring."""

    name = "torch"

    def __init__(self, config: TorchBackendConfig | None = None) -> None:
        self.config = config or TorchBackendConfig()
        self.model: Any = None  # the HF model (its parameters sharded across ranks)
        self.reference: Any = None
        self.optimizer: Any = None
        self._processor: PolicyProcessor | None = None
        self._files: dict[str, bytes] = {}  # the processor's files, written into checkpoints
        self._trainable: list[Any] = []
        self._scored: Any = None  # the forward module around the model (the FSDP root)
        self._scored_reference: Any = None
        self._ranks = 1
        self._features_kwarg = False  # the model takes precomputed vision features

    @property
    def processor(self) -> PolicyProcessor:
        """The policy's processor."""
        if self._processor is None:
            raise PolicyError("the torch backend has not loaded a policy yet")
        return self._processor

    @property
    def pad_id(self) -> int:
        """The id left padding uses."""
        pad = self.processor.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    @property
    def device(self) -> str:
        """Where this rank computes: the configured device, a rank's own GPU across ranks."""
        import os

        if self._ranks > 1 and self.config.device == "cuda":
            return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        return self.config.device

    def load(
        self, weights: Path, *, reference: Path | None = None, optimizer_state: Path | None = None
    ) -> None:
        """Load trainable weights, the frozen reference (if given) and optimizer state."""
        import torch

        cfg = self.config
        self._ranks = spmd.world()[1]
        if self._ranks > 1 and self.device.startswith("cuda"):
            torch.cuda.set_device(self.device)
        # Sharded, every rank loads on CPU and keeps its shards (FSDP moves them to its GPU).
        place = "cpu" if self._ranks > 1 else cfg.device
        policy = load_policy(weights, dtype=cfg.dtype, device=place)
        self.model, self._processor = policy.model, policy.processor
        if any(getattr(self.model.config, a, None) for a in ("final_logit_softcapping",
                                                             "logit_scale")):  # fmt: skip
            raise PolicyError("the torch backend does not train models with scaled logits")
        # Kept in memory: `weights` may be a temporary download that is gone by the next save.
        self._files = {
            f.name: f.read_bytes()
            for f in sorted(Path(policy.path).iterdir())
            if f.is_file() and _is_processor_file(f.name)
        }
        self.model.requires_grad_(True)
        if cfg.freeze_vision:
            for name, module in self.model.named_modules():
                if name.rsplit(".", 1)[-1] in _VISION_MODULES:
                    module.requires_grad_(False)
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            self.model.train()
        self._features_kwarg = (
            "mm_encoder_outputs" in inspect.signature(self.model.model.forward).parameters
        )
        self._scored = _scorer(self.model)
        if self._ranks > 1:
            fsdp.shard_model(self._scored, self.model, self.device)
        self._trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.reference, self._scored_reference = None, None
        if reference is not None:
            self.reference = load_policy(reference, dtype=cfg.dtype, device=place).model
            self.reference.requires_grad_(False)
            self._scored_reference = _scorer(self.reference)
            if self._ranks > 1:
                fsdp.shard_model(self._scored_reference, self.reference, self.device)
        self.optimizer = torch.optim.AdamW(
            self._trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        if optimizer_state is not None:
            state = torch.load(Path(optimizer_state) / "optimizer.pt", map_location="cpu",
                               weights_only=True)  # fmt: skip
            if self._ranks > 1:
                fsdp.load_optimizer_state(self.optimizer, state)
            else:
                self.optimizer.load_state_dict(state)
            # The saved state brings its own hyperparameters; the configuration governs them
            # (a resumed run at another learning rate must train at that rate), the state
            # only carries the moments and step counts.
            for group in self.optimizer.param_groups:
                group.update(lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)

    @property
    def shares_prefixes(self) -> bool:
        """Whether MicroBatch runs get their prefix computed once: on one rank, for a loaded
        text-only policy (images need multimodal positions), not under gradient
        checkpointing (which turns the key/value cache off)."""
        cfg = self.config
        text_only = self._processor is not None and not self._processor.is_multimodal
        one_rank = self._ranks == 1
        return cfg.share_prefixes and not cfg.gradient_checkpointing and text_only and one_rank

    def trainable_parameters(self) -> int:
        """How many parameters the optimizer updates."""
        return sum(p.numel() for p in self._trainable)

    # -- forward --------------------------------------------------------------------------
    def _images(self, batches: Sequence[MicroBatch], images: ImageLoader) -> StepImages:
        """A step's image store; features are reused when no tower they come from trains."""
        reuse = self._features_kwarg and self.config.freeze_vision
        return StepImages(self.processor, images, batches, reuse_features=reuse)

    def forward_logprobs(self, batch: MicroBatch, images: ImageLoader) -> TokenBatch:
        """Logprobs, reference logprobs and entropy of a micro-batch, without gradients."""
        import torch

        with torch.no_grad():
            return self._token_batch(batch, images)

    def _token_batch(self, batch: MicroBatch, images: ImageLoader | StepImages) -> TokenBatch:
        import torch

        store = images if isinstance(images, StepImages) else self._images([batch], images)
        samples = batch.samples
        if any(s.mask[0] for s in samples if len(s.mask)):
            raise PolicyError("a trained position 0 has no prefix to predict it from")
        store.load(samples)
        runs = [r for r in batch.runs if r.shared > 0 and len(r.members) > 1]
        runs = runs if self.shares_prefixes else []  # else every sample is a row of its own
        in_runs = {i for r in runs for i in r.members}
        parts = [(tuple(i for i in range(len(samples)) if i not in in_runs), 0)]
        parts += [(r.members, r.shared) for r in runs]
        logp: list[Any] = [None] * len(samples)  # per sample: [its trained tokens]
        entropy: list[Any] = [None] * len(samples)
        ref: list[Any] = [None] * len(samples)
        for members, shared in parts:
            if not members:
                continue
            rows = [samples[i] for i in members]
            part_logp, part_entropy = self._part("policy", rows, shared, batch, store, True)
            part_ref: list[Any] = [None] * len(rows)
            if self.reference is not None:
                with torch.no_grad():
                    part_ref, _ = self._part("reference", rows, shared, batch, store, False)
            for j, i in enumerate(members):
                logp[i], entropy[i], ref[i] = part_logp[j], part_entropy[j], part_ref[j]
        counts = [s.tokens for s in samples]
        width = max(counts, default=0)
        mask = torch.zeros((len(samples), width))
        old = torch.zeros((len(samples), width))
        for i, s in enumerate(samples):
            mask[i, : counts[i]] = 1.0
            old[i, : counts[i]] = torch.from_numpy(s.old_logprobs[s.mask].astype(np.float32))
        return TokenBatch(
            logp=_rows(logp, width),
            old_logp=old,
            mask=mask,
            advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
            weights=torch.tensor([s.weight for s in samples], dtype=torch.float32),
            ref_logp=_rows(ref, width) if self.reference is not None else None,
            entropy=_rows(entropy, width) if entropy and entropy[0] is not None else None,
        )

    def _part(
        self, role: str, rows: list[Sample], shared: int, batch: MicroBatch,
        store: StepImages, entropy: bool,
    ) -> tuple[list[Any], list[Any]]:  # fmt: skip
        """Per row, logprobs (and entropy) at its trained positions, in order: as left-padded
        rows of their own (`shared` 0), or around a prefix of `shared` tokens computed once."""
        import torch

        scored = self._scored if role == "policy" else self._scored_reference
        image_batch = None
        if shared:
            inputs, places = self._branch_inputs(scored.model, rows, shared)
        else:
            image_batch = store.batch(rows)
            vision = {"image_grid_thw": image_batch.grid} if image_batch is not None else None
            inputs = model_inputs(self.processor, [s.ids.tolist() for s in rows],
                                  [store.keys(s) for s in rows], self.pad_id,
                                  vision=vision)  # fmt: skip
            inputs.pop("image_grid_thw", None)  # the forward adds the images itself
            width = int(inputs["input_ids"].shape[1])
            places = [
                (i, np.flatnonzero(s.mask) + (width - len(s.ids))) for i, s in enumerate(rows)
            ]
        # Each row's own trained positions, concatenated: only these reach the vocabulary head.
        row_index = np.concatenate([np.full(len(cols), r) for r, cols in places])
        col_index = np.concatenate([cols for _, cols in places])
        device = self.device
        inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
        logits = scored(
            inputs, torch.from_numpy(row_index.astype(np.int64)).to(device),
            torch.from_numpy(col_index.astype(np.int64)).to(device), image_batch, role,
        ).float()  # fmt: skip
        ids = inputs["input_ids"][torch.from_numpy(row_index.astype(np.int64)).to(device),
                                  torch.from_numpy(col_index.astype(np.int64)).to(device)]  # fmt: skip
        picked, ent = self._logprobs(logits, ids, batch, entropy)
        sizes = [len(cols) for _, cols in places]
        out_logp = list(torch.split(picked, sizes))
        out_entropy = list(torch.split(ent, sizes)) if ent is not None else [None] * len(rows)
        return out_logp, out_entropy

    def _branch_inputs(
        self, model: Any, rows: list[Sample], shared: int
    ) -> tuple[dict[str, Any], list[tuple[int, np.ndarray]]]:
        """Rows of the branches that follow the samples' common prefix, packed end to end,
        and the prefix's keys and values, computed by one forward (with gradients when
        enabled). Each branch attends to the prefix and causally to itself, at the
        positions it has in its own sequence."""
        import torch

        device = self.device
        prefix = torch.from_numpy(rows[0].ids[:shared].astype(np.int64))[None].to(device)
        past = model.model(input_ids=prefix, use_cache=True).past_key_values
        lengths = [len(s.ids) - shared for s in rows]
        # Short packed rows: attention is dense under the mask, so a long row would pay for
        # every pair of its tokens.
        bins = pack_branches(lengths, max(self.config.branch_row_tokens, max(lengths)))
        width = max(sum(lengths[i] for i in b) for b in bins)
        ids = torch.full((len(bins), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(bins), width), dtype=torch.long)
        owner = torch.full((len(bins), width), -1, dtype=torch.long)  # branch per token
        places: list[tuple[int, np.ndarray]] = [(0, np.zeros(0, np.int64))] * len(rows)
        for r, members in enumerate(bins):
            offset = 0
            for i in members:
                n, s = lengths[i], rows[i]
                ids[r, offset : offset + n] = torch.from_numpy(s.ids[shared:].astype(np.int64))
                positions[r, offset : offset + n] = torch.arange(shared, shared + n)
                owner[r, offset : offset + n] = i
                places[i] = (r, np.flatnonzero(s.mask) - shared + offset)
                offset += n
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        own = (owner[:, :, None] == owner[:, None, :]) & causal & (owner[:, :, None] >= 0)
        # Every query sees the prefix (padding too, so no row of the softmax is empty).
        mask = torch.cat([torch.ones(len(bins), width, shared, dtype=torch.bool), own], dim=2)
        past.batch_repeat_interleave(len(bins))
        inputs = {
            "input_ids": ids,
            "attention_mask": mask[:, None],
            "position_ids": positions,
            "past_key_values": past,
        }
        return inputs, places

    def _logprobs(self, logits: Any, ids: Any, batch: MicroBatch, entropy: bool) -> tuple[Any, Any]:
        """Logprobs of `ids` under the sampling distribution of `logits` [N, V] (and entropy)."""
        import torch

        logp_all = sampling_logprobs(logits, batch.temperature, batch.top_p)
        del logits
        picked = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        ent = None
        if entropy and self.config.entropy:
            with torch.set_grad_enabled(self.config.entropy_grad and torch.is_grad_enabled()):
                source = logp_all if self.config.entropy_grad else logp_all.detach()
                if batch.temperature > 0 and batch.top_p < 1.0:
                    # Top-p leaves -inf outside the nucleus, where p = 0: 0 · -inf counts as 0.
                    source = source.masked_fill(torch.isinf(source), 0.0)
                # -Σ p log p (a batched dot product would be faster, but sums 151K terms
                # into one float: 1e-5 off).
                ent = -(source.exp() * source).sum(-1)
            ent = ent.cpu() if not self.config.entropy_grad else ent
        return picked.cpu() if self.device != "cpu" else picked, ent

    # -- the step -------------------------------------------------------------------------
    def step(
        self, batches: Sequence[MicroBatch], loss_fn: LossFn, images: ImageLoader
    ) -> dict[str, Any]:
        """Forward/backward every micro-batch (gradients accumulate), clip, one AdamW step.

        Across ranks each rank computes its share of the micro-batches; see the module
        docstring. Every rank returns the same result (or raises the same error).
        """
        import torch

        if self.optimizer is None:
            raise PolicyError("the torch backend has not loaded a policy yet")
        started = time.monotonic()
        rank, ranks = spmd.world()
        shares = spmd.share([batch_cost(b) for b in batches], ranks)
        mine = shares[rank]
        rounds = max(len(s) for s in shares) if batches else 0
        filler = min(range(len(batches)), key=lambda i: batch_cost(batches[i]), default=0)
        order = [batches[i] for i in mine] + [batches[filler]] * (rounds - len(mine))
        store = self._images(order, images)
        self.optimizer.zero_grad(set_to_none=True)
        parts: list[tuple[int, dict[str, float]]] = []
        try:
            for round_, batch in enumerate(order):
                index = mine[round_] if round_ < len(mine) else -1  # -1: a filler
                error: BaseException | None = None
                try:
                    store.load(batch.samples)
                except Exception as exc:  # e.g. a missing screenshot: every rank stops
                    error = exc
                spmd.raise_first(error, device=self.device)
                token_batch = self._token_batch(batch, store)
                loss, stats = loss_fn(token_batch)
                if index >= 0:
                    parts.append((index, stats))
                finite = bool(torch.isfinite(loss))
                if spmd.any_rank(not finite, device=self.device):  # no use computing the rest
                    # (a filler repeats another rank's micro-batch: that rank reports it)
                    found = spmd.gather([] if finite or index < 0 else
                                        [(index, float(loss.detach()))])  # fmt: skip
                    first = min(found)
                    raise NonFiniteStep(f"micro-batch {first[0]}: the loss is {first[1]}",
                                        self._parts(parts))  # fmt: skip
                (loss if index >= 0 else loss * 0.0).backward()
                store.release(round_)
                del token_batch, loss
            forward_backward_s = time.monotonic() - started
            all_parts = self._parts(parts)
            grads = [p.grad for p in self._trainable if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
            norm = fsdp.full_tensor(norm) if ranks > 1 else norm
            if not bool(torch.isfinite(norm)):
                raise NonFiniteStep(f"the gradient norm is {float(norm)}", all_parts, float(norm))
        except BaseException:
            self.optimizer.zero_grad(set_to_none=True)  # a failed step leaves no trace
            raise
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(self._trainable, self.config.grad_clip, norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "parts": all_parts,
            "grad_norm": float(norm),
            "micro_batches": len(batches),
            "forward_backward_s": forward_backward_s,
            "optimizer_s": time.monotonic() - started - forward_backward_s,
            "images_loaded": float(store.loaded),
            "images_encoded": float(store.encoded),
        }

    @staticmethod
    def _parts(parts: list[tuple[int, dict[str, float]]]) -> list[dict[str, float]]:
        """Every rank's micro-batch stats, in step order."""
        return [stats for _, stats in sorted(spmd.gather(parts), key=lambda p: p[0])]

    def nonfinite_parameters(self) -> int:
        """How many weights of the model (trained or frozen) are NaN or infinite, over ranks."""
        local = count_nonfinite(fsdp.local_tensors(list(self.model.parameters())))
        return spmd.sum_over_ranks(local, self.device)

    # -- saving ---------------------------------------------------------------------------
    def save(self, out: Path) -> None:
        """Write the weights (safetensors) and the processor's files as an HF model folder
        (gathered to rank 0, which writes; every rank calls)."""
        state = fsdp.full_state_dict(self.model) if self._ranks > 1 else None
        if spmd.world()[0] != 0:
            return
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out, state_dict=state)
        for name, data in self._files.items():
            if not (out / name).exists():
                (out / name).write_bytes(data)

    def save_state(self, out: Path) -> None:
        """Write the optimizer's state (AdamW moments, step counts) to out/optimizer.pt (the
        same file from any number of ranks; every rank calls)."""
        import torch

        state = (
            fsdp.full_optimizer_state(self.optimizer)
            if self._ranks > 1
            else self.optimizer.state_dict()
        )
        if state is None:  # not rank 0
            return
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(state, out / "optimizer.pt")
