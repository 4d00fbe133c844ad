"""Rules with relative dates (`rule_relativeTime`) made absolute, on fixed days."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from runtime.envs.tasks.getters import GETTERS
from runtime.envs.tasks.getters.rules import fill_date, relative_day
from runtime.errors import TaskError

WED = dt.date(2024, 1, 31)  # a Wednesday at a month's end
SAT = dt.date(2024, 8, 17)


@pytest.mark.parametrize(
    ("name", "today", "start", "day"),
    [
        ("tomorrow", WED, None, dt.date(2024, 2, 1)),
        ("5th next month", WED, None, dt.date(2024, 2, 5)),
        ("10th next month", dt.date(2024, 12, 3), None, dt.date(2025, 1, 10)),
        ("this month", WED, None, WED),
        ("this Saturday", WED, None, dt.date(2024, 2, 3)),
        ("this Sunday", WED, None, dt.date(2024, 2, 4)),
        ("next Monday", WED, None, dt.date(2024, 2, 5)),
        ("next Monday", dt.date(2024, 2, 5), None, dt.date(2024, 2, 12)),
        ("next Friday", WED, "next Monday", dt.date(2024, 2, 9)),
        ("next Friday", WED, None, dt.date(2024, 2, 2)),
        ("next Friday", SAT, None, dt.date(2024, 8, 23)),
        # August + 4 months is December (OSWorld's own arithmetic fails on that one).
        ("first monday four months later", SAT, None, dt.date(2024, 12, 2)),
        ("first monday four months later", dt.date(2024, 10, 1), None, dt.date(2025, 2, 3)),
    ],
)
def test_relative_days(name, today, start, day):
    assert relative_day(name, today, start) == day


def test_fill_date_placeholders():
    day = dt.date(2024, 3, 5)
    assert fill_date("{DoW}, {Month} {DayD}, {Year}", day) == "Tue, Mar 5, 2024"
    assert fill_date("{Year}-{Month0D}-{Day0D}", day) == "2024-03-05"
    assert fill_date("{MonthFull} / {month}", day) == "March / march"
    with pytest.raises(TaskError):
        relative_day("in a fortnight", day)


async def test_rule_relative_time_getter_leaves_the_task_alone():
    spec = {
        "type": "rule_relativeTime",
        "rules": {
            "relativeTime": {"from": "next Monday", "to": "next Friday"},
            "expected": {"from": "{DoW}, {Month} {DayD}", "to": "{DoW}, {Month} {DayD}"},
        },
    }
    before = copy.deepcopy(spec)
    rules = await GETTERS["rule_relativeTime"](None, spec)
    assert spec == before
    start = relative_day("next Monday", dt.date.today())
    assert rules["expected"]["from"] == fill_date("{DoW}, {Month} {DayD}", start)
    assert rules["expected"]["to"].startswith("Fri, ")
    one = {"rules": {"relativeTime": {"from": "tomorrow"}, "expected": {"time": "{Day0D}"}}}
    tomorrow = dt.date.today() + dt.timedelta(days=1)
    assert (await GETTERS["rule_relativeTime"](None, one))["expected"][
        "time"
    ] == f"{tomorrow.day:02d}"
    assert await GETTERS["time_diff_range"](None, {"diff_range_in_minutes": "60"}) == "60"
