"""`scalecua trace`: a trajectory's timeline, the run's stage gaps, from the live log or the
archive (the command runs in this process: no interpreter start per call)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main
from runtime.broker import EmbeddedBroker
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.trace.reading import read_archived_log
from runtime.trace.summary import stage_summary
from runtime.trace.timeline import GAPS, LogIndex, build_timelines
from tests.runtime.trace.otlp_receiver import otlp_receiver
from tests.runtime.trace.story import ALPHA, RETRIED, RUN, TRAJECTORY, story
from tests.runtime.trace.test_reading import write_archive
from topics.events import RunStarted


def _trace(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def archive(tmp_path: Path) -> str:
    """The story archived as run RUN."""
    root = str(tmp_path / "archive")
    write_archive(root, RUN, [("runs", RunStarted(run_id=RUN)), *story()])
    return root


def test_a_trajectory_s_timeline_from_the_archive(
    archive: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _trace(capsys, "--archive", archive, TRAJECTORY)
    assert code == 0
    stages = [line[37:47].strip() for line in out.splitlines() if line[:2].isdigit()]
    assert stages == ["request", "turn 0", "turn 1", "complete", "segments", "reward",
                      "step start", "trained", "announced"]  # fmt: skip
    assert f"(run {RUN})" in out and re.search(r"complete → reward +0.500 s", out)
    code, out, _ = _trace(capsys, "--archive", archive, "--run", RUN, TRAJECTORY, "--json")
    timeline = json.loads(out)
    assert timeline["training"]["version"] == 5 and timeline["gaps"]["complete_to_reward"] == 500
    assert [s["stage"] for s in timeline["stages"]][-2:] == ["trained", "announced"]
    # a request id, and a group's prefix
    retried = json.loads(_trace(capsys, "--archive", archive, f"{ALPHA}/1", "--json")[1])
    assert retried["trajectory_id"] == RETRIED
    code, out, _ = _trace(capsys, "--archive", archive, ALPHA)
    assert code == 0 and TRAJECTORY in out and RETRIED in out and "trajectory " in out


def test_the_listing_the_summary_and_what_is_refused(
    archive: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _trace(capsys, "--archive", archive, "--last", "2")
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = _trace(capsys, "--archive", archive, "--summary")
    assert code == 0 and "played by v4" in out and "every version" in out
    for label in ("request → first turn", "turn", "complete → reward", "complete → segments",
                  "segments → trained", "trained → announced"):  # fmt: skip
        assert f"  {label} " in out, label
    summary = json.loads(_trace(capsys, "--archive", archive, "--summary", "--json")[1])
    assert summary["trajectories"] == 5 and {g["version"] for g in summary["gaps"]} == {"v4", "all"}
    code, _, err = _trace(capsys, "--archive", archive, "nope/0@x")
    assert code == 1 and "no trajectory 'nope/0@x'" in err
    code, _, err = _trace(capsys, "--archive", archive, "--run", "r0", TRAJECTORY)
    assert code == 1 and "no run 'r0'" in err
    code, _, err = _trace(capsys, "--archive", archive, "--summary", TRAJECTORY)
    assert code == 1 and "no trajectory with it" in err


def test_the_live_log_gives_the_archive_s_text(
    broker: EmbeddedBroker, archive: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def write() -> None:
        async with EventProducer(BusSettings(bootstrap=broker.bootstrap)) as producer:
            await producer.wait_acks([await producer.send(n, e) for n, e in story()])

    asyncio.run(write())
    code, live, _ = _trace(capsys, "--bootstrap", broker.bootstrap, TRAJECTORY)
    assert code == 0
    _, archived, _ = _trace(capsys, "--archive", archive, TRAJECTORY)
    assert live.replace(f"(run {broker.run_id})", "") == archived.replace(f"(run {RUN})", "")
    code, _, err = _trace(capsys, "--bootstrap", broker.bootstrap, "--run", "other", TRAJECTORY)
    assert code == 1 and "the live log is run" in err


def test_an_archived_run_to_an_otlp_receiver(
    archive: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with otlp_receiver() as (url, received):
        code, _, err = _trace(capsys, "--archive", archive, "--otlp", url)
        assert code == 0 and "sent 5 traces" in err
        code, _, err = _trace(capsys, "--archive", archive, "--otlp", url, TRAJECTORY)
        assert code == 0 and "sent 1 traces (9 spans)" in err
    assert len(received.traces()) == 5 and received.requests == 2
    code, _, err = _trace(capsys, "--archive", archive, "--otlp", url, "--follow")
    assert code == 1 and "--follow exports a live run" in err


def check_a_real_run(archive: str, run: str, env: dict[str, str]) -> None:
    """`scalecua trace` on a trained trajectory of a real run (tests/test_up.py's archive):
    every stage with its times, and every stage gap in the run's summary."""
    timelines = build_timelines(LogIndex(read_archived_log(archive, run)))
    trained = [t for t in timelines if t.training is not None]
    assert trained, [t.trajectory_id for t in timelines]
    t = trained[-1]
    assert t.request and t.turns and t.completion and t.rewards and t.segments, t
    assert all(v is not None and v > -1 for v in t.gaps.values()), t.gaps
    assert t.training.advantage is not None and any(
        m.trajectory_id == t.trajectory_id for m in t.group
    )
    argv = [
        sys.executable,
        "-m",
        "cli",
        "trace",
        "--archive",
        archive,
        "--run",
        run,
        t.trajectory_id,
    ]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    for stage in ("request", "turn 0", "complete", "reward", "segments", "step start", "trained",
                  "announced"):  # fmt: skip
        assert re.search(rf"^\d\d:\d\d:\d\d\.\d{{3}} .* {stage} ", res.stdout, re.M), (
            stage,
            res.stdout,
        )
    rows = stage_summary(timelines)
    assert {r.gap for r in rows if r.version == "all"} == set(GAPS), rows
