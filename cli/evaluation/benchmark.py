"""A benchmark's results in its paper's layout: success per domain and per category (pure, no I/O).

OSWorld reports a success rate per domain and for five categories, OS (os), Office (Calc,
Impress, Writer), Daily (Chrome, VLC, Thunderbird), Professional (GIMP, VS Code) and
Workflow (multi_apps), then overall; ScienceBoard one per app, by its field: Algebra
(KAlgebra), Biochem (ChimeraX), GIS (GrassGIS), ATP (Lean), Astron (Celestia) and Doc
(TeXstudio), then overall. Here only the runnable tasks are played
(runtime/envs/tasks/coverage.py), so each row also says how many tasks the domain has, how
many ran, and why the others did not; `success` is over the tasks played, `of all` counts
every task that did not run as failed (the figure comparable with a full OSWorld run).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cli.evaluation.stats import Outcome
from runtime.envs.tasks.coverage import KINDS as _KINDS

__all__ = ["CATEGORIES", "SCIENCEBOARD_CATEGORIES", "benchmark_table", "render_benchmark"]

CATEGORIES: dict[str, tuple[str, ...]] = {
    "OS": ("os",),
    "Office": ("libreoffice_calc", "libreoffice_impress", "libreoffice_writer"),
    "Daily": ("chrome", "vlc", "thunderbird"),
    "Professional": ("gimp", "vs_code"),
    "Workflow": ("multi_apps",),
}
SCIENCEBOARD_CATEGORIES: dict[str, tuple[str, ...]] = {
    "Algebra": ("KAlgebra",),
    "Biochem": ("ChimeraX",),
    "GIS": ("GrassGIS",),
    "ATP": ("Lean",),
    "Astron": ("Celestia",),
    "Doc": ("TeXstudio",),
}


def benchmark_table(
    coverage: dict[str, Any],
    outcomes: Iterable[Outcome],
    threshold: float = 1.0,
    categories: dict[str, tuple[str, ...]] = CATEGORIES,
) -> dict[str, Any]:
    """Per domain, per category and overall: tasks, runnable, played, passed, success rates.

    `coverage` is `coverage.summarize`'s report; each outcome's `family` is its domain.
    """
    played: dict[str, list[Outcome]] = {}
    for o in outcomes:
        played.setdefault(o.family, []).append(o)
    domains = {d: _row(c, played.get(d, []), threshold)
               for d, c in coverage["by_domain"].items()}  # fmt: skip
    by_category = {}
    for name, members in categories.items():
        rows = [domains[d] for d in members if d in domains]
        if rows:
            by_category[name] = _sum(rows)
    return {
        "by_domain": domains,
        "categories": by_category,
        "overall": _sum(list(domains.values())),
    }


def render_benchmark(table: dict[str, Any]) -> str:
    """The table as text: one line per domain, then the categories and the overall line."""
    kinds = "".join(f"{k:>8}" for k in _KINDS)
    head = (f"{'domain':<22}{'tasks':>6}{'runnable':>10}{'played':>8}{'passed':>8}"
            f"{'success':>9}{'of all':>8}   not runnable by kind:")  # fmt: skip
    lines = [head, f"{'':<74}{kinds}"]
    for name, row in table["by_domain"].items():
        lines.append(_line(name, row))
    lines.append("")
    for name, row in table["categories"].items():
        lines.append(_line(name, row))
    lines.append(_line("Overall", table["overall"]))
    return "\n".join(lines)


def _row(coverage: dict[str, Any], outcomes: list[Outcome], threshold: float) -> dict[str, Any]:
    passed = sum(1 for o in outcomes if o.score is not None and o.score >= threshold)
    return _rates({
        "tasks": coverage["total"],
        "supported": coverage["supported"],
        "runnable": coverage["runnable"],
        "played": len(outcomes),
        "passed": passed,
        "unscored": sum(1 for o in outcomes if o.score is None),
        "not_runnable": dict(coverage["not_runnable"]),
    })  # fmt: skip


def _sum(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("tasks", "supported", "runnable", "played", "passed", "unscored")
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in keys}
    out["not_runnable"] = {k: sum(r["not_runnable"].get(k, 0) for r in rows) for k in _KINDS}
    return _rates(out)


def _rates(row: dict[str, Any]) -> dict[str, Any]:
    row["success"] = round(row["passed"] / row["played"], 4) if row["played"] else None
    row["success_of_all"] = round(row["passed"] / row["tasks"], 4) if row["tasks"] else None
    return row


def _line(name: str, row: dict[str, Any]) -> str:
    success = "-" if row["success"] is None else f"{row['success']:.1%}"
    of_all = "-" if row["success_of_all"] is None else f"{row['success_of_all']:.1%}"
    counts = "".join(f"{row['not_runnable'].get(k, 0):>8}" for k in _KINDS)
    return (f"{name:<22}{row['tasks']:>6}{row['runnable']:>10}{row['played']:>8}"
            f"{row['passed']:>8}{success:>9}{of_all:>8}   {counts}")  # fmt: skip
