"""The synthesis loop end to end against the replay server (deterministic model replies) and
real desktops: every stage is an event, accepted tasks carry their validation record, a
broken judge is repaired, malformed replies fail cleanly, and each ablation switch lets
through what its stage would have caught."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from producers.verigen.llm import LLMClient, LLMSettings
from producers.verigen.loop import LoopSettings, Outcome, Synthesizer
from producers.verigen.probe import Probe
from producers.verigen.replay import ReplayServer
from producers.verigen.summary import summarize
from runtime.envs.tasks.model import Task
from tests.producers.verigen.scenarios import pipeline_records
from topics.events import Event, SynthesisEvent, SynthesisRequest, TaskEvent

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktops and the judge sandbox need root"),
]


@pytest.fixture(scope="module")
async def synthesizer(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Synthesizer]:
    """A synthesizer over the replay server and a probe of two desktops."""
    root = tmp_path_factory.mktemp("verigen-loop")
    async with (
        ReplayServer(pipeline_records()) as server,
        LLMClient(LLMSettings(server.base_url, "replay", price_input_per_m=1.0,
                              price_output_per_m=2.0, backoff_s=0.01)) as llm,
        Probe.with_pool(2, root=root) as probe,
    ):  # fmt: skip
        yield Synthesizer(llm, probe, LoopSettings(checker_max_turns=15), worker_id="test")


async def _synth(syn: Synthesizer, theme: str, **switches: Any) -> tuple[Outcome, list[Event]]:
    emitted: list[tuple[str, Event]] = []
    request = SynthesisRequest(request_id=f"run/{theme}", run_id="run", app="terminal",
                               hint=theme, **switches)  # fmt: skip
    outcome = await syn.synthesize(request, lambda topic, ev: emitted.append((topic, ev)))
    stages = [ev for topic, ev in emitted if topic == "synthesis"]
    tasks = [ev for topic, ev in emitted if topic == "tasks"]
    assert all(isinstance(e, SynthesisEvent) for e in stages)
    assert [e.final for e in stages].count(True) == 1 and stages[-1].final
    assert {e.candidate_id for e in stages} == {outcome.candidate_id}
    return outcome, stages + tasks


def _stages(events: list[Event]) -> list[str]:
    return [e.stage for e in events if isinstance(e, SynthesisEvent)]


async def test_a_sound_candidate_is_accepted_with_its_validation_record(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "sound")
    assert outcome.stage == "accepted", outcome.reasons
    assert _stages(events) == ["propose", "validate", "judge", "check", "accepted"]
    (published,) = [e for e in events if isinstance(e, TaskEvent)]
    task = published.task
    assert published.source == "verigen" and task["source"] == "verigen"
    assert published.task_id == task["id"] and task["id"].startswith("verigen-terminal-")
    v = task["validation"]
    assert v["rule_pass"] and v["execution_pass"] and v["checker_pass"]
    assert (v["llm_verdict"], v["llm_score"], v["repairs"], v["rounds"]) == ("accept", 9.0, 0, 1)
    assert (v["untouched_score"], v["solved_score"]) == (0.0, 1.0)
    assert v["judge_statuses"] == ["ok", "ok"] and v["model"] == "replay"
    assert v["prompt_tokens"] >= 1000 and v["cost_usd"] > 0.001  # priced at $1/$2 per 1M
    Task.from_dict(task)  # an OSWorld task the rest of the system reads
    check = next(e for e in events if isinstance(e, SynthesisEvent) and e.stage == "check")
    assert check.ok and check.detail["score"] == 1.0 and check.detail["actions"][-1] == {
        "action": "done"}  # fmt: skip
    validate = next(e for e in events if getattr(e, "stage", "") == "validate")
    assert validate.detail["executable"] and validate.detail["checks"]["solved"] == "pass"
    final = events[len(_stages(events)) - 1]
    assert final.task_id == task["id"] and final.detail["total_usage"]["calls"] >= 6


async def test_a_crashing_judge_is_repaired_by_the_fixer(synthesizer: Synthesizer) -> None:
    outcome, events = await _synth(synthesizer, "broken")
    assert outcome.stage == "accepted", outcome.reasons
    assert _stages(events) == ["propose", "validate", "fix", "validate", "judge", "check",
                               "accepted"]  # fmt: skip
    first = next(e for e in events if getattr(e, "stage", "") == "validate")
    assert not first.ok and any("`crash`" in r for r in first.reasons)
    assert not first.detail["executable"]
    fix = next(e for e in events if getattr(e, "stage", "") == "fix")
    assert fix.ok and any("`crash`" in f for f in fix.detail["findings"])
    task = next(e for e in events if isinstance(e, TaskEvent)).task
    assert task["validation"]["repairs"] == 1 and task["validation"]["rounds"] == 2


async def test_malformed_proposals_end_as_failed_with_the_reply_kept(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "garbage")
    assert outcome.stage == "failed" and "malformed" in outcome.reasons[0]
    propose = events[0]
    assert propose.stage == "propose" and not propose.ok
    assert propose.detail["attempts"] == 3 and "cannot do that" in propose.detail["raw"]


async def test_a_task_without_a_solution_is_proven_by_the_checker(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "unsolved")
    assert outcome.stage == "accepted", outcome.reasons
    task = next(e for e in events if isinstance(e, TaskEvent)).task
    assert task["validation"]["checker_pass"] and task["validation"]["solved_score"] == 1.0
    assert task["solution"][0] == {"action": "key", "text": "ctrl+alt+t"}  # the checker's


async def test_ablation_without_the_rule_validator_a_solved_task_gets_in(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "trivial")
    assert outcome.stage == "rejected" and any("already scores 1" in r for r in outcome.reasons)
    assert _stages(events).count("validate") == 3 and _stages(events).count("fix") == 2
    outcome, events = await _synth(synthesizer, "trivial", use_validator=False)
    assert outcome.stage == "accepted"  # the checker says done at once and scores 1.0
    task = next(e for e in events if isinstance(e, TaskEvent)).task
    assert task["validation"]["rule_pass"] is None


async def test_ablation_without_the_judger_an_ambiguous_task_gets_in(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "vague", max_rounds=2)
    assert outcome.stage == "rejected" and any("ambiguous" in r for r in outcome.reasons)
    outcome, events = await _synth(synthesizer, "vague", use_judger=False)
    assert outcome.stage == "accepted" and "judge" not in _stages(events)
    task = next(e for e in events if isinstance(e, TaskEvent)).task
    assert task["validation"]["llm_verdict"] is None


async def test_ablation_without_the_fixer_a_repairable_candidate_is_lost(
    synthesizer: Synthesizer,
) -> None:
    outcome, events = await _synth(synthesizer, "broken", use_fixer=False)
    assert outcome.stage == "rejected" and any("`crash`" in r for r in outcome.reasons)
    assert _stages(events) == ["propose", "validate", "rejected"]


async def test_a_run_summary_folds_from_the_events(synthesizer: Synthesizer) -> None:
    events: list[Event] = []
    for theme in ("sound", "broken", "garbage"):
        events += (await _synth(synthesizer, theme))[1]
    summary = summarize([e for e in events if isinstance(e, SynthesisEvent)], wall_seconds=60)
    assert (summary["candidates"], summary["accepted"], summary["failed"]) == (3, 2, 1)
    assert summary["executable_rate"] == round(2 / 3, 4)  # crash, fixed, sound
    assert summary["executable_rate_first"] == 0.5
    assert summary["usd_per_accepted"] > 0 and summary["candidates_per_min"] == 3.0
    assert summary["stages"]["fix"] == {"runs": 1, "passed": 1}


async def test_an_observation_ttl_shares_one_look_at_the_app(synthesizer: Synthesizer) -> None:
    from producers.verigen.knowledge import app_knowledge

    setup = app_knowledge("terminal").observation_setup
    probe = synthesizer.probe
    cached = Synthesizer(synthesizer.llm, probe, LoopSettings(observation_ttl_s=60))
    before = probe.stats()["sessions_opened"]
    looks = await asyncio.gather(*(cached.observation("terminal", setup) for _ in range(3)))
    assert probe.stats()["sessions_opened"] == before + 1
    assert len(set(looks)) == 1 and "Terminal" in looks[0]
    live = await synthesizer.observation("terminal", setup)  # ttl 0: a look of its own
    assert probe.stats()["sessions_opened"] == before + 2 and live
