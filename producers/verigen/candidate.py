"""The VeriGen candidate: an OSWorld task JSON plus what its author says about it.

A candidate is one flat JSON object: OSWorld's task fields (`id`, `instruction`, `config`,
`evaluator`, `related_apps`, ...) with VeriGen's metadata beside them:

    app              the knowledge document it was written from: terminal, mousepad, calc,
                     writer, texstudio, vscode
    explanation      what the task asks for and how its evaluator decides
    difficulty       "easy" | "medium" | "hard"
    estimated_steps  how many actions an agent needs (1-50)
    solution         optional: actions in the controller's shape that solve it

Flat, so that a candidate file is itself a task file (`scalecua task run` keeps unknown
fields). An accepted task is the candidate with `id` set from its content, `source:
"verigen"` and a `validation` record; it goes to `tasks` as-is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.envs.tasks.model import Task
from runtime.errors import TaskError
from topics.events import TaskEvent

__all__ = [
    "APPS",
    "DIFFICULTIES",
    "MAX_STEPS",
    "Candidate",
    "CandidateError",
    "Validation",
    "accepted_task",
    "task_event",
]

APPS = ("terminal", "mousepad", "calc", "writer", "texstudio", "vscode")
DIFFICULTIES = ("easy", "medium", "hard")
MAX_STEPS = 50  # the paper's turn limit: a task needing more cannot be solved in an episode
_META = (
    "app", "explanation", "difficulty", "estimated_steps", "solution", "validation", "provenance",
)  # fmt: skip


class CandidateError(TaskError):
    """A candidate's JSON is malformed; `reasons` lists every problem found."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Candidate:
    """A proposed task: the OSWorld part, its metadata and (when known) a solution."""

    task: Task  # the OSWorld part, with no folder: a generated task reads no host file
    app: str
    explanation: str
    difficulty: str
    estimated_steps: int
    solution: list[dict[str, Any]] | None = None

    @classmethod
    def from_dict(cls, raw: Any) -> Candidate:
        """Read a candidate, raising CandidateError that names every malformed field."""
        if not isinstance(raw, dict):
            raise CandidateError(["a candidate must be a JSON object"])
        reasons: list[str] = []
        task: Task | None = None
        osworld = {k: v for k, v in raw.items() if k not in _META}
        try:
            task = Task.from_dict(osworld, base_dir=None, where="candidate")
        except TaskError as exc:
            reasons.append(str(exc))
        if task is not None and not task.instruction.strip():
            reasons.append("candidate: `instruction` is empty")
        app = raw.get("app")
        if app not in APPS:
            reasons.append(f"candidate: `app` must be one of {', '.join(APPS)}, not {app!r}")
        explanation = raw.get("explanation")
        if not isinstance(explanation, str) or not explanation.strip():
            reasons.append("candidate: `explanation` must be a non-empty string")
        difficulty = raw.get("difficulty")
        if difficulty not in DIFFICULTIES:
            reasons.append(
                f"candidate: `difficulty` must be one of {', '.join(DIFFICULTIES)}, "
                f"not {difficulty!r}"
            )
        steps = raw.get("estimated_steps")
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
            reasons.append(
                f"candidate: `estimated_steps` must be a whole number from 1 to {MAX_STEPS}, "
                f"not {steps!r}"
            )
        solution = raw.get("solution")
        if solution is not None and not (
            isinstance(solution, list)
            and all(isinstance(a, dict) and isinstance(a.get("action"), str) for a in solution)
        ):
            reasons.append(
                'candidate: `solution` must be a list of actions like {"action": "key", ...}'
            )
        if reasons or task is None:
            raise CandidateError(reasons)
        return cls(task, app, explanation, difficulty, steps, solution)  # type: ignore[arg-type]

    def with_solution(self, solution: list[dict[str, Any]] | None) -> Candidate:
        """The same candidate with another solution."""
        return Candidate(
            self.task, self.app, self.explanation, self.difficulty, self.estimated_steps, solution
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat candidate JSON (the OSWorld task plus the metadata)."""
        out = self.task.to_dict()
        out.update(
            app=self.app,
            explanation=self.explanation,
            difficulty=self.difficulty,
            estimated_steps=self.estimated_steps,
        )
        if self.solution is not None:
            out["solution"] = list(self.solution)
        return out

    def content_id(self) -> str:
        """A task id from what the task is (instruction, setup, evaluator), not who wrote it.

        Two workers that synthesise the same task publish it under one id, so the compacted
        `tasks` topic keeps it once.
        """
        body = {
            "instruction": self.task.instruction,
            "config": self.task.config,
            "evaluator": self.task.evaluator.to_dict(),
        }
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return f"verigen-{self.app}-{digest[:12]}"


@dataclass
class Validation:
    """Why a task was accepted: the paper's validation record, kept with the task."""

    rule_pass: bool | None  # the rule validator passed it; None when it was switched off
    execution_pass: bool  # a solution (its own or the checker's) scored 1.0 on a live desktop
    llm_verdict: str | None  # the judger's "accept" / "reject"; None when it was switched off
    llm_score: float | None  # the judger's score, 0-10
    llm_reasoning: str = ""
    checker_pass: bool | None = None  # the checker reached 1.0; None when it did not run
    repairs: int = 0  # fix-agent rounds before acceptance
    rounds: int = 1
    untouched_score: float | None = None  # what the verifier said before anything was done
    solved_score: float | None = None  # ...and after the solution
    judge_statuses: list[str] = field(default_factory=list)  # sandboxed judges' statuses
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # this candidate's LLM calls, every round
    seconds: float = 0.0  # from the request to the decision
    candidate_id: str = ""
    request_id: str = ""
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


def accepted_task(
    candidate: Candidate, validation: Validation, provenance: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The task JSON an accepted candidate becomes: id from content, source, validation.

    `provenance` (trajectory-guided tasks): `kind` ("decompose" | "compose"), `parents`
    (task ids) and what the kind was derived from.
    """
    out = candidate.to_dict()
    out["id"] = candidate.content_id()
    out["source"] = "verigen"
    out["validation"] = validation.to_dict()
    if provenance is not None:
        out["provenance"] = provenance
    return out


def task_event(task: dict[str, Any]) -> TaskEvent:
    """The `tasks` event of an accepted task."""
    return TaskEvent(task_id=task["id"], task=task, source="verigen", split="train")
