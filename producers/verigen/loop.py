"""The synthesis loop: propose → validate → judge ∥ check → fix → … up to N rounds.

One request becomes one candidate's history:

    observe the app (probe) → proposer writes a candidate
    round r = 0 .. max_rounds-1:
        rule validator (setup, untouched 0.0, solution 1.0 on live desktops)
        if it passed (or is off): judger ∥ checker
        accepted  ⇔  validator passed (or off) ∧ judger accepts with score ≥ min (or off)
                     ∧ execution passed: a solution scored 1.0 from a 0.0 start on a live
                       desktop — the candidate's own (validator) or the checker's run
        else: the fixer rewrites the candidate from every finding, and the next round starts

A request's `mode` picks who writes the first candidate: `explore` (the proposer, from the
app's knowledge and a live look at it), `decompose` or `compose` (trajectory-guided: the
decomposer or the composer from the request's `seed`, see augment.py); the rounds are the
same for every mode, and an accepted trajectory-guided task carries its `provenance`.

Every stage is a `SynthesisEvent` (topic `synthesis`, keyed by candidate), so a run is
replayed and audited from the log alone; an accepted task also goes to `tasks` with its
validation record. The request's switches turn the rule validator, the judger, the fixer
or the checker off (the paper's ablation). The model or the desktops failing ends the
candidate as `failed` (not a verdict on it); a candidate that did not pass is `rejected`
with its findings.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from producers.verigen.agents import (
    AgentResult,
    Checker,
    CheckerResult,
    Composer,
    Decomposer,
    Fixer,
    Judger,
    Proposer,
)
from producers.verigen.candidate import (
    Candidate,
    Validation,
    accepted_task,
    task_event,
)
from producers.verigen.knowledge import app_knowledge
from producers.verigen.llm import LLMClient, Usage
from producers.verigen.probe import ProbeAPI, ProbeError, probe_session
from producers.verigen.validator import RuleValidator, ValidationReport, ValidatorLimits
from runtime.errors import ConfigError, TaskError
from topics.events import Event, SynthesisEvent, SynthesisRequest

__all__ = ["FINAL_STAGES", "MODES", "LoopSettings", "Outcome", "Synthesizer", "Emit"]

log = logging.getLogger(__name__)

FINAL_STAGES = ("accepted", "rejected", "failed")
MODES = ("explore", "decompose", "compose")
Emit = Callable[[str, Event], None]
_OBSERVATION_CHARS = 6000  # of the live observation shown to the proposer


@dataclass(frozen=True)
class LoopSettings:
    """A worker's loop settings (the ablation switches travel with each request)."""

    judge_min_score: float = 6.0  # the judger must accept with at least this score (0-10)
    checker_max_turns: int = 15
    parse_retries: int = 2  # re-asks after a malformed reply, per agent call
    max_tokens: int | None = None  # per reply (default: the LLM settings' bound)
    synthesis_timeout_s: float = 1800.0  # one candidate, every round
    # Reuse an app's starting-state observation this long (0: a live look per proposal).
    # The state is the same fresh desktop each time, and a look at Calc costs ~15 s of desktop.
    observation_ttl_s: float = 0.0
    validator: ValidatorLimits = field(default_factory=ValidatorLimits)


@dataclass
class Outcome:
    """How one request ended."""

    request_id: str
    candidate_id: str
    stage: str  # accepted | rejected | failed
    reasons: list[str]
    task: dict[str, Any] | None = None  # the accepted task JSON
    rounds: int = 0
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


class Synthesizer:
    """Runs the loop for one request at a time (share one across many concurrent requests)."""

    def __init__(
        self,
        llm: LLMClient,
        probe: ProbeAPI,
        settings: LoopSettings | None = None,
        *,
        worker_id: str = "",
    ) -> None:
        self.llm = llm
        self.probe = probe
        self.settings = settings or LoopSettings()
        s = self.settings
        agent_kw = {"parse_retries": s.parse_retries, "max_tokens": s.max_tokens}
        self.proposer = Proposer(llm, **agent_kw)
        self.judger = Judger(llm, **agent_kw)
        self.fixer = Fixer(llm, **agent_kw)
        self.checker = Checker(llm, max_turns=s.checker_max_turns, **agent_kw)
        self.decomposer = Decomposer(llm, **agent_kw)
        self.composer = Composer(llm, **agent_kw)
        self.validator = RuleValidator(probe, s.validator)
        self.worker_id = worker_id
        self._looks: dict[str, tuple[float, str]] = {}  # app -> (when, observation text)
        self._looking: dict[str, asyncio.Lock] = {}

    async def observation(self, app: str, setup: list[dict[str, Any]]) -> str:
        """The app in its starting state as text: live, or a recent look within the TTL."""
        ttl = self.settings.observation_ttl_s
        if ttl <= 0:
            return await _look(self.probe, setup)
        async with self._looking.setdefault(app, asyncio.Lock()):  # one look for all waiting
            seen = self._looks.get(app)
            if seen is None or time.monotonic() - seen[0] > ttl:
                text = await _look(self.probe, setup)
                if not text.startswith("(no observation"):
                    self._looks[app] = (time.monotonic(), text)
                return text
            return seen[1]

    async def synthesize(self, request: SynthesisRequest, emit: Emit) -> Outcome:
        """Run one request to its final stage, emitting every stage; never raises for it."""
        run = _Run(self, request, emit)
        try:
            async with asyncio.timeout(self.settings.synthesis_timeout_s):
                return await run.loop()
        except TimeoutError:
            return run.finish("failed", [f"over {self.settings.synthesis_timeout_s:g} s"])
        except (ProbeError, ConfigError) as exc:
            return run.finish("failed", [f"{type(exc).__name__}: {exc}"])
        except Exception as exc:  # a bug must end this candidate, not the worker
            log.exception("%s: the loop failed", run.candidate_id)
            return run.finish("failed", [f"{type(exc).__name__}: {exc}"])


class _Run:
    """One request's pass through the loop."""

    def __init__(self, syn: Synthesizer, request: SynthesisRequest, emit: Emit) -> None:
        self.syn = syn
        self.request = request
        self._emit = emit
        self.candidate_id = f"{request.request_id}@{uuid.uuid4().hex[:7]}"
        self.started = time.monotonic()
        self.usage = Usage()
        self.round = 0
        self.repairs = 0
        self.candidate: Candidate | None = None
        self.finished: Outcome | None = None
        self.provenance: dict[str, Any] | None = None  # a trajectory-guided task's origin

    def emit(
        self,
        stage: str,
        *,
        ok: bool = True,
        reasons: list[str] | None = None,
        detail: dict[str, Any] | None = None,
        usage: Usage | None = None,
        seconds: float = 0.0,
        task_id: str = "",
        final: bool = False,
        candidate: dict[str, Any] | None = None,
    ) -> None:
        if candidate is None and self.candidate is not None:
            candidate = self.candidate.to_dict()
        event = SynthesisEvent(
            candidate_id=self.candidate_id,
            request_id=self.request.request_id,
            stage=stage,
            round=self.round,
            run_id=self.request.run_id,
            app=self.request.app,
            ok=ok,
            final=final,
            reasons=list(reasons or []),
            candidate=candidate,
            detail=detail or {},
            task_id=task_id,
            usage=(usage or Usage()).to_dict(),
            seconds=round(seconds, 3),
            worker_id=self.syn.worker_id,
        )
        self._emit("synthesis", event)

    def finish(self, stage: str, reasons: list[str], task: dict[str, Any] | None = None) -> Outcome:
        if self.finished is not None:  # already final (a timeout racing the last stage)
            return self.finished
        seconds = time.monotonic() - self.started
        if stage != "accepted" and not reasons:
            reasons = ["no reason recorded"]  # a final stage that is no acceptance says why
        self.emit(
            stage,
            ok=stage == "accepted",
            reasons=reasons,
            detail={"repairs": self.repairs, "rounds": self.round + 1,
                    "total_usage": self.usage.to_dict()},
            usage=Usage(),
            seconds=seconds,
            task_id=task["id"] if task else "",
            final=True,
            candidate=task,  # an accepted event carries the task as published
        )  # fmt: skip
        self.finished = Outcome(
            self.request.request_id, self.candidate_id, stage, reasons, task,
            self.round + 1, self.usage, seconds,
        )  # fmt: skip
        return self.finished

    def _count(self, result: AgentResult | CheckerResult) -> None:
        self.usage.merge(result.usage)

    async def _propose(self) -> tuple[AgentResult, dict[str, Any]]:
        """The first candidate, by the request's mode: (the agent's result, event detail)."""
        req = self.request
        knowledge = app_knowledge(req.app)
        if req.mode == "decompose":
            result = await self.syn.decomposer.decompose(req.app, knowledge.document, req.seed)
            subgoal = result.value.subgoal if result.ok else ""
            result.value = result.value.candidate if result.ok else None
            self.provenance = {
                "kind": "decompose", "parents": list(req.seed.get("parents", [])),
                "subgoal": subgoal, "through": req.seed.get("subgoal", {}).get("through"),
                "deviation_index": req.seed.get("deviation", {}).get("index"),
                "pass_rate": req.seed.get("pass_rate"), "run_id": req.run_id,
            }  # fmt: skip
            return result, {"mode": req.mode, "parents": self.provenance["parents"]}
        if req.mode == "compose":
            result = await self.syn.composer.compose(req.seed)
            self.provenance = {
                "kind": "compose", "parents": list(req.seed.get("parents", [])),
                "similarity": req.seed.get("similarity"), "run_id": req.run_id,
            }  # fmt: skip
            return result, {"mode": req.mode, "parents": self.provenance["parents"]}
        if req.mode != "explore":
            raise ConfigError(f"unknown synthesis mode {req.mode!r} (one of {', '.join(MODES)})")
        observation = await self.syn.observation(req.app, knowledge.observation_setup)
        result = await self.syn.proposer.propose(
            req.app, knowledge.document, observation, request=req.request_id, hint=req.hint
        )
        return result, {"observation_chars": len(observation)}

    async def loop(self) -> Outcome:
        req = self.request
        proposed, more = await self._propose()
        self._count(proposed)
        self.candidate = proposed.value
        self.emit(
            "propose", ok=proposed.ok, reasons=[proposed.failure] if not proposed.ok else [],
            detail=_agent_detail(proposed) | more, usage=proposed.usage, seconds=proposed.seconds,
        )  # fmt: skip
        if not proposed.ok:
            who = {"decompose": "decomposer", "compose": "composer"}.get(req.mode, "proposer")
            return self.finish("failed", [f"the {who} gave no candidate: {proposed.failure}"])
        findings: list[str] = []
        for rnd in range(max(1, req.max_rounds)):
            self.round = rnd
            findings, accepted = await self._round()
            if accepted is not None:
                return self.finish("accepted", [], accepted)
            if self.finished is not None:
                return self.finished
            if not req.use_fixer or self.round == req.max_rounds - 1:
                break
            fixed = await self.syn.fixer.fix(self.candidate, findings)
            self._count(fixed)
            if fixed.ok:
                self.candidate = fixed.value
                self.repairs += 1
            self.emit(
                "fix", ok=fixed.ok, reasons=[fixed.failure] if not fixed.ok else [],
                detail=_agent_detail(fixed) | {"findings": findings},
                usage=fixed.usage, seconds=fixed.seconds,
            )  # fmt: skip
            if not fixed.ok:
                if fixed.failure.startswith("llm"):
                    return self.finish("failed", [f"the fixer failed: {fixed.failure}"])
                return self.finish("rejected", [*findings, f"the fixer failed: {fixed.failure}"])
        return self.finish("rejected", findings)

    async def _round(self) -> tuple[list[str], dict[str, Any] | None]:
        """One validate → judge ∥ check round: (findings, the accepted task or None)."""
        req, syn = self.request, self.syn
        assert self.candidate is not None
        findings: list[str] = []
        report: ValidationReport | None = None
        if req.use_validator:
            t0 = time.monotonic()
            try:
                report = await syn.validator.validate(self.candidate.to_dict())
            except TaskError as exc:  # the probe refused the task as malformed
                report = ValidationReport(accepted=False, reasons=[str(exc)])
            self.emit("validate", ok=report.accepted, reasons=report.reasons,
                      detail=report.to_dict(), seconds=time.monotonic() - t0)  # fmt: skip
            if not report.accepted:
                return report.reasons, None
        judged: AgentResult | None = None
        checked: CheckerResult | None = None
        jobs = []
        if req.use_judger:
            jobs.append(syn.judger.review(self.candidate))
        if req.use_checker:
            jobs.append(syn.checker.check(syn.probe, self.candidate))
        results = await asyncio.gather(*jobs)
        if req.use_judger:
            judged = results[0]
        if req.use_checker:
            checked = results[-1]
        judge_ok = True
        if judged is not None:
            self._count(judged)
            verdict = judged.value
            judge_ok = bool(
                judged.ok and verdict.verdict == "accept"
                and verdict.score >= syn.settings.judge_min_score
            )  # fmt: skip
            reasons = [] if judge_ok else _judger_findings(judged, syn.settings.judge_min_score)
            findings += reasons
            self.emit("judge", ok=judge_ok, reasons=reasons, detail=_agent_detail(judged),
                      usage=judged.usage, seconds=judged.seconds)  # fmt: skip
            if not judged.ok and judged.failure.startswith("llm"):
                self.finish("failed", [f"the judger failed: {judged.failure}"])
                return findings, None
        if checked is not None:
            self._count(checked)
            reasons = [] if checked.passed else [f"checker: {checked.failure}"]
            self.emit("check", ok=checked.passed, reasons=reasons, detail=checked.summary(),
                      usage=checked.usage, seconds=checked.seconds)  # fmt: skip
            if checked.infrastructure:
                self.finish("failed", [f"the checker could not run: {checked.failure}"])
                return findings, None
        solution_ok = report is not None and report.solved_score == 1.0
        checker_ok = checked is not None and checked.passed
        if not (solution_ok or checker_ok):
            findings += [f"checker: {checked.failure}"] if checked is not None else []
            findings.append(
                "not proven solvable: no solution scored 1.0 from a 0.0 start on a live desktop"
                + (" (give a `solution`)" if self.candidate.solution is None else "")
            )
        if findings or not judge_ok:
            return findings, None
        if checker_ok and not solution_ok:  # publish only a solution proven on a desktop
            self.candidate = self.candidate.with_solution(checked.actions)
        validation = self._validation(report, judged, checked, solution_ok or checker_ok)
        task = accepted_task(self.candidate, validation, self.provenance)
        self._emit("tasks", task_event(task))
        return [], task

    def _validation(
        self,
        report: ValidationReport | None,
        judged: AgentResult | None,
        checked: CheckerResult | None,
        executed: bool,
    ) -> Validation:
        verdict = judged.value if judged is not None and judged.ok else None
        solved = report.solved_score if report is not None else None
        if solved is None and checked is not None:
            solved = checked.score
        return Validation(
            rule_pass=report.accepted if report is not None else None,
            execution_pass=executed,
            llm_verdict=verdict.verdict if verdict else None,
            llm_score=verdict.score if verdict else None,
            llm_reasoning=verdict.reasoning if verdict else "",
            checker_pass=checked.passed if checked is not None else None,
            repairs=self.repairs,
            rounds=self.round + 1,
            untouched_score=report.untouched_score if report is not None else None,
            solved_score=solved,
            judge_statuses=list(report.judge_statuses) if report is not None else [],
            model=self.syn.llm.settings.model,
            prompt_tokens=self.usage.prompt_tokens,
            completion_tokens=self.usage.completion_tokens,
            cost_usd=round(self.usage.cost_usd, 6),
            seconds=round(time.monotonic() - self.started, 3),
            candidate_id=self.candidate_id,
            request_id=self.request.request_id,
            run_id=self.request.run_id,
        )


async def _look(probe: ProbeAPI, setup: list[dict[str, Any]]) -> str:
    """A live look at the app; a note instead when no desktop could show it."""
    try:
        async with probe_session(probe, {"config": setup}, purpose="observe") as info:
            if not info.session_id:
                return f"(no observation: the app did not start: {info.setup_error})"
            seen = await probe.observe(info.session_id)
    except ProbeError as exc:
        log.warning("no observation (%s)", exc)
        return f"(no observation: {exc})"
    return (seen.get("text") or "(no elements)")[:_OBSERVATION_CHARS]


def _agent_detail(result: AgentResult) -> dict[str, Any]:
    detail: dict[str, Any] = {"attempts": result.attempts}
    if not result.ok:
        detail["failure"] = result.failure
        detail["raw"] = result.raw
    elif hasattr(result.value, "verdict"):
        v = result.value
        detail.update(verdict=v.verdict, score=v.score, reasoning=v.reasoning, issues=v.issues)
    return detail


def _judger_findings(judged: AgentResult, min_score: float) -> list[str]:
    if not judged.ok:
        return [f"judger: no usable verdict ({judged.failure})"]
    v = judged.value
    head = f"judger: {v.verdict} with score {v.score:g} (needs accept and ≥ {min_score:g}): {v.reasoning}"
    return [head, *(f"judger: {issue}" for issue in v.issues)]
