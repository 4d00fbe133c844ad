"""A replay server: an OpenAI-protocol chat endpoint answering from recorded responses.

The test double for a paid remote model: a real HTTP server on 127.0.0.1 speaking
`POST /v1/chat/completions` (with `usage` token counts) and `GET /v1/models`, whose replies
come from a recorded JSON file, so the whole pipeline runs deterministically.

    {"responses": [
       {"agent": "proposer", "contains": ["a shopping list"], "reply": "{...}",
        "usage": {"prompt_tokens": 900, "completion_tokens": 350}},
       {"agent": "checker", "turn": 2, "reply": "{\"action\": {\"action\": \"done\"}}"},
       {"agent": "judger", "status": 503, "times": 1},
       ...]}

A request takes the first entry whose conditions all hold: `agent` (the system prompt
starts with "You are the AGENT of VeriGen"), `contains` (every string occurs in the
conversation), `last_contains` (in the last message) and `turn` (the number of assistant
messages already in the conversation: 0 for a first call, 1 after one reply, ...). An
entry with `times` answers that many requests, then is skipped. `status` other than 200
answers with that HTTP error; `delay_s` (or the server's `latency_s`) waits before the
reply. Without `usage`, tokens are counted as characters / 4. A request no entry matches
gets HTTP 500 naming it, so a missing recording fails loudly.

    python -m producers.verigen.replay RECORDS.json --port 8000    # serve until Ctrl-C
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = ["ReplayServer", "load_records", "MODEL", "main"]

MODEL = "replay"


def load_records(source: str | Path | dict[str, Any] | list[dict[str, Any]]) -> list[dict]:
    """The entries of a recording: a file, a {"responses": [...]} object or a list."""
    if isinstance(source, str | Path):
        source = json.loads(Path(source).read_text(encoding="utf-8"))
    entries = source.get("responses", []) if isinstance(source, dict) else source
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("a recording is a list of response objects (or {'responses': [...]})")
    return [dict(e) for e in entries]


class ReplayServer:
    """Serves recorded chat replies over HTTP on 127.0.0.1; see the module doc."""

    def __init__(
        self,
        records: str | Path | dict[str, Any] | list[dict[str, Any]],
        *,
        latency_s: float = 0.0,
        port: int = 0,
    ) -> None:
        self.entries = load_records(records)
        self.latency_s = latency_s  # added to every reply: stands in for generation time
        self.port = port
        self.requests: list[dict[str, Any]] = []  # every request body received, in order
        self._used = [0] * len(self.entries)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ending in /v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> ReplayServer:
        """Start serving; `port` 0 picks a free one."""
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ReplayServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def match(self, messages: list[dict[str, Any]]) -> int | None:
        """The index of the entry that answers these messages, or None."""
        system = next(
            (str(m.get("content", "")) for m in messages if m.get("role") == "system"), ""
        )
        whole = "\n".join(str(m.get("content", "")) for m in messages)
        last = str(messages[-1].get("content", "")) if messages else ""
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        for i, entry in enumerate(self.entries):
            if "times" in entry and self._used[i] >= int(entry["times"]):
                continue
            agent = entry.get("agent")
            if agent and not system.startswith(f"You are the {agent} of VeriGen"):
                continue
            if "turn" in entry and int(entry["turn"]) != turn:
                continue
            if not all(s in whole for s in entry.get("contains", [])):
                continue
            if not all(s in last for s in entry.get("last_contains", [])):
                continue
            return i
        return None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            messages = list(body["messages"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": {"message": "expected a chat request"}}, status=400)
        self.requests.append(body)
        index = self.match(messages)
        if index is None:
            last = str(messages[-1].get("content", ""))[:300] if messages else ""
            message = f"no recorded response matches this request (last message: {last!r})"
            return web.json_response({"error": {"message": message}}, status=500)
        self._used[index] += 1
        entry = self.entries[index]
        delay = float(entry.get("delay_s", self.latency_s))
        if delay > 0:
            await asyncio.sleep(delay)
        status = int(entry.get("status", 200))
        if status != 200:
            error = {"error": {"message": entry.get("reply", f"recorded HTTP {status}")}}
            return web.json_response(error, status=status)
        reply = str(entry.get("reply", ""))
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        usage = entry.get("usage") or {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(reply) // 4),
        }
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        return web.json_response(
            {
                "id": f"chatcmpl-replay-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", MODEL),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply},
                        "finish_reason": entry.get("finish_reason", "stop"),
                    }
                ],
                "usage": usage,
            }
        )


def main() -> None:
    """Serve a recording until interrupted."""
    parser = argparse.ArgumentParser(description="an OpenAI-protocol server replaying records")
    parser.add_argument("records", type=Path)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each reply")
    args = parser.parse_args()

    async def serve() -> None:
        async with ReplayServer(args.records, latency_s=args.latency, port=args.port) as server:
            print(json.dumps({"base_url": server.base_url}), flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
