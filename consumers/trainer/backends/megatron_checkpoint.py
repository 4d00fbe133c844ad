"""Checkpoint I/O of the megatron backend: HF folders in and out, optimizer state per rank.

    HFCheckpoint          lazy reads of an HF folder's safetensors (one file or shards)
    load_hf_weights       HF tensors converted to megatron's layout, this TP rank's shard
    untrained_tensors     what the backend does not train (a vision tower), carried through
    gather_hf_state       the trained weights of every TP/PP rank in HF layout, on rank 0
    write_hf_folder       safetensors (sharded past 5 GB, as save_pretrained) + config + the
                          processor's files: the folder `load_policy` and rollout engines read
    save_optimizer_state  optimizer.pt (a manifest of the TP/PP layout) and one
    load_optimizer_state  megatron_tpXX_ppYY.pt per model-parallel rank (plus the distributed
                          optimizer's parameter state); resuming needs the same layout

Every rank calls the gathering and saving functions (they hold collectives); only the
ranks that own a file write it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from consumers.trainer.backends.megatron_layout import (
    MegatronLayout,
    hf_names,
    to_hf,
    to_megatron,
    tp_shard,
    tp_unshard,
)
from runtime.errors import PolicyError

__all__ = [
    "HFCheckpoint",
    "load_hf_weights",
    "untrained_tensors",
    "gather_hf_state",
    "write_hf_folder",
    "optimizer_manifest",
    "save_optimizer_state",
    "load_optimizer_state",
]

_MAX_SHARD = "5GB"  # safetensors shard size of saved checkpoints (as save_pretrained)


class HFCheckpoint:
    """Lazy reads from an HF folder's safetensors files (one file or an index of shards)."""

    def __init__(self, folder: Path) -> None:
        from safetensors import safe_open

        index = folder / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
        elif (folder / "model.safetensors").exists():
            weight_map = None
        else:
            raise PolicyError(f"{folder} has no safetensors weights (model.safetensors)")
        files = sorted(set(weight_map.values())) if weight_map else ["model.safetensors"]
        self._handles = {f: safe_open(str(folder / f), "pt") for f in files}
        self._where = weight_map or {k: files[0] for k in self._handles[files[0]].keys()}
        self.keys = list(self._where)

    def __enter__(self) -> HFCheckpoint:
        return self

    def __exit__(self, *_: Any) -> None:
        self._handles.clear()

    def read(self, key: str) -> Any:
        """One tensor (on CPU) by its HF key."""
        if key not in self._where:
            raise PolicyError(f"the checkpoint has no tensor {key!r}")
        return self._handles[self._where[key]].get_tensor(key)


def load_hf_weights(
    names: Iterator[tuple[str, str, Any]], read: Callable[[str], Any], layout: MegatronLayout,
    tp: int,
) -> None:  # fmt: skip
    """Copy HF tensors (`read` by key) into this rank's parameters, given as (local name,
    global name, parameter): converted to megatron's layout, this TP rank's shard of each."""
    import torch
    from megatron.core import parallel_state

    rank = parallel_state.get_tensor_model_parallel_rank()
    with torch.no_grad():
        for local, name, param in names:
            shard = tp_shard(name, to_megatron(name, read, layout), rank, tp)
            if tuple(shard.shape) != tuple(param.shape):
                raise PolicyError(
                    f"{local}: checkpoint gives {tuple(shard.shape)}, "
                    f"the model holds {tuple(param.shape)}"
                )
            param.copy_(shard)


def untrained_tensors(ckpt: HFCheckpoint, layout: MegatronLayout) -> dict[str, Any]:
    """Checkpoint tensors outside the text decoder (Qwen2.5-VL's vision tower), kept as is."""
    # A tied checkpoint's stale lm_head copy is dropped too.
    trained = hf_names(layout) | {layout.lm_head}
    return {k: ckpt.read(k) for k in ckpt.keys if k not in trained}


def gather_hf_state(
    names: Iterator[tuple[str, str, Any]], layout: MegatronLayout, tp: int, pp: int
) -> dict[str, Any]:
    """This rank's (local name, global name, parameter)s gathered over TP, converted to HF
    layout, and collected over PP stages: the whole state on rank 0, {} elsewhere."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    tp_group = parallel_state.get_tensor_model_parallel_group()
    stage: dict[str, Any] = {}
    with torch.no_grad():
        for local, name, param in names:
            if local == "output_layer.weight" and name.startswith("embedding."):
                continue  # the last stage's copy of tied embeddings
            shards = [param.detach()]
            if tp > 1:
                shards = [torch.empty_like(param) for _ in range(tp)]
                dist.all_gather(shards, param.detach().contiguous(), group=tp_group)
            full = tp_unshard(name, shards).cpu()
            stage.update({k: v.contiguous().clone() for k, v in to_hf(name, full, layout).items()})
    if pp > 1 and parallel_state.get_data_parallel_rank() == 0:
        if parallel_state.get_tensor_model_parallel_rank() == 0:
            group = parallel_state.get_pipeline_model_parallel_group()
            stages: list[Any] = [None] * pp
            first = dist.get_global_rank(group, 0)
            dist.gather_object(
                stage, stages if dist.get_rank() == first else None, dst=first, group=group
            )
            stage = {k: v for s in stages or [] if s for k, v in s.items()}
    return stage if dist.get_rank() == 0 else {}


def write_hf_folder(
    tensors: dict[str, Any], files: dict[str, bytes], dtype: str, out: Path
) -> None:
    """Write `tensors` as safetensors and `files` (config.json with its dtype set) into `out`."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    split = split_torch_state_dict_into_shards(tensors, max_shard_size=_MAX_SHARD)
    for filename, names in split.filename_to_tensors.items():
        save_file({n: tensors[n] for n in names}, str(out / filename), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = json.loads(files["config.json"])
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name, data in files.items():
        if not (out / name).exists():
            (out / name).write_bytes(data)


def optimizer_manifest(tp: int, pp: int, distributed: bool) -> dict[str, Any]:
    """What a saved optimizer state was written for."""
    return {
        "format": "scalecua-megatron-optimizer-v1",
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "distributed_optimizer": distributed,
    }


def _own_file(folder: Path) -> Path:
    from megatron.core import parallel_state

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    return folder / f"megatron_tp{tp_rank:02d}_pp{pp_rank:02d}.pt"


def save_optimizer_state(optimizer: Any, manifest: dict[str, Any], out: Path) -> None:
    """optimizer.pt (the manifest, rank 0) and this model-parallel rank's state file."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    out = Path(out)
    own = _own_file(out)
    if manifest["distributed_optimizer"]:  # every data-parallel rank hands in its shard
        optimizer.save_parameter_state(str(own.with_suffix(".params.pt")))
    if parallel_state.get_data_parallel_rank() == 0:
        out.mkdir(parents=True, exist_ok=True)
        torch.save(optimizer.state_dict(), own)
    if dist.get_rank() == 0:
        torch.save(manifest, out / "optimizer.pt")


def load_optimizer_state(optimizer: Any, manifest: dict[str, Any], folder: Path) -> None:
    """Load this rank's optimizer state written under the same TP/PP layout."""

    folder = Path(folder)
    found = _load_data(folder / "optimizer.pt")
    if found != manifest:
        raise PolicyError(
            f"optimizer state in {folder} was written for {found}, not {manifest}: "
            "resharding is not supported"
        )
    own = _own_file(folder)
    optimizer.load_state_dict(_load_data(own))
    if manifest["distributed_optimizer"]:
        optimizer.load_parameter_state(str(own.with_suffix(".params.pt")))


def _load_data(path: Path) -> Any:
    """A torch file of tensors and plain containers; PolicyError if it holds anything else.

    weights_only: a file in a checkpoint folder is only as trusted as whoever can write the
    folder, so it is never allowed to name code to run.
    """
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise PolicyError(
            f"{path} holds more than tensors and plain data: refused ({exc})"
        ) from None
