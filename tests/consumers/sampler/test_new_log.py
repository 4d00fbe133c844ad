"""The embedded broker killed (kill -9) under a running `scalecua sample` and started again on
the same port: the sampler notices the new log, keeps its task pool (the new log has no
`tasks` yet; live tables keep their rows) and requests the next batch into it at once (issue
30, finding 7: it came back with `"tasks": 0` and never requested again)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from producers.task_import import publish_tasks
from runtime.broker import free_port
from runtime.config import BusSettings
from runtime.runs import current_run
from tests.broker_process import start_broker
from tests.bus_reading import read_until
from tests.consumers.sampler.harness import SamplerProcess
from topics.events import TaskEvent

# One batch ahead of the trainer at most, and the trainer never steps here: the next batch
# can only come once the batch that went with the old log no longer counts as ahead.
ARGS = ("--batch", "2", "--n", "2", "--in-flight", "9", "--ahead", "1")


async def test_the_sampler_goes_on_with_its_pool_in_a_restarted_broker_s_new_log(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {**os.environ, "SCALECUA_HOME": str(tmp_path), "SCALECUA_BOOTSTRAP": f"127.0.0.1:{port}",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("SCALECUA_CONFIG", None)
    settings = BusSettings(bootstrap=env["SCALECUA_BOOTSTRAP"])
    broker = start_broker(port, env, tmp_path / "broker.log")
    sampler = None
    try:
        tasks = [f"t{i}" for i in range(4)]
        await publish_tasks(settings, [TaskEvent(task_id=t, task={"id": t}) for t in tasks])
        first_run = (await current_run(settings)).run_id
        sampler = SamplerProcess(env, tmp_path / "sampler.log", *ARGS)
        first = await read_until(settings, "rollout-requests", lambda rs: len(rs) >= 4, 60)
        assert {r.event.group_id.split("-")[0] for r in first} == {"b00000"}

        os.killpg(broker.pid, signal.SIGKILL)  # the log, its tasks and batch 0 are gone
        broker.wait(10)
        await asyncio.sleep(2.0)
        broker = start_broker(port, env, tmp_path / "broker.log")
        assert (await current_run(settings)).run_id != first_run

        second = await read_until(settings, "rollout-requests", lambda rs: len(rs) >= 4, 60)
        assert {r.event.group_id.split("-")[0] for r in second} == {"b00001"}
        assert {r.event.task_id for r in second} <= set(tasks)
        await sampler.wait_for("sampler: a new log (run ")
        # The election re-forms on the new broker too: the term goes on, nothing is rebuilt.
        await sampler.wait_for("the term goes on in it with the state it kept")
        text = sampler.text()
        assert "the log changed under this service" in text, text[-3000:]
        assert "4 tasks kept" in text, text[-3000:]
        assert text.count("active (term") == 1, text[-3000:]  # the same term went on
        assert sampler.terminate() == 0, sampler.text()[-3000:]
    finally:
        if sampler is not None:
            sampler.close()
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGTERM)
            broker.wait(10)
