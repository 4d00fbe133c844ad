"""ScienceBoard's checks of KAlgebra as metrics, scored from `kalgebra_state`
(getters/kalgebra.py), each 1.0 or 0.0 as ScienceBoard's pass or fail:

- `sb_kalgebra_var`: the variable's value, as KAlgebra prints it, is the expected string
  (`1+-i`); `#UNDEF`: the Variables panel has no such variable;
- `sb_kalgebra_val`: the variable's value is a number within 1e-6 of the expected one;
- `sb_kalgebra_eqn`: some 2D plot gives every expected entry: per point (`"(x, y)"`),
  whether the plot passes through it, compared as the patched app compares, in C `float`
  within 1e-4 (B-04's points only come out right in float32), and `res`, the resolution;
  `#SIZE`: the number of 2D plots.

Pure: the getter did the reading.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

__all__ = [
    "METRICS",
    "SIZE",
    "UNDEFINED",
    "near_in_float32",
    "plot_entries",
    "point_label",
    "sb_kalgebra_eqn",
    "sb_kalgebra_val",
    "sb_kalgebra_var",
]

UNDEFINED = "#UNDEF"
SIZE = "#SIZE"
_TOLERANCE = 1e-4  # the patched app's, on float32 values
_VAL_TOLERANCE = 1e-6  # ScienceBoard's is_near


def point_label(point: list[float]) -> str:
    """A point as ScienceBoard's expected dict names it: `(-16, -3.0538080772170604)`."""
    return "(" + ", ".join(json.dumps(v) for v in point) + ")"


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def near_in_float32(value: str, target: float) -> bool:
    """Whether calgebra's printed value and the target agree within 1e-4 as C floats (a
    complex, `nan`, an error or a float overflow never does)."""
    try:
        got = float(value)
        return math.isfinite(got) and abs(_float32(got) - _float32(target)) <= _TOLERANCE
    except (ValueError, OverflowError):
        return False


def plot_entries(
    plot: dict[str, Any], points: list[list[float]], resolution: Any
) -> dict[str, Any]:
    """One plot's entries as the patched app reports them: per point whether it is on the
    plot, and `res`."""
    values, targets = plot.get("values") or [], plot.get("targets") or []
    entries: dict[str, Any] = {
        point_label(p): i < len(values) and near_in_float32(values[i], targets[i])
        for i, p in enumerate(points)
    }
    entries["res"] = resolution
    return entries


def sb_kalgebra_var(result: dict[str, Any] | None, rules: dict[str, Any]) -> float:
    """1.0 when the variable's printed value is the expected string (or, for #UNDEF, when
    no variable of that name exists), else 0.0."""
    if not result:
        return 0.0
    if rules["value"] == UNDEFINED:
        return float(rules["key"] not in (result.get("variables") or {}))
    return float((result.get("values") or {}).get(rules["key"]) == rules["value"])


def sb_kalgebra_val(result: dict[str, Any] | None, rules: dict[str, Any]) -> float:
    """1.0 when the variable is a number within 1e-6 of the expected value, else 0.0."""
    value = ((result or {}).get("values") or {}).get(rules["key"])
    try:
        return float(abs(float(value) - float(rules["value"])) <= _VAL_TOLERANCE)
    except (TypeError, ValueError):
        return 0.0


def sb_kalgebra_eqn(result: dict[str, Any] | None, rules: dict[str, Any]) -> float:
    """1.0 when some 2D plot gives every expected entry (#SIZE: there are that many plots),
    else 0.0."""
    if not result:
        return 0.0
    plots = result.get("plots") or []
    if rules["key"] == SIZE:
        return float(len(plots) == rules["value"])
    expected = rules["value"]
    for plot in plots:
        got = plot_entries(plot, rules["key"], result.get("resolution"))
        if all(k in got and got[k] == v for k, v in expected.items()):
            return 1.0
    return 0.0


METRICS = {
    "sb_kalgebra_var": sb_kalgebra_var,
    "sb_kalgebra_val": sb_kalgebra_val,
    "sb_kalgebra_eqn": sb_kalgebra_eqn,
}
