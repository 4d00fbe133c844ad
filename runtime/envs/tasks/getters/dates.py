"""Getters whose value depends on today's date: OSWorld's `rule_relativeTime` and
`time_diff_range`.

`rule_relativeTime` turns a rule written with relative days ("next Monday", "10th next
month") into the dates of the day the task is scored, e.g. `{"time": "{DoW}, {Month}
{DayD}, {Year}"}` becomes `{"time": "Mon, Dec 1, 2025"}`; a web task compares them with
what the site shows. The day names and formats are OSWorld's; where OSWorld's arithmetic
breaks ("first monday four months later" in August), the calendar's answer is used.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, Getter
from runtime.errors import TaskError

__all__ = ["GETTERS", "format_day", "relative_day"]

_DOW = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip


def _next_month(now: datetime, day: int) -> datetime:
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, day)


def _first_monday_four_months_later(now: datetime) -> datetime:
    months = now.month - 1 + 4
    first = datetime(now.year + months // 12, months % 12 + 1, 1)
    return first + timedelta(days=(7 - first.weekday()) % 7)


def relative_day(name: str, now: datetime, start: str | None = None) -> datetime:
    """The day a relative name means at `now`; `start` is the range's first day, if any."""
    weekday = now.weekday()
    if name == "tomorrow":
        return now + timedelta(days=1)
    if name == "this month":
        return now
    if name in ("5th next month", "10th next month", "11th next month"):
        return _next_month(now, int(name.split("th", 1)[0]))
    if name == "this Saturday":
        return now + timedelta(days=5 - weekday)
    if name == "this Sunday":
        return now + timedelta(days=6 - weekday)
    if name == "next Monday":
        return now + timedelta(days=7 - weekday)
    if name == "next Friday":
        if weekday < 4 and start == "next Monday":
            return now + timedelta(days=4 - weekday + 7)
        return now + timedelta(days=4 - weekday if weekday < 4 else 6 - weekday + 5)
    if name == "first monday four months later":
        return _first_monday_four_months_later(now)
    raise TaskError(f"rule_relativeTime: unknown relative day {name!r}")


def format_day(template: str, day: datetime) -> str:
    """Fill OSWorld's date placeholders ({DoW}, {Month}, {DayD}, {Day0D}, {Year}, {Month0D},
    {month}, {MonthFull}), each once."""
    month = _MONTHS[day.month - 1]
    for key, value in (
        ("{DoW}", _DOW[day.weekday()]),
        ("{Month}", month[:3]),
        ("{DayD}", str(day.day)),
        ("{Year}", str(day.year)),
        ("{Month0D}", f"{day.month:02d}"),
        ("{month}", month.lower()),
        ("{MonthFull}", month),
        ("{Day0D}", f"{day.day:02d}"),
    ):
        template = template.replace(key, value, 1)
    return template


async def get_rule_relativeTime(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 - OSWorld's name
    """The `rules` with their expected dates filled in for today: `relativeTime.from` fills
    `expected.time` (or `expected.from` when there is a `to`, which fills `expected.to`)."""
    rules = copy.deepcopy(config["rules"])
    relative, expected = rules["relativeTime"], rules["expected"]
    now = datetime.now()
    if "to" not in relative:
        expected["time"] = format_day(expected["time"], relative_day(relative["from"], now))
    else:
        expected["from"] = format_day(expected["from"], relative_day(relative["from"], now))
        day = relative_day(relative["to"], now, start=relative["from"])
        expected["to"] = format_day(expected["to"], day)
    return rules


async def get_time_diff_range(ctx: EvalContext, config: dict[str, Any]) -> Any:
    """The allowed time difference in minutes (`diff_range_in_minutes`), as given."""
    return config.get("diff_range_in_minutes")


GETTERS: dict[str, Getter] = {
    "rule_relativeTime": get_rule_relativeTime,
    "time_diff_range": get_time_diff_range,
}
