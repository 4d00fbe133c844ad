"""GIMP's settings with OSWorld's metric name: a key's value in one of its config files
(`gimprc`, `sessionrc`, `action-history`, as the `gimp_config_file` getter fetches them).

The image checks of GIMP tasks are in `images`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["METRICS", "check_config_status"]


def check_config_status(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when a line of the GIMP config file sets `rule["key"]` to `rule["value"]`.

    A line is `(key ... value)`; the key is its first word, or, for a two-word key such as
    `["history-item", "\\"filters-vignette\\""]`, its first two; the value is its last word,
    quotes included (`(theme "Light")` has the value `"Light"`).
    """
    if result is None:
        return 0.0
    key, value = rule["key"], rule["value"]
    keys = [key] if isinstance(key, str) else list(key)
    if len(keys) not in (1, 2):
        return 0.0
    for line in Path(result).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        words = line.strip().lstrip("(").rstrip(")").split()
        if words[: len(keys)] == keys and words[-1] == value:
            return 1.0
    return 0.0


METRICS = {"check_config_status": check_config_status}
