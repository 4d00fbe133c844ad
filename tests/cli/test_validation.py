"""Settings are checked where they are parsed: flag, config file and environment alike.

A value a setting does not take is one line on stderr naming the setting and where the value
came from, exit status 2, no traceback, before the command starts anything. Valid values from
every source still apply.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from cli import build_parser
from cli.settings import ListKind, bind_settings, check_parsed
from cli.settings.binding import Setting, walk_commands
from producers.task_import import publish_tasks
from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.errors import SettingError
from topics.events import TaskEvent

ROOT = Path(__file__).resolve().parents[3]
SCALECUA = [sys.executable, "-m", "cli"]


def _scalecua(
    args: list[str], tmp_path: Path, env: dict[str, str] | None = None, toml: str | None = None
) -> subprocess.CompletedProcess:
    """Run the console in an empty folder (no ./scalecua.toml, no broker, no SCALECUA_*)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCALECUA_")}
    clean |= {"SCALECUA_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT), **(env or {})}
    if toml is not None:
        (tmp_path / "scalecua.toml").write_text(toml)
    return subprocess.run([*SCALECUA, *args], cwd=tmp_path, env=clean, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _refused(res: subprocess.CompletedProcess, *words: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("scalecua: error: ["), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


BAD_FLAGS = [
    (["segment", "--k", "0"], ["[segment] k = 0", "(--k)", "integer >= 1"]),
    (["segment", "--delta", "0"], ["[segment] delta = 0", "(--delta)"]),
    (["sample", "--n", "-1"], ["[sample] n = -1", "(--n)"]),
    (["sample", "--batch", "0"], ["[sample] batch = 0", "(--batch)"]),
    (["sample", "--sigma", "0"], ["[sample] sigma = 0", "> 0"]),
    (["sample", "--gamma", "1.5"], ["[sample] gamma = 1.5", "[0, 1]"]),
    (["sample", "--strategy", "psychic"], ["[sample] strategy = psychic", "choose one of"]),
    (["sample", "--p-min", "0.8", "--p-max", "0.2"], ["p_min = 0.8", "p_max = 0.2"]),
    (["request", "calc_sum_total", "--max-steps", "0"], ["[request] max_steps = 0"]),
    (["request", "calc_sum_total", "--n", "0"], ["[request] n = 0", "(--n)"]),
    (["request", "calc_sum_total", "--n", "-3"], ["[request] n = -3", "(--n)"]),
    (["train", "--lr", "nan"], ["[train] lr = nan", "finite number > 0"]),
    (["train", "--lr", "fast"], ["[train] lr = fast", "(--lr)"]),
    (["train", "--clip-high", "-0.1"], ["[train] clip_high = -0.1", ">= 0"]),
    (["rollout", "--temperature", "-1"], ["[rollout] temperature = -1", ">= 0"]),
    (["rollout", "--context", "5", "0"], ["[rollout] context = [5, 0]", "DELTA"]),
    (["up", "--batch", "0", "--policy", "scripted"], ["[up] batch = 0", "(--batch)"]),
    (["dashboard", "--trajectories", "0"], ["[dashboard] trajectories = 0"]),
    (
        ["train", "--batch-groups", "99999999999999999999999"],
        ["[train] batch_groups = 99999999999999999999999", "integer in [1, 9223372036854775807]"],
    ),
    (
        ["train", "--max-lag", "9223372036854775808"],
        ["[train] max_lag = 9223372036854775808", "integer in [-1, 9223372036854775807]"],
    ),
]


@pytest.mark.parametrize(("argv", "words"), BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_and_exit_2(argv: list[str], words: list[str], tmp_path: Path) -> None:
    _refused(_scalecua(argv, tmp_path), "on the command line", *words)


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('[train]\nlr = "fast"\n', ['[train] lr = "fast" in scalecua.toml', "number"]),
        ("[segment]\nk = 0\n", ["[segment] k = 0 in scalecua.toml", "integer >= 1"]),
        ("[sample]\nbatch = 2.5\n", ["[sample] batch = 2.5", "integer"]),
        ("[rollout]\ncontext = [5, 0]\n", ["[rollout] context = [5, 0]", "DELTA"]),
        ("[rollout]\ncontext = [5]\n", ["[rollout] context = [5]", "list of 2 values"]),
        ('[train]\nskip_equal_groups = "yes"\n', ["skip_equal_groups", "true or false"]),
        ('[sample]\nstrategy = "psychic"\n', ["[sample] strategy", "choose one of"]),
        ("[sample]\np_min = 0.9\np_max = 0.1\n", ["p_min = 0.9 in scalecua.toml", "p_max"]),
        (
            "[train]\nbatch_groups = 99999999999999999999999\n",
            [
                "[train] batch_groups = 99999999999999999999999 in scalecua.toml",
                "expected an integer in [1, 9223372036854775807]",
            ],
        ),
    ],
    ids=lambda v: v.replace("\n", " ").strip() if isinstance(v, str) else "",
)
def test_bad_config_file_value_is_one_line_and_exit_2(
    toml: str, words: list[str], tmp_path: Path
) -> None:
    _refused(_scalecua(["config", "show"], tmp_path, toml=toml), *words)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SCALECUA_TRAIN_LR": "abc"}, ["[train] lr = abc in $SCALECUA_TRAIN_LR", "number"]),
        ({"SCALECUA_SAMPLE_SIGMA": "0"}, ["[sample] sigma = 0 in $SCALECUA_SAMPLE_SIGMA"]),
        ({"SCALECUA_SEGMENT_K": "-1"}, ["[segment] k = -1 in $SCALECUA_SEGMENT_K"]),
        ({"SCALECUA_ROLLOUT_TOP_P": "1.5"}, ["[rollout] top_p = 1.5", "(0, 1]"]),
        ({"SCALECUA_TRAIN_LR": "inf"}, ["[train] lr = inf", "finite"]),
        (
            {"SCALECUA_TRAIN_BATCH_GROUPS": "99999999999999999999999"},
            [
                "[train] batch_groups = 99999999999999999999999 in $SCALECUA_TRAIN_BATCH_GROUPS",
                "expected an integer in [1, 9223372036854775807]",
            ],
        ),
    ],
    ids=lambda v: " ".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else "",
)
def test_bad_environment_value_is_one_line_and_exit_2(
    env: dict[str, str], words: list[str], tmp_path: Path
) -> None:
    _refused(_scalecua(["config", "show"], tmp_path, env=env), *words)


def test_a_bad_value_is_refused_whichever_command_runs(tmp_path: Path) -> None:
    """A bad file or environment value stops every command, named, before it runs."""
    res = _scalecua(["tasks", "list"], tmp_path, env={"SCALECUA_TRAIN_LR": "abc"})
    _refused(res, "[train] lr = abc in $SCALECUA_TRAIN_LR")
    res = _scalecua(["topics", "create"], tmp_path, env={"SCALECUA_REPLICATION": "abc"})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip() == (
        "scalecua: error: $SCALECUA_REPLICATION = abc: expected an integer >= 1"
    )


def test_good_values_from_file_and_environment_apply(tmp_path: Path) -> None:
    toml = (
        "[train]\nlr = 1e-5\ngrad_clip = 0\n\n[rollout]\ncontext = [0, 0]\ntemperature = 0\n\n"
        '[sample]\nstrategy = "uniform"\nmu = 1\np_min = 0.5\np_max = 0.5\n'
    )
    env = {
        "SCALECUA_SAMPLE_BATCH": "4",
        "SCALECUA_TRAIN_MAX_LAG": "-1",
        "SCALECUA_TRAIN_KL_COEF": "2e-4",
        "SCALECUA_TRAIN_SKIP_EQUAL_GROUPS": "true",
        "SCALECUA_ROLLOUT_POLICY": "smollm2",
        "SCALECUA_ROLLOUT_CONTEXT": "[8, 5]",  # the environment wins over the file
        "SCALECUA_JUDGE_JUDGE_VERSION": "2",  # a string setting takes the text as it is
        "SCALECUA_REPLICATION": "abc",  # read only by `topics create`
    }
    res = _scalecua(["config", "show"], tmp_path, env=env, toml=toml)
    assert res.returncode == 0, res.stderr
    shown = tomllib.loads(res.stdout)
    assert (shown["train"]["lr"], shown["train"]["grad_clip"]) == (1e-5, 0.0)
    assert (shown["train"]["max_lag"], shown["train"]["kl_coef"]) == (-1, 2e-4)
    assert shown["train"]["skip_equal_groups"] is True
    assert (shown["rollout"]["context"], shown["rollout"]["temperature"]) == ([8, 5], 0.0)
    assert shown["rollout"]["policy"] == "smollm2" and shown["judge"]["judge_version"] == "2"
    assert (shown["sample"]["strategy"], shown["sample"]["batch"]) == ("uniform", 4)
    assert (shown["sample"]["mu"], shown["sample"]["p_min"], shown["sample"]["p_max"]) == (
        1.0, 0.5, 0.5,
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["segment", "--k", "1", "--delta", "1"],
        ["sample", "--mu", "0", "--gamma", "1", "--p-min", "0.5", "--p-max", "0.5", "--seed", "0"],
        ["rollout", "--context", "0", "0", "--temperature", "0", "--top-p", "1"],
        ["train", "--max-lag", "-1", "--grad-clip", "0", "--clip-low", "0", "--kl-coef", "0"],
        ["request", "calc_sum_total", "--n", "1", "--max-steps", "1"],
        ["dashboard", "--port", "0", "--threshold", "1"],
        ["eval", "--policy", "tiny", "--split", "heldout", "--temperature", "0", "--json", "x"],
    ],
    ids=" ".join,
)
def test_good_flags_parse(argv: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_parsed(parser, args)


def test_flags_arrive_typed() -> None:
    args = build_parser().parse_args(["rollout", "--context", "3", "2", "--temperature", "1"])
    assert args.context == [3, 2] and args.temperature == 1.0
    assert isinstance(args.temperature, float)
    args = build_parser().parse_args(["eval", "--policy", "tiny", "--tasks", "d", "--n", "7"])
    assert args.n == 7 and args.tasks == Path("d")


def test_every_option_declares_what_it_takes_and_its_default_is_valid() -> None:
    """Every option of every command is a checked setting with a range, and its default passes."""
    parser = build_parser()
    seen, bare = 0, []
    for command, sub in walk_commands(parser):
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            assert isinstance(action.type, Setting), (command, action.dest)
            seen += 1
            if not action.type.ranged:
                bare.append(f"{command} {action.option_strings[-1]}")
            default = action.default
            if default is not None:
                if isinstance(action.type.kind, ListKind):
                    default = list(default)
                action.type.kind.check(default)
    assert seen > 200
    assert not bare, f"declare integer(...) or number(...) with a range for: {', '.join(bare)}"


def test_a_bare_number_option_is_still_checked_and_flagged() -> None:
    """An option added with a bare `type=float` gets no traceback, and the test above names it."""
    parser = argparse.ArgumentParser(prog="scalecua")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("thing").add_argument("--wait", type=float, default=1.0)
    bind_settings(parser)
    (action,) = [a for a in walk_commands(parser)[0][1]._actions if a.dest == "wait"]
    assert not action.type.ranged
    with pytest.raises(SettingError, match=r"\[thing\] wait = nan on the command line"):
        parser.parse_args(["thing", "--wait", "nan"])
    with pytest.raises(TypeError, match="--when"):  # any other callable must be declared
        sub.add_parser("other").add_argument("--when", type=bytes)
        bind_settings(parser)


# -- `scalecua request TASK`: the task must be one a rollout worker can find ---------------

TOPIC_TASK = {
    "id": "only-on-the-topic",
    "snapshot": "terminal",
    "instruction": "Write 42 in ~/answer.txt",
    "config": [],
    "related_apps": ["terminal"],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_file", "path": "/home/user/answer.txt", "dest": "answer.txt"},
        "expected": {"type": "rule", "rules": {"match": "42"}},
    },
}


async def _requests(settings: BusSettings, at_least: int) -> list:
    out: list = []
    async with EventConsumer(settings, ["rollout-requests"], group_id=None) as consumer:
        tps = await consumer.partitions_of("rollout-requests")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out.extend(await consumer.getmany(timeout_ms=200))
            if len(out) >= at_least and await consumer.at_end(tps):
                break
    return out


async def test_request_for_an_unknown_task_is_refused(
    bus_settings: BusSettings, cli_env: dict[str, str]
) -> None:
    await publish_tasks(bus_settings, [TaskEvent(task_id="only-on-the-topic", task=TOPIC_TASK)])

    def request(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*SCALECUA, "request", *argv], env=cli_env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    refused = request("no_such_task", "--n", "2")
    line = _refused(refused, "[request] task_id = no_such_task", "no such task")
    assert "tasks list" in line and refused.stdout == ""
    built_in = request("calc_sum_total", "--n", "2")
    assert built_in.returncode == 0, built_in.stderr
    on_topic = request("only-on-the-topic", "--n", "1")  # imported, generated, VeriGen tasks
    assert on_topic.returncode == 0, on_topic.stderr
    written = await _requests(bus_settings, 3)
    assert sorted(r.event.task_id for r in written) == [
        "calc_sum_total", "calc_sum_total", "only-on-the-topic",
    ]  # fmt: skip
