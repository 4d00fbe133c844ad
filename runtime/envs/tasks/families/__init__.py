"""Task families: parameterised generators of small built-in tasks, split train/held-out.

    from runtime.envs.tasks import families

    families.FAMILIES["copy_file"].instance(7)      # (OSWorld task JSON, reference actions)
    train = families.generate("train", 200)         # list[GeneratedTask], families in turn
    heldout = families.generate("heldout", 60)      # never an instance of the train split
    events = families.task_events(heldout)          # TaskEvents with split "heldout"

Each family (terminal and files, mousepad, LibreOffice Calc) draws its parameters (file
names, contents, words, cell values) from a generator seeded by the family name and the
seed; the task id is `<family>-<seed>`. Every instance is plain OSWorld JSON whose setup
writes its own files (no task folder needed) and whose evaluator scores 0 or 1, with a
reference solution of one to three agent turns under `solution` (what the rollout
worker's scripted player plays). See registry.py for the splits and docs/tasks.md.
"""

from runtime.envs.tasks.families.base import Family, GeneratedTask, Instance
from runtime.envs.tasks.families.registry import (
    FAMILIES,
    HELDOUT_FAMILIES,
    SPLITS,
    family_of,
    generate,
    generate_one,
    instance_split,
    task_events,
    write_tasks,
)

__all__ = [
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "SPLITS",
    "Family",
    "GeneratedTask",
    "Instance",
    "family_of",
    "generate",
    "generate_one",
    "instance_split",
    "task_events",
    "write_tasks",
]
