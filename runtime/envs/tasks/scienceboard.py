"""ScienceBoard's task JSON, read unchanged, as the OSWorld-shaped task this project runs.

A ScienceBoard task (`tasks/VM/<App>/<id>.json` in OS-Copilot/ScienceBoard) is an object with
`type` (the app: TeXstudio, KAlgebra, GrassGIS, ChimeraX, Celestia, Lean), `sort` (VM, Raw
or Dual), `steps` (its turn budget), `instruction`, `initialize` (`{"func": ..., **args}`,
each with an optional `wait` in seconds) and `evaluate` (`{"type": ..., **args}`, all of
which must pass). It has no `id`: the file's name is its id, and its key is
`<type>/<id>` (`<type>.raw/<id>`, `<type>.dual/<id>` for the tasks filed under Raw and Dual,
so that they do not collide with the VM tasks of the same app).

`to_osworld` maps it onto OSWorld's shape, so that setup, evaluation, coverage, rollouts and
the log treat both benchmarks alike; the original stays the task's JSON on the log:

| ScienceBoard | OSWorld shape |
|---|---|
| `touch` {path, text} | setup `sb_touch` |
| `launch`/`execute` {command, shell} | OSWorld's `launch`/`execute` («PORTLIKE» is 8000, as in ScienceBoard; a patched build's command line is the stock app's, `STOCK_COMMANDS`) |
| `wait` on any step | a `sleep` step after it |
| `opt` {depth} | setup `sb_opt` (the depth of accessibility trees) |
| any other func (`tab`, `map`, `chimerax_open`, ...) | setup `sb_<app>_<func>` (an app's own step: `sb_kalgebra_tab`, `sb_chimerax_open`) |
| evaluate `stop` {value, args} (every app) | metric `sb_stop`: the agent ended with DONE/FAIL, or ANS with these args |
| TeXstudio `file` {path, source, target} | metric `sb_file`: the file equals the text `touch` wrote, `source` replaced by `target` |
| TeXstudio `include` {path, pattern} | metric `sb_include`: the regex is found in the file |
| TeXstudio `compile` {path, file} | metric `sb_compile`: pdflatex (and bibtex when a `.bib` was written) succeeds |
| KAlgebra `var`/`val` {key, value} | metric `sb_kalgebra_var`/`sb_kalgebra_val`, result getter `kalgebra_state` {vars: [key]} |
| KAlgebra `eqn` {key: points or `#SIZE`, value} | metric `sb_kalgebra_eqn`, result getter `kalgebra_state` {points}; on 3D points `sb_kalgebra_eqn3d`, with a `color` `sb_kalgebra_color` (what the stock app does not show) |
| any other app's check (`info`, `eqn`, `db`, ChimeraX's `file`, ...) | metric `sb_<app>_<type>` (`sb_chimerax_info`) |

ScienceBoard's ANS compares the answer split at single blanks with `args`. Every evaluate item
becomes one metric, combined with `conj: and`, ScienceBoard's all-must-pass. Pure: no I/O.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from runtime.errors import TaskError

__all__ = [
    "APP_OF_TYPE",
    "PORT",
    "SORTS",
    "STOCK_COMMANDS",
    "VM_DATA",
    "WEB_SERVICES",
    "is_scienceboard",
    "live_web_named",
    "vm_data_needed",
    "scienceboard_domain",
    "to_osworld",
]

SORTS = ("VM", "Raw", "Dual")
PORT = "8000"  # what ScienceBoard puts for «PORTLIKE»: the port of an app's patched server
_PORTLIKE = "«PORTLIKE»"
# ScienceBoard's app (`type`) -> the app's name in runtime/envs/desktop/apps.py
APP_OF_TYPE = {
    "TeXstudio": "texstudio",
    "KAlgebra": "kalgebra",
    "GrassGIS": "grass",
    "ChimeraX": "chimerax",
    "Celestia": "celestia",
    "Lean": "lean",
}
# The programs ScienceBoard's `launch` steps start, by the app names of apps.py: a command
# line such as `gnome-terminal -- bash -ic "grass --gui ..."` names its app deep inside.
_LAUNCHED = re.compile(
    r"(?:^|[\s/\"'])(texstudio|chimerax|kalgebra|grass|celestia(?:-qt6)?|code|lake|lean)(?=$|[\s\"'])"
)
_APP_OF_PROGRAM = {"code": "vs_code", "lake": "lean", "celestia-qt6": "celestia"}
# The patched builds ScienceBoard's `launch` steps start, by path, -> the stock app on a
# desktop's PATH (its wrapper, runtime/envs/desktop/wrappers.py, sets what the app needs).
# The build's library path before it and its port argument («PORTLIKE») after it go: they
# belong to the build's HTTP server, which the stock app has not.
STOCK_COMMANDS = {"/app/bin/kalgebra": "kalgebra"}
_PATCHED_LAUNCH = re.compile(
    r"(?:LD_LIBRARY_PATH=\S*\s+)?("
    + "|".join(map(re.escape, STOCK_COMMANDS))
    + r")(?:\s+«PORTLIKE»)?"
)
# Web services an instruction sends the agent to (the desktops here reach only loopback).
WEB_SERVICES = {"Google Scholar": "https://scholar.google.com"}
# Data ScienceBoard's VM image holds that no task writes, by the path its tasks use.
VM_DATA = {
    "/home/user/grassdata": "GRASS's sample locations (world_latlong_wgs84, natural_earth_dataset, "
    "grassdata_piemonte_utm32n_wgs84_grass7), downloaded by hand into ScienceBoard's VM image "
    "and in neither its repository nor a registry here",
}
_REQUIRED = ("type", "sort", "instruction", "initialize", "evaluate")
_GENERIC = ("touch", "opt")  # every app's steps besides launch and execute
_APP_PREFIXES = {t.lower() for t in APP_OF_TYPE}
_STEP_AS_IS = ("launch", "execute")


def is_scienceboard(raw: Any) -> bool:
    """Whether parsed JSON is a ScienceBoard task (`sort`, `initialize`, `evaluate`), not OSWorld's."""
    return (
        isinstance(raw, dict) and "initialize" in raw and "sort" in raw and "evaluator" not in raw
    )


def scienceboard_domain(raw: dict[str, Any], sort_folder: str = "") -> str:
    """The domain part of a ScienceBoard task's key: its app, tagged with its sort unless VM
    (the sort is the folder it is filed under, `tasks/<sort>/<App>/`, else its `sort`; the
    Dual tasks say `"sort": "VM"`)."""
    app = str(raw.get("type", ""))
    sort = sort_folder if sort_folder in SORTS else str(raw.get("sort", "VM"))
    return app if sort == "VM" else f"{app}.{sort.lower()}"


def to_osworld(raw: dict[str, Any], task_id: str, where: str = "task") -> dict[str, Any]:
    """The OSWorld-shaped JSON of a ScienceBoard task (TaskError naming the field if malformed)."""
    for key in _REQUIRED:
        if key not in raw:
            raise TaskError(f"{where}: a ScienceBoard task needs `{key}`")
    if raw["sort"] not in SORTS:
        raise TaskError(f"{where}: `sort` must be one of {', '.join(SORTS)}, not {raw['sort']!r}")
    if not isinstance(raw["initialize"], list) or not isinstance(raw["evaluate"], list):
        raise TaskError(f"{where}: `initialize` and `evaluate` must be lists")
    if not raw["evaluate"]:
        raise TaskError(f"{where}: `evaluate` is empty (nothing would be checked)")
    app = APP_OF_TYPE.get(str(raw["type"]))
    written = _touched(raw["initialize"], where)
    funcs, results, expecteds = [], [], []
    for i, item in enumerate(raw["evaluate"]):
        func, result, expected = _check(item, written, str(raw["type"]), f"{where}: evaluate[{i}]")
        funcs.append(func)
        results.append(result)
        expecteds.append(expected)
    return {
        "id": task_id,
        "snapshot": str(raw.get("snapshot") or ""),
        "instruction": str(raw["instruction"]),
        "source": "scienceboard",
        "config": [
            s
            for i, item in enumerate(raw["initialize"])
            for s in _steps(item, str(raw["type"]), f"{where}: initialize[{i}]")
        ],
        "related_apps": list(
            dict.fromkeys([app or str(raw["type"]), *_apps_launched(raw["initialize"])])
        ),
        "evaluator": {
            "func": funcs,
            "result": results,
            "expected": expecteds,
            "conj": "and",
        },
    }


def live_web_named(instruction: str) -> list[str]:
    """The web services a task's instruction sends the agent to, by URL."""
    return [url for name, url in WEB_SERVICES.items() if name in instruction]


def vm_data_needed(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The VM image's data a task's steps use, as (path, what it is), each once."""
    steps = json.dumps(raw.get("initialize", []), ensure_ascii=False)
    return [(path, what) for path, what in VM_DATA.items() if path in steps]


def _apps_launched(initialize: list[Any]) -> list[str]:
    """The apps the task's `launch` steps start, by their apps.py names, in order."""
    found: list[str] = []
    for item in initialize:
        if isinstance(item, dict) and item.get("func") == "launch":
            command = item.get("command")
            line = " ".join(map(str, command)) if isinstance(command, list) else str(command)
            found += [_APP_OF_PROGRAM.get(m, m) for m in _LAUNCHED.findall(line)]
    return found


def _touched(initialize: list[Any], where: str) -> dict[str, str]:
    """The text each `touch` step writes, by path (the first one, as ScienceBoard reads it)."""
    written: dict[str, str] = {}
    for i, item in enumerate(initialize):
        if not isinstance(item, dict) or not isinstance(item.get("func"), str):
            raise TaskError(f"{where}: initialize[{i}] needs a string `func`")
        if item["func"] == "touch":
            if not isinstance(item.get("path"), str) or not isinstance(item.get("text"), str):
                raise TaskError(f"{where}: initialize[{i}] (touch) needs `path` and `text`")
            written.setdefault(item["path"], item["text"])
    return written


def _steps(item: dict[str, Any], app: str, where: str) -> list[dict[str, Any]]:
    """The OSWorld setup steps of one `initialize` item, then its wait."""
    func = item["func"]
    params = {k: copy.deepcopy(v) for k, v in item.items() if k not in ("func", "wait")}
    if func in _STEP_AS_IS:
        if not isinstance(params.get("command"), (str, list)):
            raise TaskError(f"{where} ({func}) needs a `command`")
        params["command"] = _fill_port(params["command"])
        steps = [{"type": func, "parameters": params}]
    elif func in _GENERIC:
        steps = [{"type": f"sb_{func}", "parameters": params}]
    else:  # an app's own step, named by the app it drives (`chimerax_open` in a TeXstudio task)
        owner = "" if func.split("_")[0] in _APP_PREFIXES else f"{app.lower()}_"
        steps = [{"type": f"sb_{owner}{func}", "parameters": params}]
    wait = item.get("wait", 0)
    if not isinstance(wait, (int, float)) or wait < 0:
        raise TaskError(f"{where}: `wait` must be a number of seconds")
    if wait:
        steps.append({"type": "sleep", "parameters": {"seconds": wait}})
    return steps


def _fill_port(command: str | list[Any]) -> str | list[Any]:
    if isinstance(command, str):
        return _stock(command).replace(_PORTLIKE, PORT)
    if command and isinstance(command[0], str) and command[0] in STOCK_COMMANDS:
        rest = command[2:] if command[1:2] == [_PORTLIKE] else command[1:]
        command = [STOCK_COMMANDS[command[0]], *rest]
    return [c.replace(_PORTLIKE, PORT) if isinstance(c, str) else c for c in command]


def _stock(line: str) -> str:
    """A shell line with each patched build's command replaced by the stock app's."""
    return _PATCHED_LAUNCH.sub(lambda m: STOCK_COMMANDS[m.group(1)], line)


def _check(
    item: Any, written: dict[str, str], app: str, where: str
) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """One evaluate item as (metric, result getter, expected rule). Its `type` means what the
    app's own task class makes of it (ChimeraX's `file` is not TeXstudio's); `stop` is
    every app's."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        raise TaskError(f"{where} needs a string `type`")
    kind = item["type"]
    args = {k: copy.deepcopy(v) for k, v in item.items() if k != "type"}
    if kind == "stop":
        value, stop_args = args.get("value"), args.get("args", [])
        if value not in ("DONE", "FAIL", "ANS", "TIMEOUT"):
            raise TaskError(f"{where} (stop): `value` must be DONE, FAIL, ANS or TIMEOUT")
        if not isinstance(stop_args, list) or not all(isinstance(a, str) for a in stop_args):
            raise TaskError(f"{where} (stop): `args` must be a list of strings")
        return "sb_stop", {"type": "agent_stop"}, _rule({"value": value, "args": stop_args})
    if app == "KAlgebra" and kind in ("var", "val", "eqn"):
        return _kalgebra(kind, args, where)
    if app != "TeXstudio":
        return f"sb_{app.lower()}_{kind}", None, _rule(args)
    if kind in ("file", "include", "compile") and not isinstance(args.get("path"), str):
        raise TaskError(f"{where} ({kind}) needs a `path`")
    if kind == "file":
        if args["path"] not in written:
            raise TaskError(f"{where} (file): no `touch` step writes {args['path']}")
        text = written[args["path"]]
        if "source" in args and "target" in args:
            text = text.replace(str(args["source"]), str(args["target"]))
        return "sb_file", _file(args["path"]), _rule({"text": text})
    if kind == "include":
        if not isinstance(args.get("pattern"), str):
            raise TaskError(f"{where} (include) needs a `pattern`")
        return "sb_include", _file(args["path"]), _rule({"pattern": args["pattern"]})
    if kind == "compile":
        if not isinstance(args.get("file"), str):
            raise TaskError(f"{where} (compile) needs a `file`")
        bibtex = any(path.endswith(".bib") for path in written)
        getter = {"type": "tex_check", "path": args["path"], "file": args["file"], "bibtex": bibtex}
        return "sb_compile", getter, _rule({})
    raise TaskError(f"{where}: TeXstudio has no check `{kind}` (file, include, compile, stop)")


def _kalgebra(
    kind: str, args: dict[str, Any], where: str
) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """A KAlgebra check: read from the stock app by `kalgebra_state`, but for an `eqn` on 3D
    points or on a plot's colour, which the stock app does not show (named apart, so that
    coverage gives the reason)."""
    key, value = args.get("key"), args.get("value")
    if "value" not in args:
        raise TaskError(f"{where} ({kind}) needs a `value`")
    if kind in ("var", "val"):
        if not isinstance(key, str):
            raise TaskError(f"{where} ({kind}) needs a variable name as `key`")
        return f"sb_kalgebra_{kind}", {"type": "kalgebra_state", "vars": [key]}, _rule(args)
    if key == "#SIZE":
        return "sb_kalgebra_eqn", {"type": "kalgebra_state"}, _rule(args)
    if not isinstance(key, list) or not key or not all(isinstance(p, list) for p in key):
        raise TaskError(f"{where} (eqn) needs `key`: a list of points, or #SIZE")
    if not isinstance(value, dict):
        raise TaskError(f"{where} (eqn) needs `value`: the expected entries")
    if any(len(p) == 3 for p in key):
        return "sb_kalgebra_eqn3d", None, _rule(args)
    if "color" in value:
        return "sb_kalgebra_color", None, _rule(args)
    return "sb_kalgebra_eqn", {"type": "kalgebra_state", "points": key}, _rule(args)


def _file(path: str) -> dict[str, Any]:
    return {"type": "vm_file", "path": path, "dest": path.rsplit("/", 1)[-1] or "file"}


def _rule(rules: dict[str, Any]) -> dict[str, Any]:
    return {"type": "rule", "rules": rules}
