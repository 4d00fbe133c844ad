"""The rule validator: no LLM, only checks a task either passes or fails with a reason.

Pure checks first (no desktop, milliseconds), then checks on live desktops:

1. **schema**: the candidate's fields (candidate.py) and OSWorld's task shape;
2. **vocabulary**: every setup step, getter and metric is one we implement, with the
   parameters it needs and options its function accepts; a generated task reads no host
   file and fetches no URL (it has no folder: it creates its inputs with setup commands);
3. **judge source**: each `sandboxed_judge` compiles, defines its function at top level,
   and asks for no more than the validator's limits (wall time, memory);
4. **solution** (when given): every action is valid in the controller's action space;
5. **setup**: the setup runs on a fresh desktop (through the probe), every command in it
   exiting 0;
6. **untouched**: the verifier scores 0.0 before the agent acts (a task solved already is
   rejected), every judge running in the sandbox with status `ok` (a judge that times out,
   is killed for memory, touches the network or crashes is rejected with that status);
7. **solved** (with a solution): the solution played on a fresh desktop scores 1.0, else
   the candidate is unsound.

The untouched state is scored with every func evaluated (an `and` would stop at the first
zero and leave a later judge unrun); the task's own combination rule then gives the score.
A `ValidationReport` lists every reason, never empty when the candidate is rejected. A
desktop or probe failure is no verdict on the candidate: it raises ProbeError.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

from producers.verigen.candidate import Candidate, CandidateError
from producers.verigen.probe import ProbeAPI, probe_session
from runtime.envs.desktop.actions import ActionError, parse_action
from runtime.envs.tasks.evaluate import combine
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.support import unsupported_parts

__all__ = ["ValidationReport", "ValidatorLimits", "RuleValidator", "JUDGE_FUNC", "CHECKS"]

JUDGE_FUNC = "sandboxed_judge"
_HOME = "/home/user"
_JUDGE_OPTIONS = {"source", "function", "wall_seconds", "memory_mb"}
_JUDGE_FAILED = re.compile(r"^JudgeFailed: (\w+): ?(.*)$", re.S)
# Parameters each setup step needs, and config keys each getter needs.
_STEP_PARAMS = {
    "download": ("files",),
    "upload_file": ("files",),
    "open": ("path",),
    "launch": ("command",),
    "execute": ("command",),
    "command": ("command",),
    "sleep": (),
    "activate_window": ("window_name",),
    "close_window": ("window_name",),
    "sb_touch": ("path", "text"),
}
_GETTER_KEYS = {
    "vm_file": ("path",),
    "cloud_file": ("path",),
    "cache_file": ("path",),
    "rule": ("rules",),
    "vm_command_line": ("command",),
    "vm_command_error": ("command",),
    "list_directory": ("path",),
    "tex_check": ("path",),
}
CHECKS = ("schema", "vocabulary", "judge_source", "solution", "setup", "untouched", "solved")


@dataclass(frozen=True)
class ValidatorLimits:
    """What a candidate may ask for, and how long each desktop phase may take."""

    judge_wall_s: float = 30.0  # the most wall time a judge may give itself
    judge_memory_mb: int = 1024  # ...and memory
    max_source_chars: int = 20_000  # a judge's source
    max_setup_steps: int = 30
    max_setup_sleep_s: float = 60.0  # all `sleep` steps together
    max_solution_steps: int = 200
    solution_timeout_s: float = 600.0  # playing the solution


@dataclass
class ValidationReport:
    """The validator's verdict: accepted, or every reason it is not."""

    accepted: bool
    reasons: list[str] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)  # check -> "pass" | "fail" | "skip"
    executable: bool = False  # setup and verifier ran on a live desktop, every judge "ok"
    untouched_score: float | None = None
    solved_score: float | None = None
    judge_statuses: list[str] = field(default_factory=list)  # each judge run's status
    step_errors: list[dict[str, Any]] = field(default_factory=list)  # refused solution actions
    seconds: dict[str, float] = field(default_factory=dict)  # per phase, and lease waits

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)

    def fail(self, check: str, reason: str) -> None:
        """Record a failed check and its reason."""
        self.checks[check] = "fail"
        self.reasons.append(reason)


class RuleValidator:
    """Runs the checks of the module doc; desktop checks go through a probe."""

    def __init__(self, probe: ProbeAPI | None, limits: ValidatorLimits | None = None) -> None:
        self.probe = probe
        self.limits = limits or ValidatorLimits()

    def check_static(
        self, raw: Any, solution: list[dict[str, Any]] | None = None
    ) -> tuple[Candidate | None, ValidationReport]:
        """Run the pure checks; return the parsed candidate (None if malformed) and the report."""
        report = ValidationReport(accepted=False)
        started = time.monotonic()
        try:
            candidate = Candidate.from_dict(raw)
        except CandidateError as exc:
            for reason in exc.reasons:
                report.fail("schema", reason)
            return None, report
        report.checks["schema"] = "pass"
        if solution is not None:
            candidate = candidate.with_solution(solution)
        self._vocabulary(candidate.task, report)
        self._judge_sources(candidate.task, report)
        self._solution(candidate.solution, report)
        report.seconds["static"] = round(time.monotonic() - started, 4)
        return candidate, report

    async def validate(
        self, raw: Any, solution: list[dict[str, Any]] | None = None
    ) -> ValidationReport:
        """Every check: pure ones, then (if they pass) setup, untouched and solved on desktops."""
        candidate, report = self.check_static(raw, solution)
        if candidate is None or report.reasons:
            for check in CHECKS:
                report.checks.setdefault(check, "skip")
            return report
        if self.probe is None:
            raise ValueError("desktop checks need a probe")
        await self._desktop_checks(candidate, report)  # ProbeError: the desktops failed, not it
        for check in CHECKS:
            report.checks.setdefault(check, "skip")
        report.accepted = not report.reasons
        return report

    # -- pure checks --------------------------------------------------------------------
    def _vocabulary(self, task: Task, report: ValidationReport) -> None:
        before = len(report.reasons)
        for missing in unsupported_parts(task):
            report.fail("vocabulary", f"{missing} is not in the vocabulary this system implements")
        ev = task.evaluator
        if "infeasible" in ev.funcs and len(ev.funcs) > 1:
            report.fail("vocabulary", "`infeasible` cannot be combined with other funcs")
        steps = [("config", s) for s in task.config] + [("postconfig", s) for s in ev.postconfig]
        if len(steps) > self.limits.max_setup_steps:
            report.fail("vocabulary", f"{len(steps)} setup steps (at most "
                        f"{self.limits.max_setup_steps})")  # fmt: skip
        sleep = 0.0
        for where, step in steps:
            params = step.get("parameters") or {}
            for name in _STEP_PARAMS.get(step["type"], ()):
                if name not in params:
                    report.fail("vocabulary", f"{where} step `{step['type']}` needs `{name}`")
            if step["type"] == "sleep":
                sleep += _number(params.get("seconds", 1), 0.0)
            for source in _step_sources(step):
                problem = _host_read(source)
                if problem:
                    report.fail("vocabulary", f"{where} step `{step['type']}` {problem}")
        if sleep > self.limits.max_setup_sleep_s:
            report.fail("vocabulary", f"setup sleeps {sleep:g} s (at most "
                        f"{self.limits.max_setup_sleep_s:g})")  # fmt: skip
        for i, name in enumerate(ev.funcs):
            for spec in _getters(ev.results[i]) + _getters(ev.expecteds[i]):
                for key in _GETTER_KEYS.get(spec["type"], ()):
                    if key not in spec:
                        report.fail("vocabulary", f"getter `{spec['type']}` needs `{key}`")
                if spec["type"] == "cloud_file":
                    paths = spec.get("path")
                    for path in paths if isinstance(paths, list) else [paths]:
                        problem = _host_read(path)
                        if problem:
                            report.fail("vocabulary", f"getter `cloud_file` {problem}")
            if name in METRICS and name != JUDGE_FUNC:
                problem = _binds(name, ev.expecteds[i] is not None, ev.options[i])
                if problem:
                    report.fail("vocabulary", problem)
        if len(report.reasons) == before:
            report.checks["vocabulary"] = "pass"

    def _judge_sources(self, task: Task, report: ValidationReport) -> None:
        before = len(report.reasons)
        ev = task.evaluator
        for i, name in enumerate(ev.funcs):
            if name != JUDGE_FUNC:
                continue
            where = f"judge of func {i}" if len(ev.funcs) > 1 else "the judge"
            for problem in self._judge_problems(ev.options[i]):
                report.fail("judge_source", f"{where}: {problem}")
        if len(report.reasons) == before:
            report.checks["judge_source"] = "pass"

    def _judge_problems(self, options: dict[str, Any]) -> list[str]:
        unknown = sorted(set(options) - _JUDGE_OPTIONS)
        problems = [f"unknown option(s) {', '.join(unknown)}"] if unknown else []
        source, function = options.get("source"), options.get("function", "judge")
        wall, memory = options.get("wall_seconds", 10.0), options.get("memory_mb", 1024)
        if not isinstance(wall, int | float) or not 0 < wall <= self.limits.judge_wall_s:
            problems.append(f"`wall_seconds` must be a number in (0, {self.limits.judge_wall_s:g}]")
        if not isinstance(memory, int) or not 16 <= memory <= self.limits.judge_memory_mb:
            problems.append(f"`memory_mb` must be a whole number in [16, "
                            f"{self.limits.judge_memory_mb}]")  # fmt: skip
        if not isinstance(function, str) or not function.isidentifier():
            return [*problems, f"`function` must be a Python name, not {function!r}"]
        if not isinstance(source, str) or not source.strip():
            return [*problems, "`source` (the judge's Python code) is missing"]
        if len(source) > self.limits.max_source_chars:
            return [*problems, f"its source has {len(source)} characters "
                    f"(at most {self.limits.max_source_chars})"]  # fmt: skip
        try:
            # Parsing never runs the code; the sandbox is where it runs.
            tree = ast.parse(source, "<judge>")
            compile(tree, "<judge>", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return [*problems, f"its source does not compile: {type(exc).__name__}: {exc}"]
        defs = [n for n in tree.body if getattr(n, "name", None) == function]
        if not defs:
            return [*problems, f"its source defines no top-level function `{function}`"]
        node = defs[-1]
        if isinstance(node, ast.AsyncFunctionDef) or not isinstance(node, ast.FunctionDef):
            return [*problems, f"`{function}` must be a plain `def` taking the artifacts dict"]
        args = node.args
        if not (args.posonlyargs or args.args or args.vararg):
            problems.append(f"`{function}` must take one argument (the artifacts dict)")
        return problems

    def _solution(self, solution: list[dict[str, Any]] | None, report: ValidationReport) -> None:
        if solution is None:
            report.checks["solution"] = "skip"
            return
        before = len(report.reasons)
        if not solution:
            report.fail("solution", "the solution is an empty list of actions")
        if len(solution) > self.limits.max_solution_steps:
            report.fail("solution", f"the solution has {len(solution)} actions (at most "
                        f"{self.limits.max_solution_steps})")  # fmt: skip
        for i, action in enumerate(solution):
            try:
                parse_action(action)
            except ActionError as exc:
                report.fail("solution", f"solution action {i} is invalid: {exc}")
        if len(report.reasons) == before:
            report.checks["solution"] = "pass"

    # -- desktop checks -----------------------------------------------------------------
    async def _desktop_checks(self, candidate: Candidate, report: ValidationReport) -> None:
        assert self.probe is not None
        task = candidate.task
        task_json = task.to_dict()
        solution = candidate.solution
        same_desktop = not task.evaluator.postconfig  # evaluating then only reads the desktop
        started = time.monotonic()
        async with probe_session(self.probe, task_json, purpose="validate") as info:
            report.seconds["lease_wait"] = round(info.lease_wait_ms / 1000, 3)
            report.seconds["setup"] = round(info.setup_ms / 1000, 3)
            if info.setup_error is not None:
                report.fail("setup", f"the setup failed: {info.setup_error}")
                return
            for failed in info.failed_commands:
                report.fail("setup", f"a setup command failed: {failed}")
            if report.reasons:
                return
            report.checks["setup"] = "pass"
            t0 = time.monotonic()
            if not await self._untouched(info.session_id, task, report):
                return
            report.seconds["untouched"] = round(time.monotonic() - t0, 3)
            if solution is not None and same_desktop:
                await self._solved(info.session_id, solution, report)
        if solution is not None and not same_desktop:
            async with probe_session(self.probe, task_json, purpose="validate") as fresh:
                if not fresh.ok:
                    report.fail("solved", "the setup failed on the second desktop: "
                                f"{fresh.setup_error or fresh.failed_commands}")  # fmt: skip
                    return
                await self._solved(fresh.session_id, solution, report)
        report.seconds["desktop"] = round(time.monotonic() - started, 3)

    async def _untouched(self, session_id: str, task: Task, report: ValidationReport) -> bool:
        """Score the untouched state with every func; True when it is 0.0 and judges ran."""
        assert self.probe is not None
        ev = task.evaluator
        every = ev.to_dict()
        if len(ev.funcs) > 1:
            every["conj"] = "or"  # stops only at a 1.0, which rejects the task anyway
        result = await self.probe.evaluate(session_id, [], every)
        if result.get("task_error"):
            report.fail("untouched", f"the evaluator cannot run: {result['task_error']}")
            return False
        funcs = result.get("funcs") or []
        judge_failed = self._judges(funcs, "on the untouched desktop", report)
        scores = [float(f["score"]) for f in funcs]
        if len(funcs) == len(ev.funcs) or ev.conj == "or":
            score = combine(scores, ev.conj) if len(funcs) == len(ev.funcs) else 1.0
        else:  # a func scored 1.0 and stopped the `or`: the task's own rule decides
            again = await self.probe.evaluate(session_id, [], None)
            score = float(again.get("score") or 0.0)
        report.untouched_score = score
        if judge_failed:
            report.checks["untouched"] = "fail"
            return False
        report.executable = True
        if score != 0.0:
            report.fail(
                "untouched",
                f"the untouched desktop already scores {score:g}: the task is solved before "
                "the agent acts",
            )
            return False
        report.checks["untouched"] = "pass"
        return True

    async def _solved(
        self, session_id: str, solution: list[dict[str, Any]], report: ValidationReport
    ) -> None:
        assert self.probe is not None
        t0 = time.monotonic()
        played: list[dict[str, Any]] = []
        for i, action in enumerate(solution):
            if time.monotonic() - t0 > self.limits.solution_timeout_s:
                report.fail(
                    "solved", f"the solution took over {self.limits.solution_timeout_s:g} s"
                )
                return
            step = await self.probe.act(session_id, action)
            played.append(action)
            if not step.get("ok"):
                report.step_errors.append({"step": i, "error": step.get("error")})
            if step.get("terminal"):
                break
        result = await self.probe.evaluate(session_id, played, None)
        report.seconds["solved"] = round(time.monotonic() - t0, 3)
        if result.get("task_error"):
            report.fail("solved", f"the evaluator cannot run on the solved desktop: "
                        f"{result['task_error']}")  # fmt: skip
            return
        if self._judges(result.get("funcs") or [], "after the solution", report):
            report.executable = False
            report.checks["solved"] = "fail"
            return
        score = float(result.get("score") or 0.0)
        report.solved_score = score
        if score == 1.0:
            report.checks["solved"] = "pass"
            return
        errors = [f"{f['func']}: {f['error']}" for f in result.get("funcs") or [] if f.get("error")]
        detail = f" (metric errors: {'; '.join(errors)})" if errors else ""
        refused = f" ({len(report.step_errors)} actions refused)" if report.step_errors else ""
        report.fail("solved", f"unsound: its solution scores {score:g} on a fresh desktop, "
                    f"not 1.0{detail}{refused}")  # fmt: skip

    def _judges(self, funcs: list[dict[str, Any]], when: str, report: ValidationReport) -> bool:
        """Record each judge's status; add a reason per failed judge; True if any failed."""
        failed = False
        for i, f in enumerate(funcs):
            if f.get("func") != JUDGE_FUNC:
                continue
            match = _JUDGE_FAILED.match(f.get("error") or "")
            if f.get("error") and match is None:  # a getter raised before the judge ran
                report.judge_statuses.append("getter_error")
                report.reasons.append(f"the judge's getters failed {when}: {f['error']}")
                failed = True
            elif match is not None:
                status, detail = match.group(1), match.group(2).strip()
                report.judge_statuses.append(status)
                report.reasons.append(
                    f"judge status `{status}` {when}"
                    + (f" (func {i})" if len(funcs) > 1 else "")
                    + (f": {detail}" if detail else "")
                )
                failed = True
            else:
                report.judge_statuses.append("ok")
        return failed


def _number(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _getters(spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return []
    return [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]


def _step_sources(step: dict[str, Any]) -> list[Any]:
    """The URLs and local paths a download/upload_file step would read."""
    params = step.get("parameters") or {}
    files = params.get("files")
    if step["type"] not in ("download", "upload_file") or not isinstance(files, list):
        return []
    key = "url" if step["type"] == "download" else "local_path"
    return [f.get(key) for f in files if isinstance(f, dict)]


def _host_read(source: Any) -> str | None:
    """Why reading `source` is not allowed for a generated task, or None if it is."""
    if not isinstance(source, str) or not source:
        return f"names no file to read ({source!r})"
    parsed = urlparse(source)
    if parsed.scheme in ("http", "https"):
        return f"fetches {source}: a generated task fetches no URL"
    if parsed.scheme not in ("", "file"):
        return f"reads {source}: unsupported URL scheme"
    path = source[len("file://") :] if parsed.scheme == "file" else source
    normal = "/" + "/".join(p for p in path.split("/") if p not in ("", "."))
    if ".." in path.split("/") or not (normal == _HOME or normal.startswith(_HOME + "/")):
        return (
            f"reads {source} from the host: a generated task has no folder, so it creates "
            "its files with setup commands and reads only /home/user"
        )
    return None


def _binds(name: str, has_expected: bool, options: dict[str, Any]) -> str | None:
    """Why the metric cannot be called with these options, or None."""
    signature = inspect.signature(METRICS[name])
    args = (None, None) if has_expected else (None,)
    try:
        signature.bind(*args, **options)
    except TypeError as exc:
        shape = "result, expected" if has_expected else "result"
        return (
            f"metric `{name}` cannot be called with ({shape}) and options {sorted(options)}: {exc}"
        )
    return None
