"""The overlap audit: which training tasks overlap a benchmark pool, and how (pure, no I/O).

Four checks, each pairing a training task with the benchmark tasks it overlaps:

- **full-JSON duplicate**: the OSWorld body (`instruction`, `config`, `evaluator`,
  `related_apps`; not `id`, `source` or VeriGen's metadata) is the same JSON, keys sorted;
- **normalised-instruction duplicate**: the instructions are equal once NFKC-normalised,
  case-folded, every run of non-alphanumeric characters made one space, and trimmed;
- **objective near-duplicate**: a composite similarity of at least 0.90, where
  `composite = 0.6 × cos(instruction embeddings) + 0.4 × objective similarity`. A task's
  *objective* is what its verifier checks, whatever metric or judge checks it: the absolute
  paths it reads (getter paths, paths in getter commands and in judge string literals) and
  the literal values it expects (every string and number in `expected` and the options,
  string literals in judge sources). The objective similarity is the Jaccard index of the
  two sets (1.0 when both are empty). Identical objectives are flagged from cosine 0.833
  up; objectives sharing 4 of 5 facts need 0.967; different expected values almost never;
- **exact judge reuse**: a sandboxed judge whose source is the benchmark's (compared as its
  Python syntax tree: comments and formatting do not count), or a whole evaluator that is
  the benchmark's (local `dest` names ignored). `infeasible` has no judge and is skipped.

A task counts in every check it fails; `any` counts it once. Flagged tasks are kept out of
training by the caller (`scalecua verigen audit --filter`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CHECKS",
    "AuditReport",
    "AuditSettings",
    "audit",
    "objective",
    "objective_similarity",
    "judge_keys",
    "normalise_instruction",
    "task_body",
]

CHECKS = {
    "full_json": "full-JSON duplicate",
    "instruction": "normalised-instruction duplicate",
    "near_duplicate": "objective near-duplicate",
    "judge_reuse": "exact judge reuse",
}
_JUDGE = "sandboxed_judge"
_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)
_PATH = re.compile(r"(?<![\w.])/[\w.+-]+(?:/[\w.+-]+)*")
_JUDGE_KNOBS = ("source", "function", "wall_seconds", "memory_mb")


@dataclass(frozen=True)
class AuditSettings:
    """The near-duplicate threshold and the composite's weight."""

    near_threshold: float = 0.90  # composite similarity at which objectives are near-duplicates
    instruction_weight: float = 0.6  # the composite's weight on the instructions' cosine
    examples: int = 3  # examples per check in the report


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def task_body(task: Mapping[str, Any]) -> dict[str, Any]:
    """What a task is, for the full-JSON check: its OSWorld body without id or metadata."""
    return {
        "instruction": task.get("instruction"),
        "config": task.get("config") or [],
        "evaluator": task.get("evaluator"),
        "related_apps": task.get("related_apps") or [],
    }


def normalise_instruction(text: str) -> str:
    """An instruction reduced to its words: NFKC, case-folded, punctuation and spacing as one space."""
    return _NON_ALNUM.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _judge_source(source: Any) -> str:
    """A judge's source as its syntax tree (or its words, if it does not parse)."""
    text = str(source or "")
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(text.split())


def _normal(value: Any) -> Any:
    """A getter/options value without local `dest` names, judge sources as syntax trees."""
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items() if k != "dest"}
        if "source" in value and isinstance(value["source"], str):
            out["source"] = _judge_source(value["source"])
        return out
    return value


def _records(evaluator: Any) -> list[dict[str, Any]]:
    """An evaluator as one record per func: func, result, expected, options (normalised)."""
    if not isinstance(evaluator, dict):
        return []
    func = evaluator.get("func")
    names = list(func) if isinstance(func, list) else [func]
    out = []
    for i, name in enumerate(names):
        record: dict[str, Any] = {"func": name}
        for key in ("result", "expected", "options"):
            value = evaluator.get(key)
            if isinstance(func, list):
                value = value[i] if isinstance(value, list) and len(value) == len(names) else None
            record[key] = _normal(value)
        out.append(record)
    return out


def judge_keys(evaluator: Any) -> set[str]:
    """What judge reuse compares: each sandboxed judge's source, and the whole evaluator."""
    records = _records(evaluator)
    if not records or all(r["func"] == "infeasible" for r in records):
        return set()
    keys = {"evaluator:" + _digest(_normal(evaluator))}
    for r in records:
        if r["func"] == _JUDGE and isinstance(r.get("options"), dict):
            keys.add("judge:" + _digest(r["options"].get("source")))
    return keys


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:16]


def _leaves(value: Any, skip: tuple[str, ...] = ("type", "dest")) -> list[Any]:
    """The strings and numbers in a JSON value (not its keys, not booleans)."""
    if isinstance(value, dict):
        return [x for k, v in value.items() if k not in skip for x in _leaves(v, skip)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v, skip)]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return [value]
    return []


def _judge_strings(source: Any) -> list[str]:
    """A judge's string literals (docstrings aside)."""
    try:
        tree = ast.parse(str(source or ""))
    except (SyntaxError, ValueError, RecursionError):
        return []
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def objective(evaluator: Any) -> set[str]:
    """What a verifier checks: the paths it reads and the values it expects (module doc)."""
    if not isinstance(evaluator, dict):
        return set()
    facts: set[str] = set()
    func = evaluator.get("func")
    for key in ("result", "expected"):
        for spec in _leaf_getters(evaluator.get(key)):
            paths = spec.get("path")
            for p in paths if isinstance(paths, list) else [paths]:
                if isinstance(p, str):
                    facts.add("path:" + p.rstrip("/"))
            command = spec.get("command")
            text = " ".join(command) if isinstance(command, list) else str(command or "")
            facts.update("path:" + p.rstrip("/") for p in _PATH.findall(text))
            if key == "expected":
                skip = ("type", "dest", "path", "command", "shell")
                facts.update("value:" + _canonical(v) for v in _leaves(spec, skip))
    options = evaluator.get("options")
    listed = options if isinstance(func, list) and isinstance(options, list) else [options]
    for opts in listed:
        if not isinstance(opts, dict):
            continue
        facts.update("value:" + _canonical(v) for v in _leaves(opts, _JUDGE_KNOBS))
        for literal in _judge_strings(opts.get("source")):
            found = _PATH.findall(literal)
            facts.update("path:" + p.rstrip("/") for p in found)
            if not found:
                facts.add("value:" + _canonical(literal))
    return facts


def _leaf_getters(spec: Any) -> list[dict[str, Any]]:
    if isinstance(spec, list):
        return [g for s in spec for g in _leaf_getters(s)]
    return [spec] if isinstance(spec, dict) else []


def objective_similarity(a: Any, b: Any) -> float:
    """Jaccard index of two verifiers' objectives (1.0 when both are empty)."""
    fa, fb = objective(a), objective(b)
    union = fa | fb
    return 1.0 if not union else len(fa & fb) / len(union)


@dataclass
class AuditReport:
    """Every training task's overlaps with the benchmark, per check."""

    tasks: int
    benchmark: int
    settings: AuditSettings
    # task id -> check -> [{"benchmark": id, "score": similarity}], flagged tasks only
    findings: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    instructions: dict[str, str] = field(default_factory=dict)  # flagged task -> instruction

    def flagged(self, check: str | None = None) -> list[str]:
        """Task ids flagged by a check (by any, when None)."""
        return sorted(t for t, f in self.findings.items() if check is None or f.get(check))

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per check (and `any`): tasks flagged, their share of the pool, pairs found."""
        out = {}
        for check in [*CHECKS, "any"]:
            ids = self.flagged(None if check == "any" else check)
            pairs = sum(
                len(self.findings[t].get(c, []))
                for t in ids
                for c in (CHECKS if check == "any" else [check])
            )
            out[check] = {
                "tasks": len(ids),
                "share": round(len(ids) / self.tasks, 4) if self.tasks else 0.0,
                "pairs": pairs,
            }
        return out

    def examples(self, check: str) -> list[dict[str, Any]]:
        """A few flagged pairs of a check: the task, its instruction, the benchmark task, the score."""
        out = []
        for task_id in self.flagged(check)[: self.settings.examples]:
            best = max(self.findings[task_id][check], key=lambda m: m.get("score", 1.0))
            out.append({
                "task": task_id, "instruction": self.instructions.get(task_id, ""),
                "benchmark": best["benchmark"], "score": best.get("score"),
            })  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON: sizes, the composite's definition, counts, examples, findings."""
        return {
            "tasks": self.tasks,
            "benchmark": self.benchmark,
            "near_threshold": self.settings.near_threshold,
            "composite": (
                f"{self.settings.instruction_weight:g} * cos(instruction embeddings) + "
                f"{1 - self.settings.instruction_weight:g} * objective similarity"
            ),
            "counts": self.counts(),
            "examples": {c: self.examples(c) for c in CHECKS},
            "flagged": self.flagged(),
            "findings": self.findings,
        }

    def table(self) -> str:
        """The report as a markdown table: per check, tasks flagged, share, pairs, an example."""
        counts = self.counts()
        lines = [
            f"Overlap audit: {self.tasks} training tasks against {self.benchmark} benchmark tasks",
            "",
            "| check | tasks flagged | share of pool | pairs | example (task → benchmark) |",
            "|---|---|---|---|---|",
        ]
        for check, label in [*CHECKS.items(), ("any", "any check (flagged)")]:
            c = counts[check]
            example = ""
            if check != "any" and (found := self.examples(check)):
                e = found[0]
                text = (
                    e["instruction"]
                    if len(e["instruction"]) <= 48
                    else e["instruction"][:45] + "..."
                )
                score = f" ({e['score']:.3f})" if check == "near_duplicate" else ""
                example = f'"{text}" → {e["benchmark"]}{score}'.replace("|", "/")
            if check == "near_duplicate":
                label += f" (composite ≥ {self.settings.near_threshold:.2f})"
            lines.append(
                f"| {label} | {c['tasks']} | {c['share']:.1%} | {c['pairs']} | {example} |"
            )
        clean = self.tasks - counts["any"]["tasks"]
        share = clean / self.tasks if self.tasks else 0.0
        lines.append(f"| clean | {clean} | {share:.1%} | | |")
        return "\n".join(lines)


def audit(
    tasks: list[Mapping[str, Any]],
    benchmark: list[Mapping[str, Any]],
    task_vectors: np.ndarray,
    benchmark_vectors: np.ndarray,
    settings: AuditSettings | None = None,
) -> AuditReport:
    """Audit training tasks against a benchmark pool (module doc), given both embeddings.

    `task_vectors` and `benchmark_vectors` are the instructions' unit vectors, one row per
    task, in order.
    """
    settings = settings or AuditSettings()
    report = AuditReport(len(tasks), len(benchmark), settings)
    bodies: dict[str, list[str]] = {}
    words: dict[str, list[str]] = {}
    judges: dict[str, list[str]] = {}
    for b in benchmark:
        bid = str(b.get("_path") or b.get("id"))
        bodies.setdefault(_digest(task_body(b)), []).append(bid)
        words.setdefault(normalise_instruction(str(b.get("instruction", ""))), []).append(bid)
        for key in judge_keys(b.get("evaluator")):
            judges.setdefault(key, []).append(bid)

    def flag(task: Mapping[str, Any], check: str, bench_ids: list[str], score: float) -> None:
        found = report.findings.setdefault(str(task["id"]), {})
        found.setdefault(check, []).extend({"benchmark": b, "score": score} for b in bench_ids)
        report.instructions[str(task["id"])] = str(task.get("instruction", ""))

    for task in tasks:
        flag_ids = bodies.get(_digest(task_body(task)), [])
        if flag_ids:
            flag(task, "full_json", flag_ids, 1.0)
        text = normalise_instruction(str(task.get("instruction", "")))
        if text and words.get(text):
            flag(task, "instruction", words[text], 1.0)
        reused = sorted(
            {b for key in judge_keys(task.get("evaluator")) for b in judges.get(key, [])}
        )
        if reused:
            flag(task, "judge_reuse", reused, 1.0)
    if len(tasks) and len(benchmark):
        w = settings.instruction_weight
        cos = np.asarray(task_vectors, np.float64) @ np.asarray(benchmark_vectors, np.float64).T
        reachable = cos * w + (1 - w) >= settings.near_threshold - 1e-9  # objective sim <= 1
        for i, j in zip(*np.nonzero(reachable), strict=True):
            task, bench = tasks[int(i)], benchmark[int(j)]
            sim = objective_similarity(task.get("evaluator"), bench.get("evaluator"))
            composite = w * float(cos[i, j]) + (1 - w) * sim
            if composite >= settings.near_threshold - 1e-9:
                bid = str(bench.get("_path") or bench.get("id"))
                flag(task, "near_duplicate", [bid], round(min(composite, 1.0), 4))
    return report
