"""`scalecua up`'s console: plain lines in a pipe, a live panel on a terminal, warnings from
the services on the console and every service's log in a file of its own."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

from cli.service_console import ConsoleWarnings
from cli.up.console import UpConsole
from runtime.service_logs import ServiceLogs, as_service, child_log_path


def _row(i: int, elapsed: float, passed: float) -> dict:
    return {
        "iteration": i, "policy_version": i, "rollouts": 8, "mean_reward": passed,
        "pass_rate": passed, "rollout_versions": [i - 1], "step_time_s": 3.0, "loss": 0.01,
        "groups": 2, "groups_all_equal": 1, "elapsed_s": elapsed, "duration_s": 60.0,
    }  # fmt: skip


def test_plain_console_says_one_line_per_event_and_estimates_what_is_left() -> None:
    out = io.StringIO()
    console = UpConsole(4, stream=out)
    assert not console.live  # a StringIO is no terminal
    console.start()
    console.phase("RL", "running 4 iterations")
    console.iteration(_row(1, 70.0, 0.25), "iteration 1/4")
    console.iteration(_row(2, 130.0, 0.5), "iteration 2/4")
    console.stop()
    assert out.getvalue().splitlines() == [
        "[scalecua up] running 4 iterations",
        "[scalecua up] iteration 1/4",
        "[scalecua up] iteration 2/4",
    ]
    assert console.eta() == 120.0  # two left at the 60 s the first two took each


def test_the_live_panel_renders_the_iterations_table() -> None:
    out = io.StringIO()
    console = UpConsole(3, stream=out, live=True)
    console.start()
    console.counts(played=5, scored=4, version=1)
    console.iteration(_row(1, 60.0, 0.5), "iteration 1/3")
    console.stop()
    text = out.getvalue()
    assert "5 rollouts played, 4 scored" in text and "50%" in text and "2 (1)" in text


async def test_each_service_logs_to_its_own_file_and_warnings_reach_the_console(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    console = UpConsole(1, stream=out)
    warnings = ConsoleWarnings(console.say)
    log = logging.getLogger("runtime.service")
    log.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(warnings)
    try:
        with ServiceLogs() as logs:
            log.info("before the folder is known")

            async def judge() -> None:
                with as_service("judge"):
                    log.info("judged one")
                    await asyncio.to_thread(log.warning, "a bad record")  # threads inherit it

            await asyncio.create_task(judge())
            other = logging.getLogger("some.library")  # not scalecua's: its file only
            other.setLevel(logging.WARNING)
            other.warning("not ours: file only")
            logs.open(tmp_path)
            log.info("after")
    finally:
        root.removeHandler(warnings)
    assert "judged one" in (tmp_path / "judge.log").read_text()
    assert "a bad record" in (tmp_path / "judge.log").read_text()
    main = (tmp_path / "up.log").read_text()
    assert "before the folder is known" in main and "after" in main and "not ours" in main
    assert out.getvalue().splitlines() == ["[scalecua up] warning: judge: a bad record"]


def test_a_service_child_process_writes_next_to_the_service_log(tmp_path: Path) -> None:
    assert child_log_path("rank1") is None  # no ServiceLogs: the child keeps its stderr
    with ServiceLogs() as logs:
        assert child_log_path("rank1") is None  # no folder yet
        logs.open(tmp_path / "logs")
        with as_service("trainer"):
            path = child_log_path("rank1")
    assert path == tmp_path / "logs" / "trainer-rank1.log"
    assert path.parent.is_dir()
