"""The LLM client: any OpenAI-compatible chat endpoint (vLLM serve, a hosted API).

    client = LLMClient(LLMSettings("http://127.0.0.1:8000/v1", "policy"))
    reply = await client.chat([{"role": "user", "content": "hi"}], max_tokens=64)
    reply.text, reply.prompt_tokens, reply.cost_usd

Calls are async with at most `max_concurrency` in flight; each is bounded by a timeout and
retried with exponential backoff (and jitter, and the server's `Retry-After`) when the
endpoint is unreachable, times out, throttles (429) or fails (5xx). A request the endpoint
rejects (another 4xx: a prompt too long, a bad key) is not retried. Every reply carries its
token counts and cost (prices per million input and output tokens: 0 for a local server),
and the client sums them per call kind.

Errors: `LLMUnavailable` (an InfrastructureError: the endpoint kept failing) and
`LLMRejected` (the endpoint refused this request).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from runtime.errors import InfrastructureError, ScaleCUAError

__all__ = ["ChatReply", "LLMClient", "LLMRejected", "LLMSettings", "LLMUnavailable", "Usage"]

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class LLMUnavailable(InfrastructureError):
    """The endpoint could not be reached or kept failing through every retry."""


class LLMRejected(ScaleCUAError):
    """The endpoint refused the request (a 4xx other than throttling)."""


@dataclass(frozen=True)
class LLMSettings:
    """Where the model is served and how calls to it are bounded and priced."""

    base_url: str  # the OpenAI-style base, ending in /v1: "http://127.0.0.1:8000/v1"
    model: str  # the served model name
    api_key: str = ""  # sent as a bearer token; empty sends none
    max_concurrency: int = 16  # calls in flight at once, across every agent of the process
    timeout_s: float = 120.0  # one call, from send to the last byte of the reply
    connect_timeout_s: float = 10.0
    retries: int = 4  # after the first attempt
    backoff_s: float = 1.0  # first retry delay; doubles per retry, with jitter
    max_backoff_s: float = 30.0
    price_input_per_m: float = 0.0  # USD per million prompt tokens (0: a local server)
    price_output_per_m: float = 0.0  # USD per million completion tokens
    temperature: float = 0.7
    max_tokens: int = 2048  # per reply, unless a call asks for another bound
    extra_body: dict[str, Any] = field(default_factory=dict)  # sent with every request

    @classmethod
    def from_env(cls, base_url: str, model: str, **kwargs: Any) -> LLMSettings:
        """Settings with the key from $SCALECUA_LLM_API_KEY (else $OPENAI_API_KEY)."""
        key = os.environ.get("SCALECUA_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY", "")
        return cls(base_url=base_url, model=model, api_key=kwargs.pop("api_key", None) or key,
                   **kwargs)  # fmt: skip


@dataclass(frozen=True)
class ChatReply:
    """One completed chat call: the text and what it cost."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float  # from the first attempt to the reply, retries and waits included
    attempts: int
    usage_reported: bool  # False: the server sent no usage (tokens count as 0)


@dataclass
class Usage:
    """Calls, tokens, cost and LLM time, summed."""

    calls: int = 0
    failures: int = 0  # calls that ended in an error
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    llm_seconds: float = 0.0

    def add(self, reply: ChatReply) -> None:
        """Count one reply."""
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost_usd += reply.cost_usd
        self.llm_seconds += reply.seconds

    def merge(self, other: Usage) -> None:
        """Add another sum to this one."""
        for name in ("calls", "failures", "prompt_tokens", "completion_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cost_usd += other.cost_usd
        self.llm_seconds += other.llm_seconds

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready view (cost rounded to a millionth of a dollar)."""
        out = asdict(self)
        out["cost_usd"] = round(self.cost_usd, 6)
        out["llm_seconds"] = round(self.llm_seconds, 3)
        return out


class LLMClient:
    """Async client of one OpenAI-compatible chat endpoint; see the module doc."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            limits=httpx.Limits(max_connections=max(1, settings.max_concurrency)),
        )
        self._slots = asyncio.Semaphore(max(1, settings.max_concurrency))
        self.usage: dict[str, Usage] = {}  # per call kind ("proposer", "judger", ...)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def total(self) -> Usage:
        """Every call kind summed."""
        out = Usage()
        for usage in self.usage.values():
            out.merge(usage)
        return out

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        kind: str = "chat",
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ChatReply:
        """Send one chat completion and return the reply; see the module doc for errors."""
        body = {
            **self.settings.extra_body,
            "model": self.settings.model,
            "messages": messages,
            "max_tokens": max_tokens or self.settings.max_tokens,
            "temperature": self.settings.temperature if temperature is None else temperature,
        }
        usage = self.usage.setdefault(kind, Usage())
        started = time.monotonic()
        try:
            async with self._slots:
                data, attempts = await self._post(body)
        except (LLMUnavailable, LLMRejected):
            usage.failures += 1
            raise
        reply = self._reply(data, attempts, time.monotonic() - started)
        usage.add(reply)
        return reply

    async def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        delay = self.settings.backoff_s
        last = ""
        for attempt in range(self.settings.retries + 1):
            wait = delay * (0.5 + random.random())  # jitter: many workers do not retry in step
            try:
                response = await self._client.post("/chat/completions", json=body)
            except httpx.TransportError as exc:  # connect, read timeout, broken connection
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        return response.json(), attempt + 1
                    except ValueError:
                        last = f"the reply is not JSON: {response.text[:200]!r}"
                elif response.status_code in _RETRY_STATUS:
                    last = f"HTTP {response.status_code}: {response.text[:300]}"
                    wait = max(wait, _retry_after(response))
                else:
                    raise LLMRejected(
                        f"{self.settings.base_url} refused the request "
                        f"(HTTP {response.status_code}): {response.text[:500]}"
                    )
            if attempt < self.settings.retries:
                await asyncio.sleep(min(wait, self.settings.max_backoff_s))
                delay *= 2
        raise LLMUnavailable(
            f"{self.settings.base_url} failed {self.settings.retries + 1} times; last: {last}"
        )

    def _reply(self, data: dict[str, Any], attempts: int, seconds: float) -> ChatReply:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMUnavailable(f"the reply has no choices[0].message: {str(data)[:300]}") from exc
        usage = data.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        cost = (
            prompt * self.settings.price_input_per_m + completion * self.settings.price_output_per_m
        ) / 1e6
        return ChatReply(
            text=str(text),
            finish_reason=str(choice.get("finish_reason") or ""),
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=cost,
            seconds=seconds,
            attempts=attempts,
            usage_reported=bool(usage),
        )


def _retry_after(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (0 when absent or not a number)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0
