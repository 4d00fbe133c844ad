"""Which tasks run here, and for each one that does not, precisely why (`scalecua tasks coverage`).

A task is **supported** when every name it uses (setup steps, getters, metrics) is implemented
and every app it needs is installed on this host; it is **runnable** when it is supported and
nothing else stands in the way: every file it names is in the file cache (or in its folder),
it needs no live web page and no account. Live web and accounts never make a task
unsupported (the definition above leaves them aside), but they always make it not runnable:
a page on the live web changes under a benchmark, the desktops here reach only loopback,
and no account is configured. Each obstacle is a `Reason` of one kind:

| kind | blocks | example |
|---|---|---|
| `task` | support | the task file is missing or malformed |
| `unknown` | support | metric `compare_pptx_files` is not implemented |
| `app` | support | chrome is not installed here: chromium, socat not found |
| `file` | running | https://drive.google.com/uc?id=… is not cached |
| `web` | running | needs the live web: https://www.airbnb.com |
| `account` | running | needs a Google account (config step `googledrive`) |

The apps a task needs come from its `related_apps` (its `snapshot` when it lists none: the
snapshot names the VM image a task starts from, and six VLC tasks start from "chrome"), the
commands its steps launch, the files its `open` steps open, and the app-specific steps and
getters it uses (`APP_OF_NAME`, OSWorld's names). `assess` takes the host's checks as
functions, so everything but them is pure.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtime.envs.desktop.apps import App, app_for_command, app_for_file, app_named, missing_app
from runtime.envs.desktop.browser_net import HostMap
from runtime.envs.tasks import web
from runtime.envs.tasks.accounts import ACCOUNT_GETTERS, ACCOUNT_STEPS
from runtime.envs.tasks.catalog import TaskFile
from runtime.envs.tasks.files.urls import task_files
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.scienceboard import live_web_named, vm_data_needed
from runtime.envs.tasks.support import unsupported_parts

__all__ = [
    "KINDS",
    "Reason",
    "TaskCoverage",
    "accounts_needed",
    "apps_needed",
    "assess",
    "live_web_urls",
    "render_table",
    "summarize",
    "APP_OF_NAME",
]

KINDS = ("task", "unknown", "app", "file", "web", "account")
_BLOCKS_SUPPORT = ("task", "unknown", "app")

# OSWorld's app-specific setup steps and getters: they talk to the running app (Chrome through
# its remote-debugging port, VLC through its HTTP interface) or read its profile.
APP_OF_NAME: dict[str, str] = {
    **{name: "chrome" for name in (
        "chrome_open_tabs", "chrome_close_tabs", "update_browse_history",
        "default_search_engine", "cookie_data", "history", "enabled_experiments",
        "profile_name", "chrome_language", "chrome_font_size", "bookmarks",
        "extensions_installed_from_shop", "page_info", "open_tabs_info",
        "active_url_from_accessTree", "active_tab_info", "pdf_from_url",
        "chrome_saved_address", "number_of_search_results", "enable_do_not_track",
        "enable_enhanced_safety_browsing", "new_startup_page", "find_unpacked_extension_path",
        "find_installed_extension_name", "data_delete_automacally", "active_tab_html_parse",
        "gotoRecreationPage_and_get_html_content", "active_tab_url_parse", "url_dashPart",
        "info_from_website",
    )},
    "vlc_playing_info": "vlc",
    "vlc_config": "vlc",
    "default_video_player": "vlc",
    "gimp_config_file": "gimp",
    "vscode_config": "vs_code",
}  # fmt: skip

_SNAPSHOTS_NOT_APPS = ("base_setup", "multiapps")


@dataclass(frozen=True)
class Reason:
    """One thing that keeps a task from being supported or runnable here."""

    kind: str  # one of KINDS
    detail: str  # a sentence naming what is missing and where the task needs it
    label: str  # what it is, without the task's specifics (for totals): "app chrome"
    url: str = ""  # the file's or page's URL, when there is one

    def to_dict(self) -> dict[str, str]:
        """The reason as JSON (the URL only when there is one)."""
        out = {"kind": self.kind, "detail": self.detail}
        return {**out, "url": self.url} if self.url else out


@dataclass(frozen=True)
class TaskCoverage:
    """One task's verdict: supported, runnable, and the reasons it is not."""

    key: str  # "<domain>/<id>", as on the `tasks` topic
    id: str  # the task JSON's id
    domain: str
    reasons: tuple[Reason, ...] = field(default=())

    @property
    def supported(self) -> bool:
        """All names known and every app installed (files, web and accounts aside)."""
        return not any(r.kind in _BLOCKS_SUPPORT for r in self.reasons)

    @property
    def runnable(self) -> bool:
        """Supported, and no file missing, no live web and no account needed."""
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON."""
        return {
            "key": self.key,
            "id": self.id,
            "domain": self.domain,
            "supported": self.supported,
            "runnable": self.runnable,
            "reasons": [r.to_dict() for r in self.reasons],
        }


def apps_needed(task: Task) -> tuple[dict[str, tuple[App, str]], list[str]]:
    """The apps a task needs (name -> (app, why)) and the app names it gives that we do not know."""
    needed: dict[str, tuple[App, str]] = {}
    unknown: list[str] = []

    def need(app: App | None, why: str) -> None:
        if app is not None and app.name not in needed:
            needed[app.name] = (app, why)

    named = task.related_apps or (
        [task.snapshot] if task.snapshot and task.snapshot not in _SNAPSHOTS_NOT_APPS else []
    )
    for name in named:
        app = app_named(name)
        if app is None:
            unknown.append(name)
        need(app, "related_apps" if task.related_apps else "snapshot")
    for where, i, step in _steps(task):
        params = step.get("parameters") or {}
        kind = step.get("type")
        if kind in ("launch", "execute", "command"):
            program = _program(params.get("command"))
            need(app_for_command(program) if program else None, f"{where} step {i} runs {program}")
        elif kind == "open" and isinstance(params.get("path"), str):
            need(app_for_file(params["path"]), f"{where} step {i} opens {params['path']}")
        if kind in APP_OF_NAME:
            need(app_named(APP_OF_NAME[kind]), f"{where} step {i} ({kind})")
    for side, getter in _getters(task):
        name = getter.get("type")
        if name in APP_OF_NAME:
            need(app_named(APP_OF_NAME[name]), f"{side} getter {name}")
    return needed, list(dict.fromkeys(unknown))


def live_web_urls(task: Task) -> list[str]:
    """The live-web URLs a task opens in the browser (hosts mapped to local servers by
    `SCALECUA_BROWSER_HOSTS` are not live web), or, for a ScienceBoard task, the web services
    its instruction sends the agent to; see runtime/envs/tasks/web.py."""
    named = live_web_named(task.instruction) if task.native is not None else []
    return [*web.live_web_urls(task, HostMap.from_env()), *named]


def accounts_needed(task: Task) -> list[str]:
    """Where a task needs an account: its account steps and getters (Google Drive, logins)."""
    where = [f"{w} step `{s['type']}`" for w, _, s in _steps(task) if s["type"] in ACCOUNT_STEPS]
    where += [f"{side} getter `{g['type']}`" for side, g in _getters(task)
              if g.get("type") in ACCOUNT_GETTERS]  # fmt: skip
    return list(dict.fromkeys(where))


def assess(
    entry: TaskFile,
    *,
    is_cached: Callable[[str], bool],
    app_missing: Callable[[App], str | None] = missing_app,
) -> TaskCoverage:
    """Every reason the task of `entry` is not supported or not runnable on this host."""
    task = entry.task
    if task is None:
        reason = Reason("task", f"the task does not load: {entry.error}", "task file")
        return TaskCoverage(entry.key, entry.path.stem, entry.domain, (reason,))
    reasons: list[Reason] = []
    for part in unsupported_parts(task):
        reasons.append(Reason("unknown", f"{part} is not implemented here", part))
    apps, unknown_apps = apps_needed(task)
    for name in unknown_apps:
        reasons.append(Reason("app", f"related app `{name}` is not an app this project knows "
                              "(runtime/envs/desktop/apps.py)", f"app {name}"))  # fmt: skip
    for app, why in apps.values():
        missing = app_missing(app)
        if missing:
            reasons.append(Reason("app", f"{missing} (needed: {why})", f"app {app.name}"))
    for ref in task_files(task):
        if ref.is_url and not is_cached(ref.source):
            reasons.append(Reason("file", f"{ref.source} is not cached ({ref.where})",
                                  "file not cached", ref.source))  # fmt: skip
        elif not ref.is_url and not _in_folder(ref.source, task):
            reasons.append(Reason("file", f"{ref.source} is not in the task's folder "
                                  f"({ref.where})", "file not in the task folder"))  # fmt: skip
    if task.native is not None:
        for path, what in vm_data_needed(task.native):
            reasons.append(Reason("file", f"needs {path}: {what}", "ScienceBoard VM data"))
    for url in live_web_urls(task):
        reasons.append(Reason("web", f"needs the live web: {url}", "live web", url))
    for where in accounts_needed(task):
        reasons.append(Reason("account", f"needs a Google account ({where})", "account"))
    return TaskCoverage(entry.key, task.id, entry.domain, tuple(reasons))


def summarize(items: Iterable[TaskCoverage]) -> dict[str, Any]:
    """Totals, per-domain totals, what blocks most tasks, and every task's verdict, as JSON."""
    items = list(items)
    by_domain: dict[str, dict[str, Any]] = {}
    for item in items:
        d = by_domain.setdefault(item.domain, _empty_totals())
        _count(d, item)
    blocked: Counter[tuple[str, str]] = Counter()
    alone: Counter[tuple[str, str]] = Counter()
    for item in items:
        labels = {(r.kind, r.label) for r in item.reasons}
        blocked.update(labels)
        support = {lab for lab in labels if lab[0] in _BLOCKS_SUPPORT}
        if len(support) == 1:  # fixing this one thing alone makes the task supported
            alone.update(support)
    totals = _empty_totals()
    for item in items:
        _count(totals, item)
    return {
        **{k: totals[k] for k in ("total", "supported", "runnable")},
        "not_runnable": totals["not_runnable"],
        "by_domain": dict(sorted(by_domain.items())),
        "blockers": [
            {"kind": kind, "label": label, "tasks": n, "alone": alone[(kind, label)]}
            for (kind, label), n in sorted(blocked.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "tasks": [item.to_dict() for item in items],
    }


def render_table(summary: dict[str, Any], top: int = 15) -> str:
    """The per-domain totals as a text table, then what blocks most tasks."""
    head = f"{'domain':<22}{'tasks':>6}{'supported':>11}{'runnable':>10}   not runnable by kind:"
    kinds = "".join(f"{k:>9}" for k in KINDS)
    lines = [head, f"{'':<52}{kinds}"]
    rows = [*summary["by_domain"].items(), ("total", summary)]
    for name, d in rows:
        counts = "".join(f"{d['not_runnable'].get(k, 0):>9}" for k in KINDS)
        lines.append(f"{name:<22}{d['total']:>6}{d['supported']:>11}{d['runnable']:>10}"
                     f"{'':<3}{counts}")  # fmt: skip
    blockers = summary["blockers"][:top]
    if blockers:
        lines += ["", "what keeps most tasks from running (tasks; of them, blocked by it alone):"]
        for b in blockers:
            alone = f"; {b['alone']} alone" if b["kind"] in _BLOCKS_SUPPORT else ""
            lines.append(f"  {b['tasks']:>4}{alone:<12} {b['kind']:<8} {b['label']}")
    return "\n".join(lines)


def _empty_totals() -> dict[str, Any]:
    return {"total": 0, "supported": 0, "runnable": 0, "not_runnable": dict.fromkeys(KINDS, 0)}


def _count(totals: dict[str, Any], item: TaskCoverage) -> None:
    totals["total"] += 1
    totals["supported"] += item.supported
    totals["runnable"] += item.runnable
    for kind in {r.kind for r in item.reasons}:
        totals["not_runnable"][kind] += 1


def _steps(task: Task) -> list[tuple[str, int, dict[str, Any]]]:
    return [(where, i, step)
            for where, steps in (("config", task.config), ("postconfig", task.evaluator.postconfig))
            for i, step in enumerate(steps)]  # fmt: skip


def _getters(task: Task) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for side, specs in (("result", task.evaluator.results), ("expected", task.evaluator.expecteds)):
        for spec in specs:
            for one in spec if isinstance(spec, list) else [spec]:
                if isinstance(one, dict):
                    out.append((side, one))
    return out


def _program(command: Any) -> str:
    """The program a step's command runs: its first word (of a shell line, the first word)."""
    if isinstance(command, list) and command and isinstance(command[0], str):
        first = command[0]
        # OSWorld also writes a whole shell line as a one-item list: its first word runs.
        return _first_word(first) if " " in first.strip() else first
    if isinstance(command, str):
        return _first_word(command)
    return ""


def _first_word(line: str) -> str:
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return words[0] if words else ""


def _in_folder(source: str, task: Task) -> bool:
    """Whether a local source (path or file:// URL) is a file in the task's folder, or in the
    desktop's home (made by an earlier step, so not checked here), as setup/sources.py reads."""
    path = source[len("file://") :] if source.startswith("file://") else source
    if os.path.normpath(path).startswith("/home/user"):
        return True
    if task.base_dir is None:
        return False
    folder = os.path.realpath(task.base_dir)
    real = os.path.realpath(os.path.join(folder, path))  # setup reads nothing outside it
    return os.path.commonpath([folder, real]) == folder and os.path.isfile(real)
