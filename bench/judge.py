"""Judge sandbox start-up cost against a bare interpreter, measured in the same run.

Runs a trivial judge (`return 1.0`) through `run_judge` and, as the baseline, the same
work in a bare `python -I -c` subprocess (compile the source, call the function, print
the score). Both are timed end to end from the caller, alternating so that machine noise
hits both alike. Prints a table of p50/p90 and the ratio; `--json PATH` writes
`judge_ms_p50`, `bare_ms_p50`, `judge_vs_bare` and the raw figures. Needs root.

    sudo .venv/bin/python bench/judge.py --quick --json bench-judge.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.judge import JudgeLimits, run_judge  # noqa: E402

SOURCE = "def judge(artifacts):\n    return 1.0\n"
BARE = (
    "import json\n"
    f"ns = {{}}\nexec(compile({SOURCE!r}, '<judge>', 'exec'), ns)\n"
    "print(json.dumps({'status': 'ok', 'score': float(ns['judge']({}))}))\n"
)


def percentile(values: list[float], q: float) -> float:
    """Return the q-quantile (0..1) of values."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def time_judge(limits: JudgeLimits) -> float:
    """Milliseconds for one sandboxed trivial judge, checked to score 1.0."""
    started = time.perf_counter()
    result = run_judge(SOURCE, "judge", {}, limits)
    elapsed = (time.perf_counter() - started) * 1000
    if (result.status, result.score) != ("ok", 1.0):
        raise SystemExit(f"the trivial judge failed: {result}")
    return elapsed


def time_bare() -> float:
    """Milliseconds for the same work in a bare `python -I -c` subprocess."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-I", "-c", BARE], capture_output=True, check=True)
    elapsed = (time.perf_counter() - started) * 1000
    if json.loads(out.stdout)["score"] != 1.0:
        raise SystemExit(f"the bare baseline failed: {out}")
    return elapsed


def main() -> None:
    """Measure both paths, print the table and optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 runs each (under a minute)")
    parser.add_argument("--runs", type=int, default=None, help="runs per path (default 60)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the judge sandbox needs root")
    runs = args.runs or (20 if args.quick else 60)
    limits = JudgeLimits()
    time_judge(limits), time_bare()  # warm the page cache and any first-use setup
    judge_ms, bare_ms = [], []
    for i in range(runs):
        judge_ms.append(time_judge(limits))
        bare_ms.append(time_bare())
        print(f"\r{i + 1}/{runs} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    figures = {
        "runs": runs,
        "judge_ms_p50": statistics.median(judge_ms),
        "judge_ms_p90": percentile(judge_ms, 0.9),
        "bare_ms_p50": statistics.median(bare_ms),
        "bare_ms_p90": percentile(bare_ms, 0.9),
    }
    figures["judge_vs_bare"] = figures["judge_ms_p50"] / figures["bare_ms_p50"]
    print(f"{'path':<28}{'p50 ms':>10}{'p90 ms':>10}")
    print(
        f"{'sandboxed judge':<28}{figures['judge_ms_p50']:>10.1f}{figures['judge_ms_p90']:>10.1f}"
    )
    print(
        f"{'bare python -I -c':<28}{figures['bare_ms_p50']:>10.1f}{figures['bare_ms_p90']:>10.1f}"
    )
    print(f"{'judge / bare (p50)':<28}{figures['judge_vs_bare']:>10.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
