"""ScienceBoard's checks as metrics (runtime/envs/tasks/scienceboard.py maps its `evaluate`
items onto them), each 1.0 or 0.0 as ScienceBoard's pass or fail:

- `sb_file`: the file's text, read as ScienceBoard's /read reads it (UTF-8, newlines as
  \\n), equals the text its `touch` wrote with `source` replaced by `target`;
- `sb_include`: the regex `pattern` is found in the file;
- `sb_compile`: the project compiled (`tex_check` getter);
- `sb_stop`: the agent ended as the task expects (DONE, FAIL, or ANS with these args).

The checks of ScienceBoard's patched apps read state through HTTP servers compiled into
those builds; `UNAVAILABLE` says, per check, why it cannot be read from a stock app here.
KAlgebra's are read from the stock app (metrics/kalgebra.py), but for two kinds of `eqn`.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.errors import TaskError

__all__ = ["METRICS", "UNAVAILABLE", "sb_compile", "sb_file", "sb_include", "sb_stop"]

_PATCHED = (
    "ScienceBoard reads {what} from an HTTP server compiled into its patched build of {app}, "
    "which no registry here ships"
)
UNAVAILABLE: dict[str, str] = {
    "sb_celestia_info": _PATCHED.format(what="the sky's state (a JSON dump)", app="Celestia"),
    "sb_chimerax_info": _PATCHED.format(what="the session's state", app="ChimeraX"),
    "sb_chimerax_states": _PATCHED.format(what="the models' states", app="ChimeraX"),
    "sb_chimerax_file": "needs ChimeraX (the files it writes, such as AlphaFold's "
    "predictions); UCSF distributes it only from its own site",
    "sb_grassgis_info": _PATCHED.format(what="the GUI's layers and map display", app="GRASS GIS")
    + " (stock GRASS 8.2's accessibility tree has no layer entries, and the display's region "
    "and layers' parameters are in memory only)",
    "sb_grassgis_db": "not implemented: it would read the attribute table from the GRASS "
    "database on disk (v.db.select, v.info -c), which holds nothing without the sample "
    "locations the tasks start from",
    # KAlgebra's var, val and 2D eqn checks read the stock app (metrics/kalgebra.py); these
    # two eqn checks read what its accessibility tree does not show (scienceboard.py names them).
    "sb_kalgebra_eqn3d": "the 3D Graph tab exposes only its input line to accessibility, not "
    "the surface plotted (its expression, style or points), which ScienceBoard's patched "
    "KAlgebra reports",
    "sb_kalgebra_color": "KAlgebra's Functions panel does not expose a plot's colour to "
    "accessibility, which ScienceBoard's patched KAlgebra reports",
    "sb_lean_placeholder": "needs Lean 4 and a lake build of ScienceBoard's Lean project; "
    "no registry here ships Lean",
}


def _text(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:  # text mode: \r\n and \r read as \n
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def sb_file(result: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the file's text is exactly the expected text, else 0.0."""
    return float(_text(result) == rules["text"])


def sb_include(result: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the regex is found in the file's text, else 0.0."""
    text = _text(result)
    return float(text is not None and re.search(rules["pattern"], text) is not None)


def sb_compile(result: dict[str, Any] | None, rules: dict[str, Any] | None = None) -> float:
    """1.0 when the project compiled, else 0.0."""
    return float(bool(result and result.get("pass")))


def sb_stop(result: dict[str, Any], rules: dict[str, Any]) -> float:
    """1.0 when the episode ended as expected (ANS: with the same arguments), else 0.0."""
    if result.get("value") != rules["value"]:
        return 0.0
    return float(rules["value"] != "ANS" or list(result.get("args") or []) == rules["args"])


def _unavailable(name: str) -> Any:
    def metric(*args: Any, **kwargs: Any) -> float:
        raise TaskError(f"{name}: {UNAVAILABLE[name]}")

    metric.__doc__ = f"Not scorable here: {UNAVAILABLE[name]}."
    return metric


METRICS = {
    "sb_file": sb_file,
    "sb_include": sb_include,
    "sb_compile": sb_compile,
    "sb_stop": sb_stop,
    **{name: _unavailable(name) for name in UNAVAILABLE},
}
