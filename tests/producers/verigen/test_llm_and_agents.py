"""The LLM client against a real HTTP server replaying recorded replies (the paid-API double):
token and cost accounting, retries with backoff, refusals, timeouts, bounded concurrency;
and the agents' strict parsers: a malformed reply is asked again, then recorded as a failure."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from producers.verigen.agents import (
    Fixer,
    Judger,
    ParseError,
    Proposer,
    extract_json,
    parse_turn,
    parse_verdict,
)
from producers.verigen.candidate import Candidate
from producers.verigen.llm import LLMClient, LLMRejected, LLMSettings, LLMUnavailable
from producers.verigen.replay import ReplayServer
from tests.producers.verigen.scenarios import note_candidate, reply, verdict


def _settings(server: ReplayServer, **kw: object) -> LLMSettings:
    return LLMSettings(server.base_url, "replay", backoff_s=0.01, **kw)  # type: ignore[arg-type]


async def test_usage_and_cost_are_counted_per_call_and_per_kind() -> None:
    records = [{"contains": ["hello"], "reply": "hi",
                "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 500_000}}]  # fmt: skip
    async with ReplayServer(records) as server:
        settings = _settings(server, price_input_per_m=2.0, price_output_per_m=8.0)
        async with LLMClient(settings) as llm:
            one = await llm.chat([{"role": "user", "content": "hello"}], kind="proposer")
            await llm.chat([{"role": "user", "content": "hello again"}], kind="judger")
    assert one.text == "hi" and one.usage_reported and one.attempts == 1
    assert (one.prompt_tokens, one.completion_tokens) == (1_000_000, 500_000)
    assert one.cost_usd == pytest.approx(2.0 + 4.0)
    assert llm.usage["proposer"].calls == 1 and llm.usage["judger"].calls == 1
    assert llm.total().cost_usd == pytest.approx(12.0)
    assert server.requests[0]["model"] == "replay" and server.requests[0]["max_tokens"] == 2048


async def test_a_local_server_costs_nothing_and_tokens_are_estimated_without_usage() -> None:
    async with ReplayServer([{"reply": "x" * 400}]) as server, LLMClient(_settings(server)) as llm:
        out = await llm.chat([{"role": "user", "content": "y" * 800}])
    assert out.cost_usd == 0.0 and out.completion_tokens == 100 and out.prompt_tokens == 200


async def test_throttling_and_server_errors_are_retried_with_backoff() -> None:
    records = [
        {"status": 429, "times": 1}, {"status": 503, "times": 1}, {"reply": "at last"},
    ]  # fmt: skip
    async with ReplayServer(records) as server, LLMClient(_settings(server)) as llm:
        out = await llm.chat([{"role": "user", "content": "q"}])
    assert out.text == "at last" and out.attempts == 3 and len(server.requests) == 3


async def test_a_refused_request_is_not_retried() -> None:
    async with ReplayServer([{"status": 400, "reply": "prompt too long"}]) as server:
        async with LLMClient(_settings(server)) as llm:
            with pytest.raises(LLMRejected, match="prompt too long"):
                await llm.chat([{"role": "user", "content": "q"}])
    assert len(server.requests) == 1 and llm.usage["chat"].failures == 1


async def test_an_endpoint_that_keeps_failing_or_is_down_is_unavailable() -> None:
    async with ReplayServer([{"status": 500}]) as server:
        async with LLMClient(_settings(server, retries=2)) as llm:
            with pytest.raises(LLMUnavailable, match="failed 3 times"):
                await llm.chat([{"role": "user", "content": "q"}])
    assert len(server.requests) == 3
    down = LLMSettings("http://127.0.0.1:9/v1", "m", retries=1, backoff_s=0.01)
    async with LLMClient(down) as llm:
        with pytest.raises(LLMUnavailable, match="ConnectError"):
            await llm.chat([{"role": "user", "content": "q"}])


async def test_a_slow_reply_times_out_and_is_retried() -> None:
    records = [{"delay_s": 2.0, "times": 1, "reply": "late"}, {"reply": "on time"}]
    async with ReplayServer(records) as server:
        async with LLMClient(_settings(server, timeout_s=0.3)) as llm:
            out = await llm.chat([{"role": "user", "content": "q"}])
    assert out.text == "on time" and out.attempts == 2


async def test_concurrency_is_bounded() -> None:
    async with ReplayServer([{"reply": "ok"}], latency_s=0.2) as server:
        async with LLMClient(_settings(server, max_concurrency=2)) as llm:
            started = time.monotonic()
            await asyncio.gather(*(llm.chat([{"role": "user", "content": str(i)}])
                                   for i in range(6)))  # fmt: skip
            elapsed = time.monotonic() - started
    assert 0.55 < elapsed < 1.5  # three waves of two, not one wave of six


def test_json_is_found_fenced_or_bare_and_its_absence_is_a_parse_error() -> None:
    assert extract_json('Sure!\n```json\n{"a": 1}\n```\nDone.') == {"a": 1}
    assert extract_json('The answer is {"a": {"b": 2}} as asked.') == {"a": {"b": 2}}
    with pytest.raises(ParseError):
        extract_json("no braces here")


def test_parsers_are_strict() -> None:
    assert parse_verdict(verdict("reject", 2)).verdict == "reject"
    for bad in ('{"verdict": "maybe", "score": 5, "reasoning": "x"}',
                '{"verdict": "accept", "score": 11, "reasoning": "x"}',
                '{"verdict": "accept", "score": 8}',
                '{"verdict": "accept", "score": 8, "reasoning": "x", "mood": "happy"}'):  # fmt: skip
        with pytest.raises(ParseError):
            parse_verdict(bad)
    thought, action = parse_turn('{"thought": "go", "action": {"action": "key", "text": "ctrl+s"}}')
    assert (thought, action["text"]) == ("go", "ctrl+s")
    with pytest.raises(ParseError, match="invalid action"):
        parse_turn('{"action": {"action": "left_click", "coordinate": [5000, 1]}}')


async def test_a_malformed_reply_is_asked_again_then_used() -> None:
    good = reply(note_candidate())
    records = [
        {"agent": "proposer", "turn": 0, "reply": "Let me think about it..."},
        {"agent": "proposer", "turn": 1, "last_contains": ["could not be used"], "reply": good},
    ]
    async with ReplayServer(records) as server, LLMClient(_settings(server)) as llm:
        result = await Proposer(llm).propose("terminal", "doc", "screen", request="r/0")
    assert result.ok and result.attempts == 2 and isinstance(result.value, Candidate)
    assert result.usage.calls == 2
    retry = server.requests[1]["messages"]
    assert retry[-2]["role"] == "assistant" and "no JSON object" in retry[-1]["content"]


async def test_malformed_replies_end_as_a_recorded_failure_never_a_crash() -> None:
    broken = json.dumps({**note_candidate(), "difficulty": "impossible"})
    async with ReplayServer([{"agent": "proposer", "reply": broken}]) as server:
        async with LLMClient(_settings(server)) as llm:
            result = await Proposer(llm, parse_retries=2).propose("terminal", "doc", "s",
                                                                  request="r")  # fmt: skip
    assert not result.ok and result.attempts == 3
    assert result.failure.startswith("malformed:") and "difficulty" in result.failure
    assert "impossible" in result.raw


async def test_an_unreachable_model_is_a_failure_of_kind_llm() -> None:
    down = LLMSettings("http://127.0.0.1:9/v1", "m", retries=0)
    async with LLMClient(down) as llm:
        result = await Judger(llm).review(Candidate.from_dict(note_candidate()))
    assert not result.ok and result.failure.startswith("llm:")


async def test_judger_and_fixer_see_the_candidate_and_the_findings() -> None:
    fixed = note_candidate("other.txt")
    records = [{"agent": "judger", "reply": verdict()},
               {"agent": "fixer", "contains": ["the judge crashed"], "reply": reply(fixed)}]  # fmt: skip
    candidate = Candidate.from_dict(note_candidate())
    async with ReplayServer(records) as server, LLMClient(_settings(server)) as llm:
        judged = await Judger(llm).review(candidate)
        repaired = await Fixer(llm).fix(candidate, ["the judge crashed"])
    assert judged.ok and judged.value.score == 9
    assert repaired.ok and repaired.value.task.id == "write-other.txt"
    assert "notes.txt" in server.requests[0]["messages"][1]["content"]
