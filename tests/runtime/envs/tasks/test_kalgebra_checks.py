"""KAlgebra's checks, pure parts: reading the stock app's accessibility tree (captured from
KAlgebra 22.12 on a desktop: `p := conjugate(1+i)`, `r := a->q->a*q`, `M := 0.366204096223`
typed in its console, two 2D plots added, Very Fine resolution), the calgebra program of a
plot, and the patched app's float32 point rule against real tasks' expected entries, with
the values calgebra prints for the right answers. ScienceBoard's tasks are in
tests/data/scienceboard/VM/KAlgebra, unchanged; the tree in tests/data/kalgebra."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from runtime.envs.tasks.getters.kalgebra import (
    calgebra_results,
    console_result,
    plots_in,
    point_program,
    resolution_in,
    tab_in,
    variables_in,
)
from runtime.envs.tasks.metrics.kalgebra import (
    near_in_float32,
    point_label,
    sb_kalgebra_eqn,
    sb_kalgebra_val,
    sb_kalgebra_var,
)
from runtime.envs.tasks.model import load_task

DATA = Path(__file__).resolve().parents[3] / "data"
TREE = (DATA / "kalgebra" / "session_a11y.xml").read_text()
KALGEBRA = DATA / "scienceboard" / "VM" / "KAlgebra"


def test_the_panels_the_log_and_the_menu_are_read_from_the_tree():
    variables = variables_in(TREE)
    assert variables["p"] == "1"  # the panel's real part only: hence the console query
    assert variables["r"] == "a->q->a*q" and variables["M"] == "0.366204096223"
    assert {"euler", "pi", "e", "i", "true", "false", "ans"} <= set(variables)
    assert [(p.expression, p.shown) for p in plots_in(TREE)] == [
        ("q->6*sin(3*q)", True),
        ("x^2/16+y^2/9=1", True),
    ]
    assert resolution_in(TREE) == 3328
    assert tab_in(TREE) == "2D Graph"
    assert console_result(TREE, "sqrt(-1)") == "sqrt(-1)"  # the log's last entry
    assert console_result(TREE, "p") is None  # not the last entry: no answer


def test_calgebra_results_are_one_per_line_errors_included():
    stderr = "x->ln(x)^2\nnan\nError:\n - Cannot divide by 0.\n1+-i\n\nExit.\n"
    assert calgebra_results(stderr) == ["x->ln(x)^2", "nan", "Error:", "1+-i"]


def test_the_program_reads_each_kind_of_plot():
    explicit = point_program("ln(x)^2", [[11, 5.7]], [])
    assert explicit.lines == ["f := x->ln(x)^2", "f(11)"] and explicit.targets == [5.7]
    of_y = point_program("y->y^2", [[4, 2]], ["a := 1"])
    assert of_y.lines == ["a := 1", "f := y->y^2", "f(2)"] and of_y.targets == [4.0]
    implicit = point_program("x^2/16+y^2/9=1", [[4, 0.5]], [])
    assert implicit.lines[-2:] == ["f := (x, y)->(x^2/16+y^2/9)-(1)", "f(4, 0.5)"]
    assert implicit.targets == [0.0]
    polar = point_program("q->2*q", [[1, 2]], [])
    assert polar.lines[-1] == "f(1)" and polar.targets == [2.0]


def test_the_float32_rule_decides_b04s_points_as_scienceboard_expects():
    """B-04's e^x-1 at x = 16.64: calgebra prints 16852337.6462 (12 digits), 0.047 from the
    expected 16852337.6935...; only compared as C floats is the point on the curve."""
    task = json.loads((KALGEBRA / "B-04.json").read_text())
    (check,) = task["evaluate"]
    printed = {16.64: "16852337.6462", 5.31: "201.350228207", 1.9: "5.68589444013"}
    for x, value in printed.items():
        point = next(p for p in check["key"] if p[0] == x)
        assert near_in_float32(value, point[1]) is check["value"][point_label(point)]
    assert abs(16852337.6462 - 16852337.69353376) > 1e-4  # in doubles it would fail
    assert not near_in_float32("1+2*i", 1.0) and not near_in_float32("nan", 0.0)
    assert not near_in_float32("Error:", 0.0) and not near_in_float32("1e39", 1e39)


def test_point_labels_are_scienceboards_keys():
    for check in json.loads((KALGEBRA / "A-02.json").read_text())["evaluate"]:
        assert [point_label(p) for p in check["key"]] == list(check["value"])
    assert point_label([0, -0.0, 1]) == "(0, -0.0, 1)"


def test_var_val_and_size_rules():
    state = {"variables": {"p": "1", "euler": "0.57"}, "values": {"p": "1+-i"}, "plots": []}
    assert sb_kalgebra_var(state, {"key": "p", "value": "1+-i"}) == 1.0
    assert sb_kalgebra_var(state, {"key": "p", "value": "1"}) == 0.0
    assert sb_kalgebra_var(state, {"key": "euler", "value": "#UNDEF"}) == 0.0
    assert sb_kalgebra_var(state, {"key": "gamma", "value": "#UNDEF"}) == 1.0
    number = {"variables": {"p": "1.58"}, "values": {"p": "1.58496250072"}}
    assert sb_kalgebra_val(number, {"key": "p", "value": 1.58496250072}) == 1.0
    assert sb_kalgebra_val(number, {"key": "p", "value": 1.585}) == 0.0
    assert sb_kalgebra_val(state, {"key": "p", "value": 1.0}) == 0.0  # complex: no number
    assert sb_kalgebra_eqn(state, {"key": "#SIZE", "value": 0}) == 1.0
    assert sb_kalgebra_eqn(None, {"key": "#SIZE", "value": 0}) == 0.0


@pytest.mark.skipif(shutil.which("calgebra") is None, reason="needs KAlgebra's calgebra")
@pytest.mark.parametrize(
    ("name", "expression", "defs"),
    [
        ("A-02", "ln(x)^2", []),
        ("B-01", "x^2", []),
        ("B-05", "x->sin(x+pi/4)", []),
        ("C-09", "q->2*q", []),  # r(2), as KAlgebra resolves it with `r := a->q->a*q`
        ("C-13", "piecewise { x<0 ? (x^2-x)*e^x-1, ? (x^2+x)*e^(-x)-1 }", []),
    ],
)
def test_right_answers_pass_real_tasks_with_calgebra_on_the_host(name, expression, defs):
    """Each task's expected entries, with the right plot evaluated by calgebra (the app's
    engine) as the getter runs it in the desktop; a wrong plot fails."""
    raw = json.loads((KALGEBRA / f"{name}.json").read_text())
    for check in raw["evaluate"]:
        if check["type"] != "eqn":
            continue
        rules = {k: v for k, v in check.items() if k != "type"}
        assert sb_kalgebra_eqn(_state(expression, check["key"], defs, rules), rules) == 1.0
        assert sb_kalgebra_eqn(_state("x+100", check["key"], defs, rules), rules) == 0.0


def _state(expression: str, points: list[list[float]], defs: list[str], rules: dict) -> dict:
    program = point_program(expression, points, defs)
    run = subprocess.run(
        ["calgebra"],
        input="\n".join(program.lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    values = calgebra_results(run.stderr)[-program.calls :]
    resolution = rules["value"].get("res", 832)
    plot = {"expression": expression, "shown": True, "values": values, "targets": program.targets}
    return {"plots": [plot], "resolution": resolution}


def test_the_conversion_gives_kalgebras_checks_their_getter_and_names_what_cannot_be_read():
    a01 = load_task(KALGEBRA / "A-01.json")
    assert a01.evaluator.funcs == ["sb_kalgebra_var"]
    assert a01.evaluator.results == [{"type": "kalgebra_state", "vars": ["p"]}]
    assert a01.config[0]["parameters"]["command"] == "kalgebra"  # the stock app, no port
    a02 = load_task(KALGEBRA / "A-02.json")
    assert a02.evaluator.results[0]["points"] == a02.native["evaluate"][0]["key"]
    assert load_task(KALGEBRA / "B-03.json").evaluator.results == [{"type": "kalgebra_state"}]
    assert load_task(KALGEBRA / "A-03.json").evaluator.funcs == ["sb_kalgebra_eqn3d"]
    b04 = load_task(KALGEBRA / "B-04.json")
    assert b04.evaluator.funcs == ["sb_kalgebra_color"]
