"""The family registry, the train/held-out split, and generating instances in bulk.

An instance is held out when its family is, or when the hash of its family and instruction
falls in the held-out fifth. The instruction names every parameter the solution needs, so
two instances that would be solved by the same actions land in the same split: a held-out
instance is never a train instance under another seed. `generate(split, n)` walks each
family's seeds in order (0, 1, 2, ...), keeps those of the split whose instruction it has
not produced yet, and takes families in turn, so a longer list extends a shorter one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from runtime.envs.tasks.families.base import SOURCE, Family, GeneratedTask
from runtime.envs.tasks.families.calc import CALC_FAMILIES
from runtime.envs.tasks.families.mousepad import MOUSEPAD_FAMILIES
from runtime.envs.tasks.families.terminal import TERMINAL_FAMILIES
from runtime.errors import TaskError
from topics.events import TaskEvent

__all__ = [
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "SPLITS",
    "family_of",
    "generate",
    "generate_one",
    "instance_split",
    "task_events",
    "write_tasks",
    "HELDOUT_PERCENT",
]

FAMILIES: dict[str, Family] = {
    f.name: f for f in (*TERMINAL_FAMILIES, *MOUSEPAD_FAMILIES, *CALC_FAMILIES)
}
HELDOUT_FAMILIES: tuple[str, ...] = tuple(name for name, f in FAMILIES.items() if f.heldout)
SPLITS = ("train", "heldout")
HELDOUT_PERCENT = 20  # share of a train family's instances held out
_MAX_SEEDS = 200_000  # a family whose parameters run out before this is a bug


def instance_split(family: Family, instruction: str) -> str:
    """ "heldout" for a held-out family or an instruction hashing into the held-out fifth."""
    if family.heldout:
        return "heldout"
    digest = hashlib.sha256(f"{family.name}\n{instruction}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT else "train"


def generate_one(family: str, seed: int) -> GeneratedTask:
    """The instance of a family for a seed, whatever its split."""
    fam = _family(family)
    task, solution = fam.instance(seed)
    split = instance_split(fam, task["instruction"])
    return GeneratedTask(
        fam.name, seed, split, {**task, "split": split, "solution": solution}, solution
    )


def generate(split: str, n: int, families: Iterable[str] | None = None) -> list[GeneratedTask]:
    """`n` distinct instances of `split`, taking the families in turn (default: all of the split)."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, not {split!r}")
    if families is None:
        names = [name for name, f in FAMILIES.items() if split == "heldout" or not f.heldout]
    else:
        names = list(dict.fromkeys(families))
        for name in names:
            if _family(name).heldout and split == "train":
                raise TaskError(f"{name} is a held-out family: it has no train instances")
    if not names:
        raise TaskError("no families to generate from")
    streams = [_stream(FAMILIES[name], split) for name in names]
    return [next(streams[i % len(streams)]) for i in range(max(0, n))]


def _stream(family: Family, split: str) -> Iterator[GeneratedTask]:
    seen: set[str] = set()
    for seed in range(_MAX_SEEDS):
        generated = generate_one(family.name, seed)
        instruction = generated.task["instruction"]
        if generated.split == split and instruction not in seen:
            seen.add(instruction)
            yield generated
    raise TaskError(f"{family.name} ran out of distinct {split} instances")


def _family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise TaskError(f"no task family {name!r}; families: {', '.join(FAMILIES)}") from None


def family_of(task_id: str) -> str:
    """The family of a generated task id (`<family>-<seed>`), or "unknown"."""
    name = task_id.rsplit("-", 1)[0]
    return name if name in FAMILIES else "unknown"


def task_events(generated: Iterable[GeneratedTask]) -> list[TaskEvent]:
    """`tasks` events for generated instances, each with its own split (train or heldout)."""
    return [
        TaskEvent(task_id=g.task_id, task=g.task, source=SOURCE, split=g.split) for g in generated
    ]


def write_tasks(generated: Iterable[GeneratedTask], out_dir: Path) -> list[Path]:
    """Write each instance as `<out_dir>/<task id>.json` (OSWorld JSON, solution embedded)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for g in generated:
        path = out_dir / f"{g.task_id}.json"
        path.write_text(json.dumps(g.task, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
