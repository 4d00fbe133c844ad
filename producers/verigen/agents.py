"""VeriGen's agents: each a prompt plus a parser with a strict output schema.

- **proposer**: from an app's knowledge document and a live observation of the desktop,
  writes a candidate (candidate.py's JSON);
- **judger**: reviews a candidate without running it (unambiguous, meaningful, verifier
  logically sound) and gives a verdict, its reasoning and a score out of 10;
- **checker**: acts on a live desktop through the probe to reach the goal, one action per
  turn, then runs the verifier; a run that scores 1.0 is a solution;
- **fixer**: rewrites a candidate from the validator's, judger's and checker's findings;
- **decomposer** (trajectory-guided): from a task the policy fails, where its rollouts
  leave the reference and an intermediate sub-goal, writes an easier task targeting it;
- **composer** (trajectory-guided): from tasks the policy solves, writes the instruction of
  one task asking for all of them (compose.py joins their setups and verifiers).

Every reply must be one JSON object (optionally in a ```json fence). A reply that does not
parse or does not fit the schema is sent back with the reason and asked again
(`parse_retries` times); after that the call is an `AgentResult` with `ok=False` and the
failure, never an exception. An endpoint that is down gives a failure of kind `llm`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import msgspec

from producers.verigen.candidate import APPS, DIFFICULTIES, MAX_STEPS, Candidate, CandidateError
from producers.verigen.compose import CompositionError, compose_candidate
from producers.verigen.llm import LLMClient, LLMRejected, LLMUnavailable, Usage
from producers.verigen.probe import ProbeAPI, ProbeError, probe_session
from runtime.envs.desktop.actions import ACTIONS, ActionError, parse_action
from runtime.envs.tasks.getters import GETTERS
from runtime.envs.tasks.metrics import metric_names
from runtime.envs.tasks.setup import SETUP_STEPS
from runtime.errors import OutcomeError

__all__ = [
    "AgentResult",
    "Checker",
    "CheckerResult",
    "Composer",
    "Composition",
    "Decomposer",
    "Fixer",
    "Judger",
    "ParseError",
    "Proposer",
    "SubTask",
    "Verdict",
    "extract_json",
    "parse_candidate",
    "parse_composition",
    "parse_subtask",
    "parse_turn",
    "parse_verdict",
]

T = TypeVar("T")
_RAW_KEPT = 4000  # characters of a failed reply kept in the record


class ParseError(OutcomeError, ValueError):
    """A reply does not fit the agent's output schema; the message says why."""


@dataclass
class AgentResult(Generic[T]):
    """What an agent call gave: a parsed value, or the failure after every retry."""

    ok: bool
    value: T | None = None
    failure: str = ""  # "malformed: ..." or "llm: ..." when not ok
    raw: str = ""  # the last reply's text (cut)
    attempts: int = 0  # model calls made
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


class Verdict(msgspec.Struct, forbid_unknown_fields=True):
    """The judger's review of a candidate."""

    verdict: Literal["accept", "reject"]
    score: float  # 0-10
    reasoning: str
    issues: list[str] = []


# -- parsing ----------------------------------------------------------------------------
def extract_json(text: str) -> Any:
    """The JSON object in a reply: a ```json fenced block, else the first {...} that parses."""
    fenced = text.split("```")
    for i in range(1, len(fenced), 2):
        block = fenced[i].removeprefix("json").removeprefix("JSON").strip()
        try:
            return json.loads(block)
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        return value
    raise ParseError("the reply holds no JSON object")


def parse_candidate(text: str, app: str) -> Candidate:
    """A candidate from a proposer's or fixer's reply; `app` is the request's if left out."""
    raw = extract_json(text)
    if not isinstance(raw, dict):
        raise ParseError("the reply's JSON is not an object")
    raw.setdefault("app", app)  # the request decides the app; do not fail a reply over it
    try:
        return Candidate.from_dict(raw)
    except CandidateError as exc:
        raise ParseError("; ".join(exc.reasons)) from exc


def parse_verdict(text: str) -> Verdict:
    """A judger's verdict; the score must lie in [0, 10]."""
    raw = extract_json(text)
    try:
        verdict = msgspec.convert(raw, Verdict)
    except msgspec.ValidationError as exc:
        raise ParseError(f"the verdict does not fit its schema: {exc}") from exc
    if not 0 <= verdict.score <= 10:
        raise ParseError(f"`score` must be from 0 to 10, not {verdict.score}")
    return verdict


def parse_turn(text: str) -> tuple[str, dict[str, Any]]:
    """A checker turn: (thought, action), the action valid in the controller's action space."""
    raw = extract_json(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("action"), dict):
        raise ParseError('the reply must be {"thought": "...", "action": {"action": ...}}')
    thought = raw.get("thought", "")
    if not isinstance(thought, str):
        raise ParseError("`thought` must be a string")
    try:
        parse_action(raw["action"])
    except ActionError as exc:
        raise ParseError(f"invalid action: {exc}") from exc
    return thought, raw["action"]


@dataclass(frozen=True)
class SubTask:
    """A decomposer's reply: the intermediate sub-goal it targets and the task written for it."""

    subgoal: str
    candidate: Candidate


class Composition(msgspec.Struct, forbid_unknown_fields=True):
    """A composer's reply: what the composed task asks, in words (the rest is joined by code)."""

    instruction: str
    explanation: str
    difficulty: Literal["medium", "hard"]
    estimated_steps: int


def parse_subtask(text: str, app: str, max_steps: int = MAX_STEPS) -> SubTask:
    """A decomposer's sub-task: `{"subgoal", "task"}`, the task no longer than its parent."""
    raw = extract_json(text)
    if not isinstance(raw, dict) or set(raw) != {"subgoal", "task"}:
        raise ParseError('the reply must be {"subgoal": "...", "task": {...}} and nothing else')
    subgoal = raw["subgoal"]
    if not isinstance(subgoal, str) or not subgoal.strip():
        raise ParseError("`subgoal` must say, in a sentence, which intermediate state is targeted")
    candidate = parse_candidate(json.dumps(raw["task"]), app)
    if candidate.estimated_steps > max_steps:
        raise ParseError(
            f"a sub-task must be easier than its parent: `estimated_steps` "
            f"{candidate.estimated_steps} exceeds the parent's {max_steps}"
        )
    return SubTask(subgoal.strip(), candidate)


def parse_composition(text: str, parents: list[dict[str, Any]]) -> Candidate:
    """A composer's instruction joined with its parents' setups, conjoined verifiers, solutions."""
    raw = extract_json(text)
    try:
        written = msgspec.convert(raw, Composition)
    except msgspec.ValidationError as exc:
        raise ParseError(f"the reply does not fit its schema: {exc}") from exc
    if not written.instruction.strip() or not written.explanation.strip():
        raise ParseError("`instruction` and `explanation` must not be empty")
    least = max(_steps(p) for p in parents)
    if not least <= written.estimated_steps <= MAX_STEPS:
        raise ParseError(
            f"`estimated_steps` must be from {least} (its longest part) to {MAX_STEPS}, "
            f"not {written.estimated_steps}"
        )
    try:
        raw_task = compose_candidate(
            parents, instruction=written.instruction.strip(), explanation=written.explanation,
            difficulty=written.difficulty, estimated_steps=written.estimated_steps,
        )  # fmt: skip
    except CompositionError as exc:  # the seed's fault, not the reply's: no use asking again
        raise ValueError(f"the parents cannot be composed: {exc}") from exc
    return Candidate.from_dict(raw_task)


def _steps(task: dict[str, Any]) -> int:
    """A task's length: its `estimated_steps`, else its solution's actions."""
    steps = task.get("estimated_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    return max(1, len(task.get("solution") or []))


# -- prompts ----------------------------------------------------------------------------
_ACTIONS_TEXT = f"""Actions are JSON objects with coordinates on a 1000x1000 grid of the screen:
left_click, right_click, double_click, triple_click, mouse_move ({{"coordinate": [x, y]}});
left_click_drag ({{"start_coordinate": [x, y], "coordinate": [x, y]}}); key ({{"text": "ctrl+s"}},
xdotool key names, several separated by spaces); type ({{"text": "..."}}, "\\n" is Return);
scroll ({{"coordinate", "scroll_direction": "up|down|left|right", "scroll_amount"}});
wait ({{"duration": seconds}}); write_file ({{"text": "/abs/path", "content": "..."}});
done, fail, answer ({{"text": "..."}}). All names: {", ".join(sorted(ACTIONS))}."""

_CANDIDATE_SCHEMA = f"""A task is ONE JSON object in OSWorld's format with VeriGen's metadata beside it:
{{
  "id": "short-kebab-name",
  "instruction": "what the user asks, with exact names and values so one outcome is right",
  "config": [setup steps, run in order before the agent starts],
  "evaluator": {{"func": METRIC, "result": GETTER, "expected": GETTER, "options": {{...}}}},
  "related_apps": ["..."],
  "app": "{" | ".join(APPS)}",
  "explanation": "what the task asks and how the evaluator decides",
  "difficulty": "{" | ".join(DIFFICULTIES)}",
  "estimated_steps": a whole number from 1 to {MAX_STEPS},
  "solution": [the actions that solve it]
}}
Setup steps ({{"type": T, "parameters": {{...}}}}): {", ".join(SETUP_STEPS)}.
Getters ({{"type": T, ...}}): {", ".join(GETTERS)}.
Metrics: {", ".join(metric_names())}.
A verifier can be a Python judge run in a sandbox:
  "evaluator": {{"func": "sandboxed_judge",
    "result": {{"type": "vm_file", "path": "/home/user/out.txt", "dest": "out.txt"}},
    "options": {{"source": "def judge(artifacts):\\n    ...", "function": "judge"}}}}
It is called with a dict: artifacts["result"] and artifacts["expected"] (a file a getter
fetched arrives as a path, or None when missing; other values as their JSON). It returns a
number from 0.0 to 1.0, uses only the standard library, openpyxl or python-docx, and has
no network, no subprocesses and 10 seconds.
Rules:
- Right after setup, before the agent acts, the verifier MUST give 0.0 (a judge returns
  0.0 when its file is missing or unchanged).
- The setup creates every input file itself (execute steps writing under /home/user):
  there are no other files and no network; the verifier reads only /home/user.
- Every setup command must succeed (exit 0).
- {_ACTIONS_TEXT}
Reply with the JSON object only."""

_PROPOSER = f"""You are the proposer of VeriGen. You write new, realistic tasks for training
computer-use agents on a Linux desktop; each task has a verifier that checks the desktop's
final state automatically.

{_CANDIDATE_SCHEMA}"""

_JUDGER = """You are the judger of VeriGen. You review a proposed desktop task and its verifier
without running them. Check that:
1. the instruction is unambiguous: a competent user knows exactly what outcome is wanted;
2. the task is meaningful: something a real user would ask, doable on the desktop;
3. the verifier is logically sound: it passes exactly the outcomes the instruction asks
   for, fails the desktop as set up, and does not depend on anything the instruction does
   not fix (a judge must handle a missing file);
4. the setup prepares everything the instruction refers to.
Reply with ONE JSON object only:
{"verdict": "accept" or "reject", "score": 0-10, "reasoning": "...", "issues": ["..."]}
Score 8-10 for a clear, sound task; below 6 if any check fails."""

_CHECKER = f"""You are the checker of VeriGen. You operate a Linux desktop (1280x800) to
complete a task, one action per turn. Each turn shows the screen as a list of elements
(role, name, centre on the 1000x1000 grid) and a terminal's last lines when one is open.
{_ACTIONS_TEXT}
Reply with ONE JSON object only: {{"thought": "...", "action": {{"action": ...}}}}.
When the task is complete, reply {{"thought": "...", "action": {{"action": "done"}}}}."""

_FIXER = f"""You are the fixer of VeriGen. A proposed desktop task failed review. Rewrite it so
that it passes every check, keeping its intent where you can: fix the setup, the verifier,
the instruction or the solution as the findings require.

{_CANDIDATE_SCHEMA}"""

_DECOMPOSER = f"""You are the decomposer of VeriGen. A policy keeps failing a desktop task. You
see the task, its reference solution (the actions that change the desktop, numbered from 0),
where the failed rollouts leave it (the first reference action they do not reproduce) and
one intermediate sub-goal: the state the reference reaches after a given action. Write ONE
easier task whose target is that sub-goal, so the policy can practise the part it gets
wrong. The task stands alone: its setup creates every input itself, and it may also create
the progress the reference makes before the part it practises (so the task starts later).
It must take no more steps than the original task, and its verifier checks the sub-goal's
state only.

Reply with ONE JSON object only: {{"subgoal": "the intermediate state, in one sentence",
"task": TASK}}, where TASK is:
{_CANDIDATE_SCHEMA}"""

_COMPOSER = """You are the composer of VeriGen. A policy solves each of the desktop tasks below
reliably. They become one harder task with several objectives on one desktop: every task's
setup runs, and the new task passes only when every one of their verifiers passes. Write
what the new task asks: ONE natural request that asks for every objective, keeping every
exact file name, path and value each original instruction gives (their verifiers check
them), in an order a user would do them.
Reply with ONE JSON object only:
{"instruction": "...", "explanation": "what it asks and that every objective is verified",
 "difficulty": "medium" or "hard", "estimated_steps": a whole number, at least the longest
 part's steps}"""


def _pretty(candidate: Candidate) -> str:
    return json.dumps(candidate.to_dict(), indent=1, ensure_ascii=False)


# -- agents -----------------------------------------------------------------------------
class _Agent:
    role = "agent"
    system = ""

    def __init__(
        self, llm: LLMClient, *, parse_retries: int = 2, max_tokens: int | None = None
    ) -> None:
        self.llm = llm
        self.parse_retries = parse_retries  # re-asks after a malformed reply
        self.max_tokens = max_tokens

    async def _ask(self, user: str, parse: Any) -> AgentResult:
        """Ask until a reply parses (or retries run out); never raises for a bad reply."""
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        result = AgentResult(ok=False)
        started = time.monotonic()
        for _ in range(self.parse_retries + 1):
            try:
                reply = await self.llm.chat(messages, kind=self.role, max_tokens=self.max_tokens)
            except (LLMUnavailable, LLMRejected) as exc:
                result.usage.failures += 1
                result.failure = f"llm: {exc}"
                break
            result.attempts += 1
            result.usage.add(reply)
            result.raw = reply.text[:_RAW_KEPT]
            try:
                result.value = parse(reply.text)
            except ParseError as exc:
                result.failure = f"malformed: {exc}"
                messages += [
                    {"role": "assistant", "content": reply.text[:_RAW_KEPT]},
                    {"role": "user", "content": f"Your reply could not be used: {exc}. "
                     "Reply again with only the JSON object described above."},
                ]  # fmt: skip
                continue
            result.ok, result.failure = True, ""
            break
        result.seconds = time.monotonic() - started
        return result


class Proposer(_Agent):
    """Writes a candidate from an app's knowledge document and a live observation."""

    role = "proposer"
    system = _PROPOSER

    async def propose(
        self, app: str, knowledge: str, observation: str, *, request: str, hint: str = ""
    ) -> AgentResult[Candidate]:
        """One candidate for `app`."""
        user = (
            f"# Knowledge: {app}\n{knowledge}\n\n"
            f"# What the desktop shows now (the app in its starting state)\n{observation}\n\n"
            f"# Request {request}\nTheme: {hint or 'your choice'}. Write one new {app} task."
        )
        return await self._ask(user, lambda text: parse_candidate(text, app))


class Judger(_Agent):
    """Reviews a candidate statically: verdict, reasoning, score."""

    role = "judger"
    system = _JUDGER

    async def review(self, candidate: Candidate) -> AgentResult[Verdict]:
        """The judger's verdict on one candidate."""
        return await self._ask(f"# Proposed task\n{_pretty(candidate)}", parse_verdict)


class Fixer(_Agent):
    """Repairs a candidate from the findings against it."""

    role = "fixer"
    system = _FIXER

    async def fix(self, candidate: Candidate, findings: list[str]) -> AgentResult[Candidate]:
        """A rewritten candidate that should answer every finding."""
        listed = "\n".join(f"- {f}" for f in findings) or "- (none given)"
        user = f"# The task\n{_pretty(candidate)}\n\n# Findings\n{listed}\n\nReply with the fixed task."
        return await self._ask(user, lambda text: parse_candidate(text, candidate.app))


class Decomposer(_Agent):
    """Writes an easier task targeting an intermediate sub-goal of a task the policy fails."""

    role = "decomposer"
    system = _DECOMPOSER

    async def decompose(
        self, app: str, knowledge: str, seed: dict[str, Any]
    ) -> AgentResult[SubTask]:
        """One sub-task for a decompose seed (augment.py: parent, reference, deviation, sub-goal)."""
        parent = dict(seed["parent"])
        reference = seed.get("reference") or []
        deviation = seed.get("deviation") or {}
        subgoal = seed.get("subgoal") or {}
        through = int(subgoal.get("through", 0))
        listed = "\n".join(f"{i}. {json.dumps(a)}" for i, a in enumerate(reference))
        index = int(deviation.get("index", 0))
        if index >= len(reference):
            where = "They reproduce every reference action and still fail."
        else:
            observed = "; ".join(
                f"{json.dumps(o['action']) if o.get('action') else 'stop'} ({o['rollouts']} rollouts)"
                for o in deviation.get("observed") or []
            )  # fmt: skip
            where = (
                f"They reproduce actions 0..{index - 1} and then, instead of action {index}, "
                f"do: {observed or 'something else'}."
                if index
                else f"Instead of action 0 they do: {observed or 'something else'}."
            )
        user = (
            f"# Knowledge: {app}\n{knowledge}\n\n"
            f"# The task the policy fails (pass rate {seed.get('pass_rate', 0):g} over "
            f"{seed.get('rollouts', 0)} rollouts)\n{json.dumps(parent, indent=1)}\n\n"
            f"# Reference solution (actions that change the desktop)\n{listed}\n\n"
            f"# Where the failed rollouts deviate\n{where} Deviation points over the failed "
            f"rollouts: {json.dumps(deviation.get('histogram', {}))}.\n\n"
            f"# Sub-goal {int(subgoal.get('index', 0)) + 1} of {subgoal.get('of', 1)}\n"
            f"The state after reference actions 0..{through}. Write the task for it."
        )
        limit = _steps(parent)
        return await self._ask(user, lambda text: parse_subtask(text, app, limit))


class Composer(_Agent):
    """Writes the instruction of one task that asks for several solved tasks at once."""

    role = "composer"
    system = _COMPOSER

    async def compose(self, seed: dict[str, Any]) -> AgentResult[Candidate]:
        """The composed candidate of a compose seed (augment.py: the parent tasks)."""
        parents = list(seed["tasks"])
        listed = "\n\n".join(
            f"## Task {i + 1}: {p['id']}\nInstruction: {p['instruction']}\n"
            f"Verifier: {json.dumps(p['evaluator'])[:1500]}\nSteps: {_steps(p)}"
            for i, p in enumerate(parents)
        )
        return await self._ask(
            f"# Tasks to combine\n{listed}\n\nWrite the combined task.",
            lambda text: parse_composition(text, parents),
        )


@dataclass
class CheckerResult:
    """The checker's episode: its actions, the verifier's score and whether it reached 1.0."""

    passed: bool
    score: float | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)  # played, in order
    steps: list[dict[str, Any]] = field(default_factory=list)  # per turn: thought, action, outcome
    failure: str = ""  # why it could not run or finish ("setup: ...", "malformed: ...")
    infrastructure: bool = False  # the probe or the model failed, not the task
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """A JSON-ready record (the steps without long thoughts)."""
        return {
            "passed": self.passed,
            "score": self.score,
            "turns": len(self.steps),
            "actions": self.actions,
            "steps": [{**s, "thought": s.get("thought", "")[:300]} for s in self.steps],
            "failure": self.failure,
        }


class Checker(_Agent):
    """Acts on a live desktop to reach a candidate's goal, then runs its verifier."""

    role = "checker"
    system = _CHECKER

    def __init__(self, llm: LLMClient, *, max_turns: int = 15, max_bad_turns: int = 3,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(llm, **kwargs)
        self.max_turns = max_turns
        self.max_bad_turns = max_bad_turns  # turns in a row without a usable action end it

    async def check(self, probe: ProbeAPI, candidate: Candidate) -> CheckerResult:
        """Play one episode on a fresh desktop set up for the candidate, then score it."""
        started = time.monotonic()
        out = CheckerResult(passed=False)
        try:
            async with probe_session(probe, candidate.task.to_dict(), purpose="check") as info:
                if not info.ok:
                    out.failure = f"setup: {info.setup_error or '; '.join(info.failed_commands)}"
                else:
                    await self._episode(probe, info.session_id, candidate, out)
        except ProbeError as exc:
            out.failure, out.infrastructure = f"probe: {exc}", True
        out.seconds = time.monotonic() - started
        return out

    async def _episode(
        self, probe: ProbeAPI, session: str, candidate: Candidate, out: CheckerResult
    ) -> None:
        bad = 0
        feedback = ""
        for turn in range(self.max_turns):
            observation = await probe.observe(session)
            history = "\n".join(
                f"{i}. {json.dumps(s['action'])} -> {s['outcome']}" for i, s in enumerate(out.steps)
            )
            user = (
                f"Task: {candidate.task.instruction}\n"
                f"Step {turn + 1} of at most {self.max_turns}.\n"
                f"Actions so far:\n{history or '(none)'}\n{feedback}\n"
                f"# Screen\n{observation.get('text') or '(no elements)'}"
            )
            result = await self._ask(user, parse_turn)
            out.usage.merge(result.usage)
            if not result.ok:
                if result.failure.startswith("llm"):
                    out.failure, out.infrastructure = result.failure, True
                    return
                bad += 1
                out.steps.append({"thought": "", "action": None, "outcome": result.failure})
                if bad >= self.max_bad_turns:
                    out.failure = f"{bad} turns in a row without a usable action: {result.failure}"
                    break
                continue
            bad = 0
            thought, action = result.value
            step = await probe.act(session, action)
            out.actions.append(action)
            outcome = "ok" if step.get("ok") else f"refused: {step.get('error')}"
            feedback = (
                "" if step.get("ok") else f"Your last action was refused: {step.get('error')}"
            )
            out.steps.append({"thought": thought, "action": action, "outcome": outcome})
            if step.get("terminal"):
                break
        evaluation = await probe.evaluate(session, out.actions)
        if evaluation.get("task_error"):
            out.failure = f"the verifier cannot run: {evaluation['task_error']}"
            return
        out.score = float(evaluation.get("score") or 0.0)
        out.passed = out.score == 1.0
        if not out.passed and not out.failure:
            out.failure = f"the verifier scored {out.score:g} after {len(out.actions)} actions"
