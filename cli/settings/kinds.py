"""What a setting takes: kinds of values (integers, numbers, lists, choices, text, paths,
flags), each checked the same way from a TOML value or from command-line text."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "INT64_MAX", "INT64_MIN", "PORT", "Kind", "ListKind", "flag_kind", "integer", "items",
    "number", "one_of", "path_kind", "text_kind", "toml_value",
]  # fmt: skip

PORT = (0, 65535)  # a TCP port; 0 asks for any free one
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # the widest integer a setting takes


class Kind:
    """What one setting takes: its type and constraint, from TOML values or from text."""

    def __init__(
        self,
        noun: str,
        convert: Callable[[Any, bool], Any],
        valid: Callable[[Any], bool] = lambda _: True,
        verb: str = "expected",
    ) -> None:
        self.noun = noun  # e.g. "an integer >= 1"
        self.reason = f"{verb} {noun}"  # why a value is refused
        self._convert = convert  # (value, from_text) -> value; TypeError/ValueError if wrong
        self._valid = valid

    def check(self, value: Any, text: bool = False) -> Any:
        """The value converted (`text`: it is command-line or environment text); else ValueError."""
        try:
            out = self._convert(value, text)
        except (TypeError, ValueError, KeyError):
            raise ValueError(self.reason) from None
        if not self._valid(out):
            raise ValueError(self.reason)
        return out

    def __call__(self, text: str) -> Any:
        """argparse's `type=` on a parser `bind_settings` has not bound."""
        try:
            return self.check(text, text=True)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


class ListKind(Kind):
    """A list setting (`nargs`, `append`): each item of one kind, a count, a rule on the whole."""

    def __init__(
        self,
        item: Kind,
        count: int | None = None,
        rule: Callable[[list], bool] | None = None,
        rule_reason: str = "",
    ) -> None:
        size = f"{count} values" if count else "values"
        super().__init__(f"a list of {size}, each {item.noun}", self._convert_list)
        self.item, self.count, self.rule, self.rule_reason = item, count, rule, rule_reason

    def _convert_list(self, value: Any, text: bool) -> list:
        if not isinstance(value, list) or (self.count and len(value) != self.count):
            raise TypeError
        return [self.item.check(v) for v in value]

    def check(self, value: Any, text: bool = False) -> list:
        """The list converted, each item checked, then its rule; else ValueError."""
        out = super().check(value, text)
        if self.rule is not None and not self.rule(out):
            raise ValueError(self.rule_reason)
        return out

    def __call__(self, text: str) -> Any:
        """argparse's `type=`: one item of the list."""
        return self.item(text)


def _as_int(value: Any, text: bool) -> int:
    if text:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError


def _as_float(value: Any, text: bool) -> float:
    if text:
        return float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise TypeError


def _as_str(value: Any, text: bool) -> str:
    if isinstance(value, str) and value:
        return value
    raise TypeError


def _as_bool(value: Any, text: bool) -> bool:
    if text:
        return {"true": True, "false": False}[value]
    if isinstance(value, bool):
        return value
    raise TypeError


def _bounds(low: float | None, high: float | None, above: float | None, below: float | None) -> str:
    lo = f"{low:g}" if low is not None else f"{above:g}" if above is not None else None
    hi = f"{high:g}" if high is not None else f"{below:g}" if below is not None else None
    if lo is not None and hi is not None:
        return f" in {'[' if above is None else '('}{lo}, {hi}{']' if below is None else ')'}"
    if lo is not None:
        return f" {'>=' if above is None else '>'} {lo}"
    if hi is not None:
        return f" {'<=' if below is None else '<'} {hi}"
    return ""


def _within(x: float, low: Any, high: Any, above: Any = None, below: Any = None) -> bool:
    return (
        (low is None or x >= low)
        and (high is None or x <= high)
        and (above is None or x > above)
        and (below is None or x < below)
    )


class _Integer(Kind):
    """A whole number in its declared range and within 64 bits (what events and tensors hold)."""

    def __init__(self, low: int | None, high: int | None) -> None:
        super().__init__(f"an integer{_bounds(low, high, None, None)}", _as_int,
                         lambda x: _within(x, low, high))  # fmt: skip
        # A bound left open is still 64 bits: beyond it the value cannot be encoded or used.
        self.low = INT64_MIN if low is None else max(low, INT64_MIN)
        self.high = INT64_MAX if high is None else min(high, INT64_MAX)

    def check(self, value: Any, text: bool = False) -> int:
        """The whole number, within its range; else ValueError naming the range."""
        out = super().check(value, text)
        if not self.low <= out <= self.high:
            raise ValueError(f"expected an integer in [{self.low}, {self.high}]")
        return out


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """A whole number, low <= x <= high (each bound optional; never beyond 64 bits)."""
    return _Integer(low, high)


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
) -> Kind:
    """A finite number, low <= x <= high and above < x < below (each bound optional)."""
    span = _bounds(low, high, above, below)
    finite = "" if span.startswith(" in ") else "finite "
    return Kind(f"a {finite}number{span}", _as_float,
                lambda x: math.isfinite(x) and _within(x, low, high, above, below))  # fmt: skip


def items(
    item: Kind,
    count: int | None = None,
    rule: Callable[[list], bool] | None = None,
    rule_reason: str = "",
) -> ListKind:
    """A list of `count` (any number if None) values of one kind, with a rule on the whole."""
    return ListKind(item, count, rule, rule_reason)


def text_kind() -> Kind:
    """Any non-empty text."""
    return Kind("a non-empty string", _as_str)


def path_kind() -> Kind:
    """A filesystem path."""
    return Kind("a path", lambda v, text: Path(_as_str(v, text)))


def flag_kind() -> Kind:
    """A boolean switch."""
    return Kind("true or false", _as_bool)


def one_of(choices: Sequence[Any]) -> Kind:
    """One of a fixed set of values."""
    return Kind(", ".join(map(str, choices)), lambda v, text: _as_str(v, text),
                lambda v: v in choices, verb="choose one of")  # fmt: skip


def toml_value(value: Any) -> str:
    """A value as TOML writes it (how a setting's value is shown in errors and files)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
