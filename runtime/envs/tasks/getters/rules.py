"""Getters whose value comes from the task itself: rules with relative dates made absolute
(`rule_relativeTime`) and a time tolerance (`time_diff_range`).

`rule_relativeTime` resolves names such as "tomorrow" or "10th next month" against today's
date (the evaluating host's clock, as in OSWorld) and fills the date placeholders of the
rule's expected `time` (or `from` and `to`) strings: {DoW} Mon, {Month} Jan, {MonthFull}
January, {month} january, {Month0D} 01, {DayD} 5, {Day0D} 05, {Year} 2024.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, Getter
from runtime.errors import TaskError

__all__ = ["GETTERS", "fill_date", "relative_day", "get_rule_relative_time", "get_time_diff_range"]

# English names whatever the host's locale (strftime would follow it).
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_NTH_NEXT_MONTH = {"5th next month": 5, "10th next month": 10, "11th next month": 11}


def _add_months(day: dt.date, months: int, on: int) -> dt.date:
    index = day.month - 1 + months
    return dt.date(day.year + index // 12, index % 12 + 1, on)


def relative_day(name: str, today: dt.date, start: str | None = None) -> dt.date:
    """The date a relative name means on `today` (`start`: the `from` name of a range)."""
    weekday = today.weekday()  # Monday is 0
    if name == "tomorrow":
        return today + dt.timedelta(days=1)
    if name in _NTH_NEXT_MONTH:
        return _add_months(today, 1, _NTH_NEXT_MONTH[name])
    if name == "this month":
        return today
    if name == "this Saturday":
        return today + dt.timedelta(days=5 - weekday)
    if name == "this Sunday":
        return today + dt.timedelta(days=6 - weekday)
    if name == "next Monday":  # the Monday of next week
        return today + dt.timedelta(days=7 - weekday)
    if name == "next Friday":
        if weekday < 4 and start == "next Monday":  # the Friday after that Monday
            return today + dt.timedelta(days=4 - weekday + 7)
        return today + dt.timedelta(days=4 - weekday if weekday < 4 else 11 - weekday)
    if name == "first monday four months later":
        first = _add_months(today, 4, 1)
        return first + dt.timedelta(days=(7 - first.weekday()) % 7)
    raise TaskError(f"rule_relativeTime: unknown relative time {name!r}")


def fill_date(template: str, day: dt.date) -> str:
    """The template with its date placeholders filled for `day`."""
    values = {
        "{DoW}": _DAYS[day.weekday()],
        "{MonthFull}": _MONTHS[day.month - 1],
        "{Month0D}": f"{day.month:02d}",
        "{Month}": _MONTHS[day.month - 1][:3],
        "{month}": _MONTHS[day.month - 1].lower(),
        "{Day0D}": f"{day.day:02d}",
        "{DayD}": str(day.day),
        "{Year}": str(day.year),
    }
    for placeholder, value in values.items():
        template = template.replace(placeholder, value)
    return template


async def get_rule_relative_time(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    """The spec's `rules` with the expected time (or from/to) strings made absolute."""
    rules = copy.deepcopy(config["rules"])  # never change the task itself
    relative, expected = rules["relativeTime"], rules["expected"]
    today = dt.date.today()
    if "to" not in relative:
        expected["time"] = fill_date(expected["time"], relative_day(relative["from"], today))
    else:
        expected["from"] = fill_date(expected["from"], relative_day(relative["from"], today))
        to_day = relative_day(relative["to"], today, start=relative["from"])
        expected["to"] = fill_date(expected["to"], to_day)
    return rules


async def get_time_diff_range(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """The spec's `diff_range_in_minutes`."""
    return config["diff_range_in_minutes"]


GETTERS: dict[str, Getter] = {
    "rule_relativeTime": get_rule_relative_time,
    "time_diff_range": get_time_diff_range,
}
