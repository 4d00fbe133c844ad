"""VeriGen on the log: `scalecua verigen run` writes accepted tasks to `tasks` that
`scalecua task run` plays and scores; workers are one consumer group over
`synthesis-requests`, sharing desktops through the probe, in-process or over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from producers.verigen.llm import LLMClient, LLMSettings
from producers.verigen.loop import Synthesizer
from producers.verigen.probe import Probe, ProbeClient, ProbeError, ProbeServer
from producers.verigen.replay import ReplayServer
from producers.verigen.service import (
    SynthesisWorker,
    WorkerConfig,
    follow_run,
    make_requests,
    publish_requests,
)
from runtime.bus import EventConsumer
from runtime.config import BusSettings
from runtime.service import ServiceRunner
from tests.producers.verigen.scenarios import note_candidate, pipeline_records
from topics.events import TaskEvent

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktops and the judge sandbox need root"),
]
SCALECUA = [sys.executable, "-m", "cli"]


@pytest.fixture
def replay_url(tmp_path: Path) -> Iterator[str]:
    """The replay server as its own process (as a remote API would be)."""
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"responses": pipeline_records()}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "producers.verigen.replay", str(records), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield json.loads(proc.stdout.readline())["base_url"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _read_tasks(settings: BusSettings) -> list[TaskEvent]:
    consumer = EventConsumer(settings, ["tasks"], group_id=None)
    await consumer.start()
    try:
        tps = await consumer.partitions_of("tasks")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        out = []
        for _ in range(10):
            out += [r.event for r in await consumer.getmany(timeout_ms=300)]
        return out
    finally:
        await consumer.stop()


def test_run_publishes_accepted_tasks_that_task_run_plays_and_scores(
    cli_env: dict[str, str], bus_settings: BusSettings, replay_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "accepted"
    run = subprocess.run(
        [*SCALECUA, "verigen", "run", "--app", "terminal", "--n", "3",
         "--hint", "sound", "--hint", "unsolved", "--hint", "garbage",
         "--llm-url", replay_url, "--model", "replay", "--price-input", "3",
         "--price-output", "15", "--workers", "3", "--desktops", "2", "--out", str(out),
         "--timeout", "400"],
        env=cli_env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["candidates"], summary["accepted"], summary["failed"]) == (3, 2, 1)
    assert summary["usd_per_accepted"] > 0 and summary["executable_rate"] == 1.0
    assert "[3/3]" in run.stderr
    tasks = [e for e in asyncio.run(_read_tasks(bus_settings)) if isinstance(e, TaskEvent)]
    assert sorted(e.task_id for e in tasks) == summary["task_ids"]
    assert all(e.source == "verigen" and e.task["validation"]["execution_pass"] for e in tasks)
    for event in tasks:  # the topic's task, played from a file as any task is
        path = tmp_path / f"{event.task_id}.json"
        path.write_text(json.dumps(event.task))
        actions = out / f"{event.task_id}.solution.json"
        assert json.loads(actions.read_text()) == event.task["solution"]
        # The solution types into a terminal it opened a fixed wait earlier, with no look at
        # the screen: on a loaded machine xterm can map after the keys were sent (1 replay in
        # ~5 full suites scored 0). A replay is a fresh episode on a fresh desktop, so a
        # second one tells a slow terminal from a task that does not play.
        for _ in range(2):
            played = subprocess.run(
                [*SCALECUA, "task", "run", str(path), "--actions", str(actions)],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert played.returncode == 0, played.stderr[-2000:]
            if json.loads(played.stdout)["score"] == 1.0:
                break
        assert json.loads(played.stdout)["score"] == 1.0, played.stdout[-2000:]
    untouched = subprocess.run([*SCALECUA, "task", "run", str(path)], capture_output=True,
                               text=True, timeout=300)  # fmt: skip
    assert json.loads(untouched.stdout)["score"] == 0.0


async def test_workers_are_one_group_sharing_desktops_in_process_and_over_http(
    bus_settings: BusSettings, tmp_path: Path
) -> None:
    requests = make_requests("terminal", 4, hints=["sound", "unsolved"], run_id="group-run")
    async with (
        ReplayServer(pipeline_records()) as replay,
        LLMClient(LLMSettings(replay.base_url, "replay")) as llm,
        Probe.with_pool(2, root=tmp_path) as probe,
        ProbeServer(probe) as server,
        ProbeClient(server.url, server.token) as remote,
    ):
        workers = [
            SynthesisWorker(WorkerConfig(concurrency=2), Synthesizer(llm, probe), "local"),
            SynthesisWorker(WorkerConfig(concurrency=2), Synthesizer(llm, remote), "remote"),
        ]
        runners = [ServiceRunner(w, bus_settings) for w in workers]
        serving = [asyncio.create_task(r.run(install_signal_handlers=False)) for r in runners]
        await asyncio.gather(*(r.ready.wait() for r in runners))
        await publish_requests(bus_settings, requests)
        events = await follow_run(bus_settings, "group-run", {r.request_id for r in requests},
                                  timeout_s=400)  # fmt: skip
        for runner in runners:
            runner.stop()
        await asyncio.gather(*serving)
        stats = probe.stats()
    finals = [e for e in events if e.final]
    assert sorted(e.request_id for e in finals) == sorted(r.request_id for r in requests)
    assert all(e.stage == "accepted" for e in finals), [e.reasons for e in finals]
    assert sum(sum(w.outcomes.values()) for w in workers) == 4
    assert all(runner.metrics.rebalances >= 1 for runner in runners)
    assert remote.calls > 0 and remote.transport_ms / remote.calls < 200
    # four workers' observations, validations and checks took turns on two desktops
    assert stats["desktops"] == 2 and stats["sessions_opened"] >= 12
    assert stats["sessions_open"] == 0


async def test_probe_over_http_speaks_the_session_api_and_refuses_strangers(
    tmp_path: Path,
) -> None:
    async with (
        Probe.with_pool(1, root=tmp_path) as probe,
        ProbeServer(probe) as server,
        ProbeClient(server.url, server.token) as client,
        ProbeClient(server.url, "wrong") as stranger,
    ):
        with pytest.raises(ProbeError, match="401"):
            await stranger.open({"config": []})
        info = await client.open(note_candidate(), purpose="test")
        assert info.ok and info.lease_wait_ms >= 0
        seen = await client.observe(info.session_id, screenshot=True)
        assert seen["size"] == [1280, 800] and seen["screenshot"]
        step = await client.act(info.session_id, {"action": "write_file",
                                                  "text": "/home/user/notes.txt",
                                                  "content": "buy milk\n"})  # fmt: skip
        assert step["ok"]
        scored = await client.evaluate(info.session_id, [])
        assert scored["score"] == 1.0 and scored["task_error"] is None
        await client.close(info.session_id)
        with pytest.raises(ProbeError, match="no session"):
            await client.observe(info.session_id)
        failed = await client.open({"config": [{"type": "execute", "parameters": {
            "command": "exit 3", "shell": True}}]})  # fmt: skip
        assert failed.session_id and failed.failed_commands and not failed.ok
        await client.close(failed.session_id)
        assert (await client.stats())["sessions_open"] == 0


async def test_an_idle_session_is_reclaimed(tmp_path: Path) -> None:
    async with Probe.with_pool(1, root=tmp_path, idle_timeout_s=1.0) as probe:
        info = await probe.open({"config": []})
        await asyncio.sleep(4.0)
        assert probe.stats()["sessions_expired"] == 1
        with pytest.raises(ProbeError):
            await probe.observe(info.session_id)
        again = await probe.open({"config": []})  # the desktop is free again
        await probe.close(again.session_id)


async def test_a_free_desktop_goes_to_the_candidate_furthest_along(tmp_path: Path) -> None:
    async with Probe.with_pool(1, root=tmp_path) as probe:
        held = await probe.open({"config": []}, purpose="observe")
        order: list[str] = []

        async def wait_for(purpose: str) -> None:
            info = await probe.open({"config": []}, purpose=purpose)
            order.append(purpose)
            await probe.close(info.session_id)

        waiting = [asyncio.create_task(wait_for(p)) for p in ("observe", "validate", "check")]
        await asyncio.sleep(0.3)
        assert probe.stats()["waiting"] == 3
        await probe.close(held.session_id)
        await asyncio.gather(*waiting)
        assert order == ["check", "validate", "observe"]


async def test_a_worker_that_gives_up_frees_its_desktop(tmp_path: Path) -> None:
    async with Probe.with_pool(1, root=tmp_path) as probe:
        slow = {"config": [{"type": "sleep", "parameters": {"seconds": 30}}]}
        in_setup = asyncio.create_task(probe.open(slow))
        queued = asyncio.create_task(probe.open({"config": []}))
        await asyncio.sleep(1.0)
        in_setup.cancel()  # mid-setup: the session is closed, the desktop goes back
        queued.cancel()  # still queued: its place is given up
        await asyncio.gather(in_setup, queued, return_exceptions=True)
        info = await asyncio.wait_for(probe.open({"config": []}), timeout=10)
        assert info.ok and probe.stats()["sessions_open"] == 1
        await probe.close(info.session_id)
