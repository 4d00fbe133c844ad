"""Hugging Face <-> megatron-core weights for Llama/Qwen2-style text decoders: pure tensor math.

megatron-core's GPTModel (local layer spec) holds a decoder layer as

    input_layernorm.weight                 = HF input_layernorm.weight
    self_attention.linear_qkv.weight       = q, k, v fused per query group:
                                             [g0: q heads of g0, k0, v0 | g1: ... ]
    self_attention.linear_qkv.bias         = the same for the biases (Qwen2 only)
    self_attention.linear_proj.weight      = HF o_proj.weight
    pre_mlp_layernorm.weight               = HF post_attention_layernorm.weight
    mlp.linear_fc1.weight                  = [gate_proj; up_proj]   (SwiGLU: silu(first) * second)
    mlp.linear_fc2.weight                  = HF down_proj.weight

plus embedding.word_embeddings.weight, decoder.final_layernorm.weight and (untied)
output_layer.weight. The vocabulary is padded with zero rows to a multiple of 128 × TP
(megatron splits it evenly across tensor-parallel ranks); the padding never reaches a
checkpoint and its logits are cut off before any softmax.

Tensor parallelism splits column-parallel weights (qkv, fc1, embeddings) along their rows
— qkv by whole query groups, fc1 as gate and up halves separately — and row-parallel
weights (proj, fc2) along their columns; norms are replicated. Names here are "global":
layer i is the model's i-th layer, whatever pipeline stage holds it.

The language model of Qwen2.5-VL (`model.language_model.*` or `model.*` beside `visual.*`)
is a Qwen2 decoder: on text its multimodal RoPE equals plain RoPE. Its vision tower is not
converted: the megatron backend keeps those tensors as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import PolicyError

__all__ = [
    "MegatronLayout",
    "TextArchitecture",
    "hf_names",
    "hf_prefix",
    "hf_to_megatron",
    "megatron_layout",
    "megatron_names",
    "megatron_to_hf",
    "text_architecture",
    "to_hf",
    "to_megatron",
    "tp_shard",
    "tp_unshard",
]

_TEXT_MODEL_TYPES = ("llama", "qwen2")
_VL_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")  # their text_config is a Qwen2 decoder
_VOCAB_MULTIPLE = 128
# megatron layer parameter -> HF layer key, where a layer tensor is only renamed
_LAYER_RENAMES = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}


@dataclass(frozen=True)
class TextArchitecture:
    """The shape of a Llama/Qwen2-style decoder, read from its HF config."""

    model_type: str  # the HF model_type ("llama", "qwen2", "qwen2_5_vl", ...)
    vocab_size: int
    hidden_size: int
    ffn_hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int  # megatron's query groups
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    qkv_bias: bool  # Qwen2 has q/k/v biases, Llama none
    tied_embeddings: bool  # lm_head shares the input embedding
    max_positions: int
    multimodal: bool  # a vision-language checkpoint whose text model alone is trained


@dataclass(frozen=True)
class MegatronLayout:
    """An architecture, where its decoder sits in the HF checkpoint and megatron's vocab size."""

    arch: TextArchitecture
    prefix: str  # HF key prefix of the decoder: "model." or "model.language_model."
    padded_vocab: int  # embedding rows megatron holds (the rows past vocab_size are zeros)

    @property
    def lm_head(self) -> str:
        """The HF key of the output projection (absent from tied checkpoints)."""
        return "lm_head.weight"


def text_architecture(config: Any) -> TextArchitecture:
    """Read the text decoder of an HF config; raise PolicyError for what megatron cannot mirror."""
    model_type = str(getattr(config, "model_type", ""))
    multimodal = model_type in _VL_MODEL_TYPES
    if multimodal:
        text = config.text_config
    elif model_type in _TEXT_MODEL_TYPES:
        text = config
    else:
        raise PolicyError(
            f"the megatron backend converts Llama- and Qwen2-style decoders (and the text model "
            f"of Qwen2/2.5-VL), not model_type {model_type!r}"
        )
    act = getattr(text, "hidden_act", "silu")
    if act != "silu":
        raise PolicyError(f"the megatron backend needs a SwiGLU MLP (silu), not {act!r}")
    rope = dict(getattr(text, "rope_parameters", None) or {})
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise PolicyError(f"the megatron backend supports plain RoPE only, not {rope_type!r}")
    if getattr(text, "use_sliding_window", False):
        raise PolicyError("the megatron backend does not support sliding-window attention")
    if getattr(text, "mlp_bias", False) or (model_type == "llama" and text.attention_bias):
        raise PolicyError("the megatron backend supports Llama without attention or MLP biases")
    heads = int(text.num_attention_heads)
    return TextArchitecture(
        model_type=model_type,
        vocab_size=int(text.vocab_size),
        hidden_size=int(text.hidden_size),
        ffn_hidden_size=int(text.intermediate_size),
        num_layers=int(text.num_hidden_layers),
        num_heads=heads,
        num_kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(text, "head_dim", None) or text.hidden_size // heads),
        rms_norm_eps=float(text.rms_norm_eps),
        rope_theta=float(rope.get("rope_theta", getattr(text, "rope_theta", 10000.0))),
        qkv_bias=model_type != "llama",
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        max_positions=int(getattr(text, "max_position_embeddings", 32768)),
        multimodal=multimodal,
    )


def hf_prefix(keys: Iterable[str]) -> str:
    """The key prefix of the decoder in an HF checkpoint ("model.", "model.language_model.")."""
    for key in keys:
        if key.endswith("embed_tokens.weight"):
            return key.removesuffix("embed_tokens.weight")
    raise PolicyError("no embed_tokens.weight in the checkpoint: not a Llama/Qwen2 decoder")


def megatron_layout(arch: TextArchitecture, prefix: str, tp: int = 1) -> MegatronLayout:
    """The layout for `tp` tensor-parallel ranks (vocabulary padded to a multiple of 128·tp)."""
    multiple = _VOCAB_MULTIPLE * tp
    padded = -(-arch.vocab_size // multiple) * multiple
    return MegatronLayout(arch=arch, prefix=prefix, padded_vocab=padded)


def megatron_names(layout: MegatronLayout) -> list[str]:
    """Every global megatron parameter name of the model, in model order."""
    arch = layout.arch
    names = ["embedding.word_embeddings.weight"]
    for i in range(arch.num_layers):
        p = f"decoder.layers.{i}."
        names += [p + "input_layernorm.weight", p + "self_attention.linear_qkv.weight"]
        if arch.qkv_bias:
            names.append(p + "self_attention.linear_qkv.bias")
        names += [
            p + "self_attention.linear_proj.weight",
            p + "pre_mlp_layernorm.weight",
            p + "mlp.linear_fc1.weight",
            p + "mlp.linear_fc2.weight",
        ]
    names.append("decoder.final_layernorm.weight")
    if not arch.tied_embeddings:
        names.append("output_layer.weight")
    return names


def hf_names(layout: MegatronLayout) -> set[str]:
    """Every HF key of the text decoder (what the megatron model holds)."""
    arch, pre = layout.arch, layout.prefix
    names = {pre + "embed_tokens.weight", pre + "norm.weight"}
    if not arch.tied_embeddings:
        names.add(layout.lm_head)
    projections = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
    for i in range(arch.num_layers):
        p = f"{pre}layers.{i}."
        names.update(p + k for k in _LAYER_RENAMES.values())
        names.update(p + f"mlp.{x}_proj.weight" for x in ("gate", "up"))
        names.update(p + f"{x}.weight" for x in projections)
        if arch.qkv_bias:
            names.update(p + f"{x}.bias" for x in projections)
    return names


# -- one tensor each way --------------------------------------------------------------------


def _split_layer(name: str) -> tuple[int, str]:
    _, _, index, rest = name.split(".", 3)
    return int(index), rest


def to_megatron(name: str, read: Callable[[str], Any], layout: MegatronLayout) -> Any:
    """The global megatron tensor `name`, built from HF tensors that `read(hf_key)` returns."""
    import torch

    arch, pre = layout.arch, layout.prefix
    if name == "embedding.word_embeddings.weight":
        return _pad_vocab(read(pre + "embed_tokens.weight"), layout.padded_vocab)
    if name == "output_layer.weight":
        return _pad_vocab(read(layout.lm_head), layout.padded_vocab)
    if name == "decoder.final_layernorm.weight":
        return read(pre + "norm.weight")
    index, rest = _split_layer(name)
    hf = f"{pre}layers.{index}."
    if rest in _LAYER_RENAMES:
        return read(hf + _LAYER_RENAMES[rest])
    if rest == "mlp.linear_fc1.weight":
        return torch.cat([read(hf + "mlp.gate_proj.weight"), read(hf + "mlp.up_proj.weight")])
    if rest.startswith("self_attention.linear_qkv."):
        kind = rest.rsplit(".", 1)[1]  # weight or bias
        q, k, v = (read(f"{hf}self_attn.{x}_proj.{kind}") for x in "qkv")
        groups, per_group = arch.num_kv_heads, arch.num_heads // arch.num_kv_heads
        tail = q.shape[1:]
        fused = torch.cat(
            [
                q.reshape(groups, per_group * arch.head_dim, *tail),
                k.reshape(groups, arch.head_dim, *tail),
                v.reshape(groups, arch.head_dim, *tail),
            ],
            dim=1,
        )
        return fused.reshape(-1, *tail)
    raise PolicyError(f"no HF counterpart for megatron parameter {name!r}")


def to_hf(name: str, tensor: Any, layout: MegatronLayout) -> dict[str, Any]:
    """The HF tensors that the global megatron tensor `name` holds."""
    arch, pre = layout.arch, layout.prefix
    if name == "embedding.word_embeddings.weight":
        return {pre + "embed_tokens.weight": tensor[: arch.vocab_size]}
    if name == "output_layer.weight":
        return {layout.lm_head: tensor[: arch.vocab_size]}
    if name == "decoder.final_layernorm.weight":
        return {pre + "norm.weight": tensor}
    index, rest = _split_layer(name)
    hf = f"{pre}layers.{index}."
    if rest in _LAYER_RENAMES:
        return {hf + _LAYER_RENAMES[rest]: tensor}
    if rest == "mlp.linear_fc1.weight":
        gate, up = tensor.chunk(2)
        return {hf + "mlp.gate_proj.weight": gate, hf + "mlp.up_proj.weight": up}
    if rest.startswith("self_attention.linear_qkv."):
        kind = rest.rsplit(".", 1)[1]
        groups, per_group = arch.num_kv_heads, arch.num_heads // arch.num_kv_heads
        tail = tensor.shape[1:]
        grouped = tensor.reshape(groups, (per_group + 2) * arch.head_dim, *tail)
        q, k, v = grouped.split([per_group * arch.head_dim, arch.head_dim, arch.head_dim], dim=1)
        return {
            f"{hf}self_attn.q_proj.{kind}": q.reshape(-1, *tail),
            f"{hf}self_attn.k_proj.{kind}": k.reshape(-1, *tail),
            f"{hf}self_attn.v_proj.{kind}": v.reshape(-1, *tail),
        }
    raise PolicyError(f"no HF counterpart for megatron parameter {name!r}")


def _pad_vocab(weight: Any, rows: int) -> Any:
    import torch

    if weight.shape[0] > rows:
        raise PolicyError(f"{weight.shape[0]} vocabulary rows do not fit in {rows}")
    padding = weight.new_zeros((rows - weight.shape[0], *weight.shape[1:]))
    return torch.cat([weight, padding])


def hf_to_megatron(hf: Mapping[str, Any], layout: MegatronLayout) -> dict[str, Any]:
    """Every global megatron tensor from a full HF state dict."""
    return {name: to_megatron(name, hf.__getitem__, layout) for name in megatron_names(layout)}


def megatron_to_hf(megatron: Mapping[str, Any], layout: MegatronLayout) -> dict[str, Any]:
    """The HF text-model state dict from global megatron tensors (contiguous copies)."""
    out: dict[str, Any] = {}
    for name, tensor in megatron.items():
        out.update({k: v.contiguous() for k, v in to_hf(name, tensor, layout).items()})
    return out


# -- tensor parallelism ---------------------------------------------------------------------
_COLUMN_PARALLEL = ("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight",
                    "output_layer.weight")  # fmt: skip
_ROW_PARALLEL = ("linear_proj.weight", "linear_fc2.weight")


def tp_shard(name: str, full: Any, rank: int, size: int) -> Any:
    """Tensor-parallel rank `rank`'s part of the global tensor `name`."""
    import torch

    if size == 1:
        return full
    if name.endswith("linear_fc1.weight"):
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]])
    if name.endswith(_COLUMN_PARALLEL):
        return full.chunk(size)[rank]
    if name.endswith(_ROW_PARALLEL):
        return full.chunk(size, dim=1)[rank]
    return full  # norms are replicated


def tp_unshard(name: str, shards: list[Any]) -> Any:
    """The global tensor `name` from every tensor-parallel rank's part, in rank order."""
    import torch

    if len(shards) == 1:
        return shards[0]
    if name.endswith("linear_fc1.weight"):
        halves = [s.chunk(2) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    if name.endswith(_COLUMN_PARALLEL):
        return torch.cat(shards)
    if name.endswith(_ROW_PARALLEL):
        return torch.cat(shards, dim=1)
    return shards[0]
