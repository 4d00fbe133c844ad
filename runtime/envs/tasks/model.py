"""The task model: an OSWorld-format task JSON, read as-is and checked for shape.

A task file is the JSON OSWorld publishes (`id`, `snapshot`, `instruction`, `source`,
`config`, `related_apps`, `evaluator` with `postconfig`, `func`, `result`, `expected`,
`options`, `conj`). Unknown fields are kept in `extra` so that a task survives a round
trip; malformed files raise TaskError naming the file and the field. A ScienceBoard task
JSON is read in OSWorld's shape (scienceboard.py) and keeps its own as `native`, which is
what `to_dict` gives back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.envs.tasks.scienceboard import is_scienceboard, to_osworld
from runtime.errors import TaskError

__all__ = ["Evaluator", "Task", "load_task"]

_KNOWN_TASK_KEYS = {
    "id",
    "snapshot",
    "instruction",
    "source",
    "config",
    "related_apps",
    "evaluator",
}


@dataclass(frozen=True)
class Evaluator:
    """How a finished episode is scored: getters feed one or more metric functions."""

    funcs: list[str]  # metric names; a single `func` string becomes a one-item list
    results: list[dict[str, Any] | list[dict[str, Any]] | None]  # one getter spec per func
    expecteds: list[dict[str, Any] | list[dict[str, Any]] | None]  # None: metric has no expected
    options: list[dict[str, Any]]  # keyword options per func
    conj: str = "and"  # how several funcs combine: "and" (mean, 0 on any 0) or "or" (max)
    postconfig: list[dict[str, Any]] = field(default_factory=list)  # setup steps run first

    @property
    def is_infeasible(self) -> bool:
        """True when the task expects the agent to declare it infeasible."""
        return self.funcs == ["infeasible"]

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "task") -> Evaluator:
        """Build an Evaluator from the task's `evaluator` object."""
        if not isinstance(raw, dict):
            raise TaskError(f"{where}: `evaluator` must be an object")
        func = raw.get("func")
        if isinstance(func, str):
            funcs = [func]
        elif isinstance(func, list) and func and all(isinstance(f, str) for f in func):
            funcs = list(func)
        else:
            raise TaskError(f"{where}: `evaluator.func` must be a name or a list of names")
        listed = isinstance(func, list)
        results = _per_func(raw.get("result"), listed, len(funcs), "result", where)
        expecteds = _per_func(raw.get("expected"), listed, len(funcs), "expected", where)
        options = _per_func(raw.get("options"), listed, len(funcs), "options", where)
        options = [o if o is not None else {} for o in options]
        if any(not isinstance(o, dict) for o in options):
            raise TaskError(f"{where}: `evaluator.options` must be objects")
        conj = raw.get("conj", "and")
        if conj not in ("and", "or"):
            raise TaskError(f"{where}: `evaluator.conj` must be 'and' or 'or', not {conj!r}")
        postconfig = raw.get("postconfig") or []
        _check_steps(postconfig, f"{where}: evaluator.postconfig")
        for spec in results + expecteds:
            for one in spec if isinstance(spec, list) else [spec]:
                if one is not None and not (isinstance(one, dict) and "type" in one):
                    raise TaskError(f"{where}: every getter needs a `type`, got {one!r}")
        return cls(funcs, results, expecteds, options, conj, list(postconfig))

    def to_dict(self) -> dict[str, Any]:
        """Return the evaluator in OSWorld's JSON shape."""
        single = len(self.funcs) == 1
        out: dict[str, Any] = {"func": self.funcs[0] if single else list(self.funcs)}
        if any(r is not None for r in self.results):
            out["result"] = self.results[0] if single else list(self.results)
        if any(e is not None for e in self.expecteds):
            out["expected"] = self.expecteds[0] if single else list(self.expecteds)
        if any(self.options):
            out["options"] = self.options[0] if single else list(self.options)
        if not single:
            out["conj"] = self.conj
        if self.postconfig:
            out["postconfig"] = list(self.postconfig)
        return out


@dataclass(frozen=True)
class Task:
    """One OSWorld-format task plus the folder its relative setup paths resolve against."""

    id: str
    instruction: str
    config: list[dict[str, Any]]  # setup steps, run in order by reset
    evaluator: Evaluator
    snapshot: str = ""
    source: str = ""
    related_apps: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown fields, kept verbatim
    base_dir: Path | None = None  # where `local_path` and relative file:// URLs resolve
    native: dict[str, Any] | None = None  # the JSON as written, when not OSWorld's (ScienceBoard)

    @classmethod
    def from_dict(cls, raw: Any, base_dir: Path | None = None, where: str = "task") -> Task:
        """Build a Task from parsed OSWorld JSON, raising TaskError on a malformed shape."""
        if not isinstance(raw, dict):
            raise TaskError(f"{where}: a task must be a JSON object")
        if is_scienceboard(raw):
            osworld = to_osworld(raw, _id_from(where), where)
            task = cls.from_dict(osworld, base_dir, where)
            return replace(task, native=raw)
        for key in ("id", "instruction", "evaluator"):
            if key not in raw:
                raise TaskError(f"{where}: missing required field `{key}`")
        if not isinstance(raw["id"], str) or not raw["id"]:
            raise TaskError(f"{where}: `id` must be a non-empty string")
        if not isinstance(raw["instruction"], str):
            raise TaskError(f"{where}: `instruction` must be a string")
        config = raw.get("config") or []
        _check_steps(config, f"{where}: config")
        apps = raw.get("related_apps") or []
        if not isinstance(apps, list):
            raise TaskError(f"{where}: `related_apps` must be a list")
        return cls(
            id=raw["id"],
            instruction=raw["instruction"],
            config=list(config),
            evaluator=Evaluator.from_dict(raw["evaluator"], where),
            snapshot=str(raw.get("snapshot") or ""),
            source=str(raw.get("source") or ""),
            related_apps=[str(a) for a in apps],
            extra={k: v for k, v in raw.items() if k not in _KNOWN_TASK_KEYS},
            base_dir=base_dir,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the task as its JSON: OSWorld's shape, or the native one it was read from."""
        if self.native is not None:
            return dict(self.native)
        out: dict[str, Any] = {
            "id": self.id,
            "snapshot": self.snapshot,
            "instruction": self.instruction,
            "source": self.source,
            "config": list(self.config),
            "related_apps": list(self.related_apps),
            "evaluator": self.evaluator.to_dict(),
        }
        out.update(self.extra)
        return out


def load_task(path: str | Path) -> Task:
    """Read an OSWorld-format task file; relative setup paths resolve against its folder."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TaskError(f"{path}: no such task file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskError(f"{path}: not a readable JSON file ({exc})") from exc
    return Task.from_dict(raw, base_dir=path.resolve().parent, where=str(path))


def _id_from(where: str) -> str:
    """A ScienceBoard task's id (it has none in its JSON): its file's name, or its key's last part."""
    name = where.replace("\\", "/").rsplit("/", 1)[-1]
    return name[: -len(".json")] if name.endswith(".json") else name or "task"


def _per_func(value: Any, listed: bool, n: int, name: str, where: str) -> list[Any]:
    """Spread a single value or a per-func list over n metric functions."""
    if not listed:
        return [value]
    if value is None:
        return [None] * n
    if isinstance(value, list) and len(value) == n:
        return list(value)
    if isinstance(value, dict) and name == "options":
        return [value] * n
    raise TaskError(f"{where}: `evaluator.{name}` must be a list of {n} items, one per func")


def _check_steps(steps: Any, where: str) -> None:
    """Raise TaskError unless steps is a list of {"type": ..., "parameters": {...}} objects."""
    if not isinstance(steps, list):
        raise TaskError(f"{where} must be a list of steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            raise TaskError(f"{where}[{i}] needs a string `type`")
        if not isinstance(step.get("parameters", {}), dict):
            raise TaskError(f"{where}[{i}].parameters must be an object")
