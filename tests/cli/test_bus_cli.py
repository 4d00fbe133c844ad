"""The event-backbone commands as a person uses them: broker, topics, produce, tail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from runtime.broker import free_port
from topics.registry import TOPICS

SCALECUA = [sys.executable, "-m", "cli"]


def _run(args: list[str], env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([*SCALECUA, *args], env=env, input=stdin, capture_output=True, timeout=60)


@pytest.mark.parametrize("name", list(TOPICS))
def test_produce_example_is_valid_json_for_every_topic(name: str) -> None:
    res = _run(["produce", name, "--example"], dict(os.environ))
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), dict)


def test_broker_then_live_tail_then_stop(tmp_path: Path) -> None:
    """`scalecua broker` + `scalecua tail` let a person watch a topic live."""
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("SCALECUA_BOOTSTRAP", None)
    port = free_port()
    broker = subprocess.Popen([*SCALECUA, "broker", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    tail = None
    try:
        assert broker.stdout.readline().decode().strip() == f"127.0.0.1:{port}"
        assert (
            json.loads((tmp_path / "broker.json").read_text())["bootstrap"] == f"127.0.0.1:{port}"
        )

        listed = _run(["topics", "list"], env)  # finds the broker through the state file
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert {r["topic"] for r in rows if r["exists"]} == set(TOPICS)

        old = _run(["produce", "reward", "--example"], env).stdout
        assert _run(["produce", "reward"], env, old).returncode == 0  # before tail starts
        tail = subprocess.Popen([*SCALECUA, "tail", "reward", "--max", "2"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        time.sleep(2.0)
        new = [orjson.loads(old) | {"trajectory_id": f"live/{i}"} for i in range(2)]
        lines = b"".join(orjson.dumps(e) + b"\n" for e in new)
        res = _run(["produce", "reward"], env, lines)
        assert res.returncode == 0 and b"wrote 2 records" in res.stderr
        out, err = tail.communicate(timeout=30)
        got = [json.loads(line) for line in out.decode().splitlines()]
        assert sorted(g["trajectory_id"] for g in got) == ["live/0", "live/1"]
        for g in got:  # every field of the event, plus where it sits in the log
            assert {"event_id", "producer_id", "ts_ms", "score", "_partition", "_offset"} <= set(g)

        res = _run(["tail", "reward", "--from-beginning", "--max", "3"], env)
        assert [json.loads(x)["trajectory_id"] for x in res.stdout.decode().splitlines()].count(
            "g-000001/0"
        ) == 1
    finally:
        if tail and tail.poll() is None:
            tail.kill()
        broker.send_signal(signal.SIGINT)
        broker.wait(15)
    assert broker.returncode == 0
    assert not (tmp_path / "broker.json").exists()


def test_produce_reports_invalid_lines_and_keeps_going(cli_env: dict[str, str]) -> None:
    good = _run(["produce", "task-stats", "--example"], cli_env).stdout
    res = _run(["produce", "task-stats"], cli_env, good + b'{"task_id": 5}\nnot json\n' + good)
    assert res.returncode == 1
    err = res.stderr.decode()
    assert "line 2:" in err and "line 3:" in err and "wrote 2 records" in err


def test_commands_fail_clearly_without_a_broker(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path)}
    env.pop("SCALECUA_BOOTSTRAP", None)
    res = _run(["tail", "reward", "--max", "1"], env)
    assert res.returncode == 1 and b"no broker configured" in res.stderr
    env["SCALECUA_BOOTSTRAP"] = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    res = _run(["topics", "list"], env)
    assert res.returncode == 1 and b"scalecua: error:" in res.stderr
    assert b"Traceback" not in res.stderr
    assert time.monotonic() - started < 30


def test_unknown_topic_is_a_clean_error(cli_env: dict[str, str]) -> None:
    res = _run(["tail", "rewards", "--max", "1"], cli_env)
    assert res.returncode == 1 and b"unknown topic 'rewards'" in res.stderr


def test_produce_refuses_impossible_rewards_with_a_one_line_reason(cli_env: dict[str, str]) -> None:
    good = orjson.loads(_run(["produce", "reward", "--example"], cli_env).stdout)
    lines = [
        good | {"score": 1.7e308},  # issue 22: accepted before, and NaN advantages followed
        good | {"group_size": 0},
        good | {"group_size": -1},
        good | {"sample_index": 8},
        good,
    ]
    res = _run(["produce", "reward"], cli_env, b"".join(orjson.dumps(x) + b"\n" for x in lines))
    assert res.returncode == 1
    err = res.stderr.decode().splitlines()
    assert err[0].startswith("line 1: reward: not a valid Reward: score 1.7e+308 is outside")
    assert err[1] == "line 2: reward: not a valid Reward: group_size must be at least 1, not 0"
    assert err[2] == "line 3: reward: not a valid Reward: group_size must be at least 1, not -1"
    assert err[3] == "line 4: reward: not a valid Reward: sample_index 8 is outside a group of 8"
    assert err[4] == "wrote 1 records to reward; 4 invalid lines"
