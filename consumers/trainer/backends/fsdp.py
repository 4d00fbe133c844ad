"""Fully sharded data parallel (PyTorch's FSDP2, `fully_shard`) for the torch backend.

With N ranks every parameter, gradient and AdamW moment is split into N shards, one per
rank; a layer's full weights exist only while it computes (gathered before, freed after).
Units, each gathered and freed as one:

    each text decoder layer     (the model's `_no_split_modules` outside the vision tower)
    the rest, as the root       embeddings, the vocabulary head (tied or not), final norm,
                                and the whole vision tower with its merger

The vision tower stays in the root on purpose: which images a rank encodes depends on its
own micro-batches (and, frozen, on what it already encoded this step), so the tower must
not be a unit of its own, whose gathers every rank would have to join in lockstep.

Gradients are summed over ranks, not averaged: the loss is already normalised by the whole
step's token count, so N ranks computing disjoint micro-batches add up to one rank computing
them all. Reductions use plain sums (gloo has no pre-multiplied sum or average).

Checkpoints stay what one rank writes: `full_state_dict` gathers the weights on rank 0 (one
tensor at a time), `full_optimizer_state` the AdamW state in torch's own format (indices
into the trainable parameters), and `load_optimizer_state` takes that format back, each
rank keeping its shard. A state written by N ranks resumes on M.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "shard_model",
    "is_sharded",
    "full_state_dict",
    "full_optimizer_state",
    "load_optimizer_state",
    "local_tensors",
    "full_tensor",
]

_VISION_MODULES = ("visual", "vision_tower", "vision_model")


def _mesh(device: str) -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return init_device_mesh(kind, (dist.get_world_size(),))


def shard_model(root: Any, model: Any, device: str) -> None:
    """Shard `model` (an HF causal LM inside `root`, the module every forward goes through)
    over the default process group: its text decoder layers as units, the rest with `root`."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = _mesh(device)
    layers = set(getattr(model, "_no_split_modules", None) or ())
    for name, module in model.named_modules():
        in_vision = any(part in _VISION_MODULES for part in name.split("."))
        if type(module).__name__ in layers and not in_vision:
            fully_shard(module, mesh=mesh)
    fully_shard(root, mesh=mesh)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum over ranks (see the docstring)
            module.set_force_sum_reduction_for_comms(True)


def is_sharded(module: Any) -> bool:
    """Whether `module` was sharded by `shard_model`."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def full_tensor(tensor: Any) -> Any:
    """A DTensor gathered whole (every rank must call), or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def local_tensors(tensors: list[Any]) -> list[Any]:
    """Each DTensor's shard on this rank, or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def full_state_dict(model: Any) -> dict[str, Any]:
    """The model's whole state dict on rank 0 (on CPU; tied weights stay one tensor), {}
    elsewhere. Every rank must call: each tensor is gathered in turn."""
    import torch
    import torch.distributed as dist

    first = dist.get_rank() == 0
    gathered: dict[int, Any] = {}
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name, value in model.state_dict(keep_vars=True).items():
            key = id(value)
            if key not in gathered:
                full = full_tensor(value.detach())
                gathered[key] = full.cpu() if first else None
            if first:
                out[name] = gathered[key]
    return out


def full_optimizer_state(optimizer: Any) -> dict[str, Any] | None:
    """The optimizer's state dict with every state tensor whole, on rank 0 (None elsewhere).
    Every rank must call."""
    import torch
    import torch.distributed as dist

    first = dist.get_rank() == 0
    state = optimizer.state_dict()  # its entries are the optimizer's own: copied, not changed
    whole: dict[Any, dict[str, Any]] = {}
    with torch.no_grad():
        for index in sorted(state["state"]):  # the same order on every rank
            entry = state["state"][index]
            whole[index] = {}
            for key in sorted(entry):
                value = entry[key]
                if isinstance(value, torch.Tensor):
                    full = full_tensor(value)
                    value = full.cpu().clone() if first else None
                whole[index][key] = value
    return {"state": whole, "param_groups": state["param_groups"]} if first else None


def load_optimizer_state(optimizer: Any, state: dict[str, Any]) -> None:
    """Load a state dict of whole tensors (one rank's format): each rank keeps its shards."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, entry in state["state"].items():
        param = params[int(index)]
        if not isinstance(param, DTensor):
            continue
        for key, value in entry.items():
            if key != "step" and getattr(value, "shape", None) == param.shape:
                # Every rank holds the whole tensor: each keeps its own shard, no messages.
                entry[key] = distribute_tensor(
                    value.to(param.dtype), param.device_mesh, param.placements, src_data_rank=None
                )
    optimizer.load_state_dict(state)
