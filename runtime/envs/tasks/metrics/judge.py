"""`sandboxed_judge`: a task-specific judge function (VeriGen's, LLM-written) as a metric.

The evaluator names it like any metric; its options carry the judge's Python source and
function name. The getters' values reach the judge as `artifacts["result"]` and
`artifacts["expected"]`: a file a getter fetched is copied into the sandbox and passed
as its path there, anything else as its JSON value. A judge that fails (timeout, crash,
forbidden, ...) raises JudgeFailed, which the evaluation records as a 0 with the reason.

    "evaluator": {"func": "sandboxed_judge",
                  "result": {"type": "vm_file", "path": "/home/user/out.xlsx", "dest": "out.xlsx"},
                  "options": {"source": "def judge(a): ...", "function": "judge"}}
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from runtime.envs.tasks.getters import FetchedFile
from runtime.errors import OutcomeError
from runtime.judge import FileArtifact, JudgeLimits, run_judge

__all__ = ["JudgeFailed", "sandboxed_judge"]


class JudgeFailed(OutcomeError):
    """The judge gave no score; the message names the failure status and detail."""


def _artifact(value: Any) -> Any:
    # Only a file a getter fetched is copied in; any other string (a path a task wrote into
    # a `rule`, say) reaches the judge as a string, so a task cannot hand it host files.
    if isinstance(value, FetchedFile) and Path(value).is_file():
        return FileArtifact(path=value)
    return value


def sandboxed_judge(
    result: Any,
    expected: Any = None,
    *,
    source: str,
    function: str = "judge",
    wall_seconds: float = 10.0,
    memory_mb: int = 1024,
) -> float:
    """Run the task's judge on the getters' values in the sandbox and return its score."""
    limits = JudgeLimits(
        wall_seconds=wall_seconds,
        cpu_seconds=max(1, math.ceil(wall_seconds)),
        memory_bytes=memory_mb << 20,
    )
    artifacts = {"result": _artifact(result), "expected": _artifact(expected)}
    verdict = run_judge(source, function, artifacts, limits)
    if not verdict.ok or verdict.score is None:
        raise JudgeFailed(f"{verdict.status}: {verdict.detail}")
    return verdict.score
