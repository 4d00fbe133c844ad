"""Timelines and stage summaries as plain text, for a terminal or a pipe (pure)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from runtime.trace.summary import ALL, GapStats, slowest
from runtime.trace.timeline import GAP_LABELS, GAPS, Timeline, Turn

__all__ = ["timeline_text", "summary_text", "listing_text", "seconds"]

_WIDTH = 100  # long texts (responses, reasons) are cut to about this


def seconds(ms: float | None) -> str:
    """A duration in ms as seconds, with a unit; "–" for none."""
    if ms is None or not math.isfinite(ms):
        return "–"
    s = ms / 1000.0
    if abs(s) >= 600:
        return f"{s / 60:.1f} min"
    return f"{s:.3f} s" if abs(s) < 10 else f"{s:.1f} s"


def _clock(ms: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms % 1000):03d}"


def _cut(text: str, width: int = _WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _request_line(t: Timeline) -> str:
    r = t.request
    if r is None:
        return "(no request on the log)"
    batch = f"batch {r.batch} ({r.batch_tasks} tasks)" if r.batch is not None else "no batch"
    why = r.drawn
    if r.drawn in ("pool", "outside the pool"):
        why += f" (rank {r.pool_rank} of {r.live_tasks} by weight; pool = top {r.pool_size})"
    ema = (
        f"EMA {_num(r.ema)} weight {_num(r.weight)} after {r.groups_counted} "
        f"group{'s' * (r.groups_counted != 1)}"
        if r.ema is not None
        else "no EMA yet"
    )
    return f"{batch} · asks v{r.policy_version}, ≤ {r.max_steps} turns · drawn: {why} · {ema}"


def _turn_line(turn: Turn) -> str:
    seen = "+".join(turn.observation) or "nothing"
    if turn.screenshot_size:
        seen += f" {turn.screenshot_size[0]}x{turn.screenshot_size[1]}"
    phases = ", ".join(f"{k} {seconds(v)}" for k, v in turn.timings_ms.items() if v >= 1)
    return (
        f"v{turn.policy_version} · saw {seen} · {turn.tokens} tokens ({turn.finish_reason}) · "
        f"{seconds(turn.latency_ms)}" + (f" ({phases})" if phases else "")
    )


def _rows(t: Timeline) -> list[tuple[float, str, str]]:
    """(time, stage, what) for each stage, in time order."""
    rows: list[tuple[float, str, str]] = []
    if t.request:
        rows.append((t.request.at_ms, "request", _request_line(t)))
    for turn in t.turns:
        rows.append((turn.at_ms, f"turn {turn.step}", _turn_line(turn)))
    c = t.completion
    if c:
        what = f"{c.status} after {c.num_steps} of {c.max_steps} turns, episode {c.seconds:.1f} s"
        if c.policy_version_last != c.policy_version:
            what += f" · played by v{c.policy_version}..v{c.policy_version_last}"
        if c.error:
            what += f" · error: {_cut(c.error, 60)}"
        rows.append((c.at_ms, "complete", what))
    for i, w in enumerate(t.rewards):
        what = f"score {w.score:+.3f} by {w.judge_version}"
        if w.metric_score is not None:
            what += f" · metric {w.metric_score:.3f}"
        if not w.scored:
            what += " · not scored (environment failure)"
        rows.append((w.at_ms, "reward" if i == 0 else "rejudged", what))
    s = t.segments
    if s:
        what = (
            f"{s.count} of {s.expected} {s.mode} segments · {s.tokens} tokens, "
            f"{s.trained_tokens} trained · {s.images} images"
        )
        rows.append((s.at_ms, "segments", what))
    tr = t.training
    if tr:
        adv = "not trained on" if tr.advantage is None else f"advantage {tr.advantage:+.3f}"
        what = f"step → v{tr.version} on {tr.groups} groups, {tr.rollouts} rollouts · {adv}"
        if tr.loss is not None:
            what += f" · loss {tr.loss:.4g}"
        rows.append((tr.step_started_ms, "step start", "the trainer took the group"))
        rows.append((tr.trained_ms, "trained", what))
        rows.append((tr.announced_ms, "announced", f"v{tr.version} at {tr.checkpoint_uri}"))
    return sorted(rows, key=lambda r: r[0])


def _details(t: Timeline) -> list[str]:
    out = []
    if t.turns:
        out.append("turns:")
        for turn in t.turns:
            out.append(f"  {turn.step:>3}  {_cut(turn.action_text)}")
            if turn.response_text and turn.action is None:
                out.append(f"       response: {_cut(repr(turn.response_text))}")
            if turn.screenshot:
                out.append(f"       screenshot: {turn.screenshot}")
    c = t.completion
    if c and (c.artifacts or c.retries):
        if c.artifacts:
            out.append("judge read: " + ", ".join(f"{k} {v}" for k, v in c.artifacts.items()))
        for a in c.retries:
            error = f": {_cut(a.error, 60)}" if a.error else ""
            out.append(f"other attempt {a.attempt}: {a.trajectory_id} {a.status}{error}")
    for w in t.rewards:
        out.append(f"reward reason ({w.judge_version}): {_cut(w.reason) or '–'}")
    if t.segments:
        rows = ", ".join(
            f"#{r.index} {r.tokens} tok/{r.trained_tokens} trained/{r.images} img/v{r.policy_version}"
            for r in t.segments.rows
        )
        out.append(f"segments: {rows}")
    if t.task_after:
        a = t.task_after
        out.append(
            f"task after this group: EMA {a.ema:.3f}, weight {a.weight:.3f}, "
            f"{a.groups_counted} group{'s' * (a.groups_counted != 1)}, {a.state}"
        )
    if t.group:
        out.append(f"GRPO group {t.group_id} ({t.group_size} rollouts):")
        for m in t.group:
            me = " ◀" if m.trajectory_id == t.trajectory_id else ""
            score = "–" if m.score is None else f"{m.score:+.3f}"
            adv = "–" if m.advantage is None else f"{m.advantage:+.3f}"
            version = "–" if m.policy_version is None else f"v{m.policy_version}"
            tries = f" ({m.attempts} attempts)" if m.attempts > 1 else ""
            out.append(
                f"  #{m.sample_index:<2} {m.status:<11} score {score:>6}  advantage {adv:>6}  "
                f"{m.num_steps:>2} turns {version:>4}  {m.trajectory_id}{tries}{me}"
            )
    return out


def timeline_text(t: Timeline) -> str:
    """The timeline as lines: each stage with its time, time since the request, gap before it."""
    head = [
        f"trajectory {t.trajectory_id}" + (f"  (run {t.run_id})" if t.run_id else ""),
        f"task {t.task_id} · group {t.group_id}, sample {t.sample_index} of {t.group_size} · "
        f"attempt {t.attempt}",
    ]
    if t.instruction:
        head.append(f"instruction: {_cut(t.instruction)}")
    rows = _rows(t)
    origin = t.request.at_ms if t.request else (rows[0][0] if rows else 0.0)
    table = [f"{'time (UTC)':<12}  {'since req':>10}  {'gap':>9}  {'stage':<10}  what"]
    previous = None
    for at, stage, what in rows:
        gap = "" if previous is None else seconds(at - previous)
        table.append(f"{_clock(at)}  {seconds(at - origin):>10}  {gap:>9}  {stage:<10}  {what}")
        previous = at
    gaps = ["stage gaps:"] + [
        f"  {GAP_LABELS[name]:<22} {seconds(value)}" for name, value in t.gaps.items()
    ]
    turn_ms = [turn.latency_ms for turn in t.turns]
    if turn_ms:
        gaps.insert(2, f"  {'turns':<22} {seconds(sum(turn_ms))} in {len(turn_ms)}")
    return "\n".join([*head, "", *table, "", *gaps, "", *_details(t)]) + "\n"


def summary_text(rows: Sequence[GapStats], trajectories: int, run_id: str = "") -> str:
    """The stage-gap percentiles as a table per policy version, slowest stage marked."""
    out = [f"stage gaps of {trajectories} trajectories" + (f" (run {run_id})" if run_id else "")]
    versions = list(dict.fromkeys(r.version for r in rows))
    for version in versions:
        mine = {r.gap: r for r in rows if r.version == version}
        worst = slowest(rows, version)
        out.append("")
        out.append("every version" if version == ALL else f"played by {version}")
        out.append(f"  {'stage':<22} {'n':>5} {'p50':>9} {'p90':>9} {'p99':>9}")
        for gap in GAPS:
            r = mine.get(gap)
            if r is None:
                continue
            mark = "  ◀ most time" if worst is not None and r.gap == worst.gap else ""
            out.append(
                f"  {GAP_LABELS[gap]:<22} {r.n:>5} {seconds(r.p50):>9} {seconds(r.p90):>9} "
                f"{seconds(r.p99):>9}{mark}"
            )
    return "\n".join(out) + "\n"


def listing_text(timelines: Sequence[Timeline]) -> str:
    """One line per trajectory (newest last): what `scalecua trace` shows without an id."""
    wide = max([len("trajectory"), *(len(t.trajectory_id) for t in timelines)])
    out = [f"{'trajectory':<{wide}}  {'task':<28} {'status':<10} {'score':>6} {'v':>4} trained"]
    for t in timelines:
        status = t.completion.status if t.completion else "running"
        score = f"{t.rewards[0].score:+.2f}" if t.rewards else "–"
        version = "–" if t.policy_version is None else f"v{t.policy_version}"
        trained = f"v{t.training.version}" if t.training else "–"
        out.append(
            f"{t.trajectory_id:<{wide}}  {_cut(t.task_id, 28):<28} {status:<10} {score:>6} "
            f"{version:>4} {trained:>7}"
        )
    return "\n".join(out) + "\n"
