"""VeriGen throughput: many synthesis workers sharing 4 desktops through the probe.

A replay server (a real OpenAI-protocol HTTP server) answers every agent from a recording
with a fixed latency per call standing in for the model; 4 real desktops sit behind the
shared interaction probe, served over HTTP on 127.0.0.1 as a remote worker would use it.
For each level, W workers synthesise candidates in a closed loop (propose → validate →
judge ∥ check → fix ...); completions are counted over a window that opens once the first
candidate is done (the queue is full by then). The
baseline, measured in the same run: 4 workers that each own one desktop (no sharing).

Per level: candidates/min and accepted/min; the probe's overhead (queueing for a desktop:
lease wait p50/p95; HTTP transport per call: client time minus the server's own); how busy
the desktops were (session time / window); latency from request to acceptance. Over the
whole run: the executable rate (well-formed candidates whose setup and judge ran, every
judge `ok`) and tokens and USD per accepted task at the given prices.

The recording sets the task mix (`kind_of`): 10% of proposals have a judge that crashes on
the untouched desktop (the fixer repairs it), 5% are solved before the agent acts (the
validator rejects them twice), 10% are ambiguous (the judger rejects them, the fixer makes
them precise), the rest are sound. So the executable rate and acceptance here measure the
pipeline on that mix, not a model's quality.

`--ablation N` then runs N candidates (the same themes) under each switch of the paper's
ablation (no rule validator, no judger, no fixer) and audits every accepted task again
with the full rule validator: what a missing stage lets through (unsound, ambiguous) or
loses (yield, cost per good task).

    .venv/bin/python bench/verigen.py --quick            # under a minute: write_file tasks
    .venv/bin/python bench/verigen.py --json bench-verigen.json   # terminal tasks, 1/10/50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from producers.verigen.llm import LLMClient, LLMSettings  # noqa: E402
from producers.verigen.loop import LoopSettings, Synthesizer  # noqa: E402
from producers.verigen.probe import ProbeClient  # noqa: E402
from producers.verigen.summary import summarize  # noqa: E402
from producers.verigen.validator import RuleValidator  # noqa: E402
from topics.events import SynthesisEvent, SynthesisRequest  # noqa: E402

DESKTOPS = 4
THEMES = 600
USAGE = {  # recorded token counts per call, shaped like a hosted model's
    "proposer": {"prompt_tokens": 3000, "completion_tokens": 800},
    "judger": {"prompt_tokens": 1800, "completion_tokens": 150},
    "checker": {"prompt_tokens": 1500, "completion_tokens": 40},
    "fixer": {"prompt_tokens": 3800, "completion_tokens": 800},
}
JUDGE = (
    "def judge(artifacts):\n    path = artifacts.get('result')\n    if not path:\n"
    "        return 0.0\n    with open(path, encoding='utf-8') as f:\n"
    "        return 1.0 if f.read().strip() == artifacts['expected']['text'] else 0.0\n"
)
CRASHING = (
    "def judge(artifacts):\n    with open(artifacts['result'], encoding='utf-8') as f:\n"
    "        return 1.0 if f.read().strip() == artifacts['expected']['text'] else 0.0\n"
)


# -- the recording ----------------------------------------------------------------------
def _solution(name: str, text: str, terminal: bool) -> list[dict[str, Any]]:
    if not terminal:
        return [{"action": "write_file", "text": f"/home/user/{name}", "content": text + "\n"}]
    return [
        {"action": "key", "text": "ctrl+alt+t"},
        {"action": "wait", "duration": 2.0},
        {"action": "type", "text": f"echo '{text}' > ~/{name}\n"},
        {"action": "wait", "duration": 1.0},
    ]


def _candidate(i: int, terminal: bool, judge: str = JUDGE, trivial: bool = False) -> dict:
    name, text = f"bench-{i:04d}.txt", f"item {i}"
    config = []
    if trivial:  # the setup writes the answer: solved before the agent acts
        config = [{"type": "execute", "parameters": {
            "command": f"echo '{text}' > /home/user/{name}", "shell": True}}]  # fmt: skip
    return {
        "id": f"bench-{i}", "instruction": f"Create {name} in the home folder containing "
        f"exactly the line: {text}", "config": config,
        "evaluator": {
            "func": "sandboxed_judge",
            "result": {"type": "vm_file", "path": f"/home/user/{name}", "dest": name},
            "expected": {"type": "rule", "rules": {"text": text}},
            "options": {"source": judge, "function": "judge"},
        },
        "related_apps": ["terminal"], "app": "terminal", "explanation": "reads the file",
        "difficulty": "easy", "estimated_steps": 4, "solution": _solution(name, text, terminal),
    }  # fmt: skip


def _fenced(candidate: dict) -> str:
    return "```json\n" + json.dumps(candidate) + "\n```"


VAGUE = "Write a note in a file in the home folder."  # no name, no text: ambiguous


def kind_of(i: int) -> str:
    """Theme i's kind in the recording: 10% crash, 5% trivial, 10% vague, 75% sound."""
    return {3: "crash", 13: "crash", 7: "trivial", 5: "vague", 15: "vague"}.get(i % 20, "sound")


def recording(terminal: bool) -> list[dict[str, Any]]:
    """Replies for THEMES themes, each of its kind (kind_of).

    crash: the judge opens the file without checking that it was found, so it crashes on
    the untouched desktop (the fixer repairs it); trivial: the setup already writes the
    answer (the fixer returns it unchanged); vague: the instruction names neither file nor
    text (the judger rejects it, the fixer makes it precise).
    """
    entries: list[dict[str, Any]] = []
    judged: list[dict[str, Any]] = []
    accept = json.dumps({"verdict": "accept", "score": 9, "reasoning": "clear", "issues": []})
    reject = json.dumps({"verdict": "reject", "score": 3, "reasoning": "ambiguous",
                         "issues": ["the instruction names neither the file nor its text"]})  # fmt: skip
    for i in range(THEMES):
        name, kind = f"bench-{i:04d}.txt", kind_of(i)
        sound = _candidate(i, terminal)
        first = {
            "crash": _candidate(i, terminal, CRASHING),
            "trivial": _candidate(i, terminal, trivial=True),
            "vague": {**sound, "instruction": VAGUE},
        }.get(kind, sound)
        entries.append({"agent": "proposer", "contains": [f"Theme: bench-{i:04d}."],
                        "reply": _fenced(first), "usage": USAGE["proposer"]})  # fmt: skip
        entries.append({"agent": "fixer", "contains": [name],
                        "reply": _fenced(first if kind == "trivial" else sound),
                        "usage": USAGE["fixer"]})  # fmt: skip
        if kind == "vague":
            judged.append({"agent": "judger", "contains": [name, VAGUE], "reply": reject,
                           "usage": USAGE["judger"]})  # fmt: skip
        steps = _solution(name, f"item {i}", terminal)
        steps = [s for s in steps if s["action"] != "wait"] + [{"action": "done"}]
        for k, action in enumerate(steps):
            entries.append({
                "agent": "checker", "contains": [name], "turn": 0,
                "last_contains": [f"Step {k + 1} of at most"],
                "reply": json.dumps({"thought": "", "action": action}), "usage": USAGE["checker"],
            })  # fmt: skip
    judged.append({"agent": "judger", "reply": accept, "usage": USAGE["judger"]})
    # A checker given the vague instruction cannot know the file: it gives up at once.
    entries.append({"agent": "checker", "contains": [VAGUE], "usage": USAGE["checker"],
                    "reply": json.dumps({"thought": "which file?", "action": {"action": "done"}})})  # fmt: skip
    return entries + judged


# -- processes --------------------------------------------------------------------------
@contextlib.contextmanager
def serving(*argvs: list[str]) -> Iterator[list[dict[str, Any]]]:
    """Start server processes at once, each printing one JSON line when ready; yield the lines."""
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for argv in argvs
    ]
    try:
        lines = [proc.stdout.readline() for proc in procs]  # type: ignore[union-attr]
        if not all(lines):
            raise SystemExit("a server did not start")
        yield [json.loads(line) for line in lines]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def probe_argv(desktops: int) -> list[str]:
    """`scalecua verigen probe` over its own desktops, as its own process."""
    return [sys.executable, "-m", "cli", "verigen", "probe", "--desktops", str(desktops)]


# -- one level --------------------------------------------------------------------------
async def level(
    probes: list[dict[str, Any]],
    llm: LLMClient,
    workers: int,
    *,
    settle: float,
    window: float,
    counter: list[int],
) -> dict[str, Any]:
    """Run `workers` closed-loop workers; measure `window` seconds once the pipeline is full.

    The window opens `settle` seconds after the first candidate completes: by then every
    worker has queued for a desktop (a closed loop fills its queue at once), so what
    follows is the steady state, whatever the time the first wave took.

    Workers are spread over the probes: one probe of 4 desktops (shared), or one probe of
    one desktop per worker (the baseline: each worker owns its desktop).
    """
    settings = LoopSettings(checker_max_turns=8, parse_retries=1)
    events: list[SynthesisEvent] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(ProbeClient(p["url"], p["token"])) for p in probes
        ]
        held_before = [(await c.stats())["held_ms"] for c in clients]
        syns = [Synthesizer(llm, c, settings) for c in clients]
        t0 = time.monotonic()
        first = asyncio.Event()
        done: list[tuple[float, SynthesisEvent]] = []

        def emit(topic: str, event: Any) -> None:
            if topic == "synthesis":
                events.append(event)
                if event.final:
                    done.append((time.monotonic(), event))
                    first.set()

        async def worker(k: int) -> None:
            syn = syns[k % len(syns)]
            while True:
                i = counter[0] = counter[0] + 1
                request = SynthesisRequest(
                    request_id=f"bench/{i}", run_id="bench", app="terminal",
                    hint=f"bench-{i % THEMES:04d}", max_rounds=2,
                )  # fmt: skip
                await syn.synthesize(request, emit)

        tasks = [asyncio.create_task(worker(k)) for k in range(workers)]
        await asyncio.wait_for(first.wait(), timeout=600)
        start = time.monotonic() + settle
        end = start + window
        await asyncio.sleep(end - time.monotonic())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.3)  # let the probes close what the cancelled workers held
        held_after = [(await c.stats())["held_ms"] for c in clients]
        held = (sum(held_after) - sum(held_before)) / 1000
        waits = sorted(w for c in clients for w in c.lease_waits_ms)
        calls = sum(c.calls for c in clients)
        transport = sum(c.transport_ms for c in clients)
    in_window = [e for t, e in done if start <= t <= end]
    measured = [e for e in events if e.candidate_id in {f.candidate_id for f in in_window}]
    summary = summarize(measured)
    accepted = [e for e in in_window if e.stage == "accepted"]
    return {
        "workers": workers,
        "desktops": DESKTOPS,
        "mode": "owned (1 each)" if len(probes) > 1 else "shared (probe)",
        "candidates_per_min": round(len(in_window) / window * 60, 2),
        "accepted_per_min": round(len(accepted) / window * 60, 2),
        "lease_wait_ms_p50": round(waits[len(waits) // 2], 1) if waits else 0.0,
        "lease_wait_ms_p95": round(waits[int(len(waits) * 0.95)], 1) if waits else 0.0,
        "http_ms_per_call": round(transport / calls, 2) if calls else 0.0,
        "probe_calls": calls,
        "desktop_busy": round(held / ((end - t0) * DESKTOPS), 3),
        "latency_s_per_accepted": summary["seconds_per_accepted"],
        "summary": summary,
    }


# -- ablation ---------------------------------------------------------------------------
ABLATIONS = {
    "full loop": {},
    "no rule validator": {"use_validator": False},
    "no judger": {"use_judger": False},
    "no fixer": {"use_fixer": False},
}


async def ablation(probe: dict[str, Any], llm: LLMClient, n: int, workers: int) -> list[dict]:
    """N candidates (themes 0..N-1) per switch; every accepted task audited by the validator."""
    rows = []
    async with ProbeClient(probe["url"], probe["token"]) as client:
        syn = Synthesizer(llm, client, LoopSettings(checker_max_turns=8, parse_retries=1))
        auditor = RuleValidator(client)
        for name, switches in ABLATIONS.items():
            events, seconds = await _configuration(syn, name, switches, n, workers)
            summary = summarize(events, seconds)
            accepted = [e.candidate for e in events if e.stage == "accepted"]
            audits = await asyncio.gather(*(auditor.validate(task) for task in accepted))
            unsound = [a for a in audits if not a.accepted]
            ambiguous = sum(task["instruction"] == VAGUE for task in accepted)
            good = len(accepted) - len(unsound) - ambiguous
            cost = summary["usage"]["cost_usd"]
            rows.append({
                "config": name, "candidates": summary["candidates"], "accepted": len(accepted),
                "unsound": len(unsound), "ambiguous": ambiguous, "good": good,
                "llm_calls_per_candidate": round(summary["usage"]["calls"] / max(1, n), 2),
                "usd_per_good": round(cost / good, 4) if good else None,
                "executable_rate": summary["executable_rate"],
                "unsound_reasons": sorted({a.reasons[0][:80] for a in unsound}),
                "seconds": round(seconds, 1),
            })  # fmt: skip
            print(f"  ablation {name}: {len(accepted)} accepted, {len(unsound)} unsound, "
                  f"{ambiguous} ambiguous", file=sys.stderr)  # fmt: skip
    return rows


async def _configuration(
    syn: Synthesizer, name: str, switches: dict[str, Any], n: int, workers: int
) -> tuple[list[SynthesisEvent], float]:
    """Themes 0..n-1 under one switch setting, `workers` at a time: (events, seconds)."""
    events: list[SynthesisEvent] = []
    themes = list(range(n))

    def emit(topic: str, event: Any) -> None:
        if topic == "synthesis":
            events.append(event)

    async def worker() -> None:
        while themes:
            i = themes.pop(0)
            request = SynthesisRequest(
                request_id=f"ablation/{name}/{i}", run_id=f"ablation-{name}", app="terminal",
                hint=f"bench-{i:04d}", max_rounds=2, **switches,
            )  # fmt: skip
            await syn.synthesize(request, emit)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return events, time.monotonic() - started


def ablation_table(rows: list[dict[str, Any]]) -> str:
    """The ablation as a markdown table."""
    lines = ["| loop | candidates | accepted | unsound (audit) | ambiguous | good | "
             "LLM calls per candidate | USD per good task |", "|" + "---|" * 8]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['candidates']} | {r['accepted']} | {r['unsound']} | "
            f"{r['ambiguous']} | {r['good']} | {r['llm_calls_per_candidate']} | "
            f"{r['usd_per_good']} |"
        )
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    """The levels as a markdown table."""
    head = ("| workers | desktops | mode | candidates/min | accepted/min | lease wait p50 / p95 "
            "(ms) | HTTP per probe call (ms) | desktops busy | latency per accepted (s) |")  # fmt: skip
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['desktops']} | {r['mode']} | {r['candidates_per_min']} | "
            f"{r['accepted_per_min']} | {r['lease_wait_ms_p50']} / {r['lease_wait_ms_p95']} | "
            f"{r['http_ms_per_call']} | {r['desktop_busy']:.0%} | {r['latency_s_per_accepted']} |"
        )
    return "\n".join(lines)


async def main() -> int:
    """Parse arguments, run the levels, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="under a minute: write_file tasks, short windows")  # fmt: skip
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--llm-latency", type=float, default=None,
                        help="seconds per model call (default 1.0, quick 0.3)")  # fmt: skip
    parser.add_argument("--window", type=float, default=None, help="seconds measured per level")
    parser.add_argument("--price-input", type=float, default=3.0, help="USD per 1M input tokens")
    parser.add_argument("--price-output", type=float, default=15.0, help="USD per 1M output")
    parser.add_argument("--ablation", type=int, default=0, metavar="N",
                        help="also run N candidates under each ablation switch (10 workers)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    quick = args.quick
    latency = args.llm_latency if args.llm_latency is not None else (0.3 if quick else 1.0)
    window = args.window or (4.0 if quick else 90.0)
    terminal = not quick

    settle = 0.0 if quick else 10.0

    counter = [0]
    rows = []
    started = time.monotonic()
    records = Path(tempfile.mkdtemp(prefix="bench-verigen-")) / "records.json"
    records.write_text(json.dumps({"responses": recording(terminal)}))
    replay_argv = [sys.executable, "-m", "producers.verigen.replay", str(records), "--port",
                   "0", "--latency", str(latency)]  # fmt: skip
    llm_kw = {"max_concurrency": 256, "price_input_per_m": args.price_input,
              "price_output_per_m": args.price_output}  # fmt: skip
    # The baseline's 4 probes of one desktop each, and the shared probe of 4, start at once.
    argvs = [replay_argv, *[probe_argv(1) for _ in range(DESKTOPS)], probe_argv(DESKTOPS)]
    with serving(*argvs) as (replay, *owned, shared):
        print(f"servers up in {time.monotonic() - started:.1f} s; model latency {latency:g} "
              f"s/call; {'write_file' if quick else 'terminal'} tasks; window {window:g} s "
              "after the first completion", file=sys.stderr)  # fmt: skip
        async with LLMClient(LLMSettings(replay["base_url"], "replay", **llm_kw)) as llm:
            plan = [(owned, DESKTOPS)] + [([shared], w) for w in args.levels]
            for probes, workers in plan:
                rows.append(await level(probes, llm, workers, settle=settle,
                                        window=window, counter=counter))  # fmt: skip
                _progress(rows[-1])
            ablations = await ablation(shared, llm, args.ablation, 10) if args.ablation else []
    everything = [r["summary"] for r in rows]
    validated = sum(s["validated"] for s in everything)
    executable = sum((s["executable_rate"] or 0) * s["validated"] for s in everything)
    accepted = sum(s["accepted"] for s in everything)
    cost = sum(s["usage"]["cost_usd"] for s in everything)
    tokens = sum(s["usage"]["prompt_tokens"] + s["usage"]["completion_tokens"] for s in everything)
    overall = {
        "executable_rate": round(executable / validated, 4) if validated else None,
        "validated": validated,
        "accepted": accepted,
        "usd_per_accepted": round(cost / accepted, 4) if accepted else None,
        "tokens_per_accepted": round(tokens / accepted) if accepted else None,
        "llm_latency_s": latency,
        "prices_per_1m": [args.price_input, args.price_output],
        "seconds": round(time.monotonic() - started, 1),
    }
    print(table(rows))
    if ablations:
        print("\n" + ablation_table(ablations))
    print(f"\nexecutable rate {overall['executable_rate']} over {validated} validated "
          f"candidates; {accepted} accepted; USD {overall['usd_per_accepted']} and "
          f"{overall['tokens_per_accepted']} tokens per accepted task "
          f"(at ${args.price_input:g}/${args.price_output:g} per 1M); "
          f"{overall['seconds']} s in all")  # fmt: skip
    if args.json:
        out = {"levels": rows, "overall": overall, "ablation": ablations}
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def _progress(row: dict[str, Any]) -> None:
    print(f"  {row['workers']:>3} workers ({row['mode']}): {row['candidates_per_min']} "
          f"candidates/min", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the servers it started
    try:
        import uvloop

        raise SystemExit(uvloop.run(main()))
    except ImportError:
        raise SystemExit(asyncio.run(main())) from None
