"""What every getter works with: the evaluation's context, fetched files, and the helpers
OSWorld's file getters share (`multi`/`gives` configs, where a fetched file lands)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import TaskError

__all__ = ["EvalContext", "FetchedFile", "Getter", "multi_paths", "give", "dest_path"]


@dataclass
class EvalContext:
    """What getters may look at: the desktop, a scratch folder and the episode's actions."""

    controller: Any  # a DesktopController (or anything with its async methods)
    cache_dir: Path  # host folder where fetched files land, one per evaluation
    base_dir: Path | None = None  # the task file's folder, for bundled expected files
    actions: list[dict[str, Any]] = field(default_factory=list)  # actions played, in order
    step_outputs: Path | None = None  # where postconfig steps wrote their stdout/stderr files


Getter = Callable[[EvalContext, dict[str, Any]], Awaitable[Any]]


class FetchedFile(str):
    """The host path of a file a getter fetched (or found in the task folder) for a metric."""

    __slots__ = ()


def multi_paths(config: dict[str, Any]) -> tuple[list[Any], list[str], list[int]]:
    """Split a possibly multi-file config into paths, dest names and the indexes to give."""
    if config.get("multi"):
        paths, dests = list(config["path"]), list(config["dest"])
        if len(paths) != len(dests):
            raise TaskError("a multi getter needs as many `dest` names as `path`s")
        gives = list(config.get("gives", [0]))
    else:
        paths, dests, gives = [config["path"]], [config.get("dest")], [0]
    return paths, dests, gives


def give(values: list[Any], gives: list[int]) -> Any:
    """OSWorld's `gives`: one value when one index is asked for, else a list."""
    picked = [values[i] for i in gives]
    return picked[0] if len(picked) == 1 else picked


def dest_path(ctx: EvalContext, dest: str | None, source: str) -> Path:
    """A path in the cache folder for a fetched file (never outside it)."""
    name = Path(dest or Path(source).name or "file").name
    return ctx.cache_dir / name
