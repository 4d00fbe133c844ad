"""What `scalecua up` shows a person: one live panel on a terminal, plain lines anywhere else.

The services' own logs go to files (cli/service_console.py); the console keeps the run's
story: the phase, rollouts played and scored, the policy version, each iteration's pass
rate, reward and step time, an ETA, and every warning or error a service logs. On a
terminal a rich `Live` panel redraws in place (event lines scroll above it); in a pipe or
CI log each event is one plain line, with a heartbeat line a minute when nothing else was
said, so `scalecua up 2>&1 | wc -l` stays small.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["UpConsole"]

_HEARTBEAT_S = 60.0


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


@dataclass
class _State:
    phase: str = "starting"
    started: float = field(default_factory=time.monotonic)
    played: int = 0  # trajectories completed
    scored: int = 0  # rewards of the run's judge version
    version: int = 0  # newest policy version announced
    rows: list[dict[str, Any]] = field(default_factory=list)


class UpConsole:
    """The run's story for a person; `live=None` picks the panel when the stream is a terminal."""

    def __init__(self, iterations: int, stream: TextIO | None = None, live: bool | None = None):
        self.iterations = iterations
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.state = _State()
        self._console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self._panel: Live | None = None
        self._last_line = time.monotonic()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Begin showing the live panel (on a terminal)."""
        if self.live and self._panel is None:
            self._panel = Live(self._render(), console=self._console, refresh_per_second=2,
                               transient=False, get_renderable=self._render)  # fmt: skip
            self._panel.start()

    def stop(self) -> None:
        """Stop the panel, leaving its last state on screen."""
        if self._panel is not None:
            self._panel.stop()
            self._panel = None

    # -- what happened --------------------------------------------------------------------
    def say(self, message: str) -> None:
        """One event line (scrolls above the panel on a terminal)."""
        self._last_line = time.monotonic()
        if self._panel is not None:
            self._console.print(Text(f"[scalecua up] {message}"))
        else:
            print(f"[scalecua up] {message}", file=self.stream, flush=True)

    def phase(self, name: str, message: str | None = None) -> None:
        """Enter a phase of the run ("warm start", "RL", "stopping"), saying why if given."""
        self.state.phase = name
        if message:
            self.say(message)

    def counts(self, *, played: int | None = None, scored: int | None = None,
               version: int | None = None) -> None:  # fmt: skip
        """Update the live counters; in plain mode, say them once a minute if nothing else was."""
        s = self.state
        s.played = s.played if played is None else played
        s.scored = s.scored if scored is None else scored
        s.version = s.version if version is None else max(s.version, version)
        if self._panel is None and time.monotonic() - self._last_line > _HEARTBEAT_S:
            self.say(f"... {s.phase}: {s.played} rollouts played, {s.scored} scored, policy "
                     f"v{s.version}; {_clock(time.monotonic() - s.started)} elapsed")  # fmt: skip

    def iteration(self, row: dict[str, Any], line: str) -> None:
        """A finished iteration: its row joins the table, its line is said."""
        self.state.rows.append(row)
        self.say(line)

    def eta(self) -> float | None:
        """Seconds left, from the RL iterations' mean duration so far (None until one is done)."""
        rl = [r for r in self.state.rows if r.get("phase", "rl") == "rl"]
        if not rl:
            return None
        first = rl[0]["elapsed_s"] - rl[0].get("duration_s", rl[0]["elapsed_s"])
        per = (rl[-1]["elapsed_s"] - first) / len(rl)
        return max(0.0, per * (self.iterations - len(rl)))

    # -- rendering ------------------------------------------------------------------------
    def _render(self) -> Group:
        s = self.state
        elapsed = time.monotonic() - s.started
        eta = self.eta()
        head = Text.assemble(
            ("scalecua up", "bold"), f"  {s.phase}  ·  policy v{s.version}  ·  ",
            f"{s.played} rollouts played, {s.scored} scored  ·  {_clock(elapsed)} elapsed",
            f"  ·  ETA {_clock(eta)}" if eta is not None else "",
        )  # fmt: skip
        table = Table(box=None, pad_edge=False, header_style="bold")
        for name in ("iteration", "policy", "played by", "rollouts", "pass", "reward",
                     "groups (all-equal)", "loss", "step"):  # fmt: skip
            table.add_column(name, justify="right")
        for r in s.rows[-12:]:
            table.add_row(
                str(r.get("label", r["iteration"])), f"v{r['policy_version']}",
                ",".join(f"v{v}" for v in r.get("rollout_versions", [])) or "-",
                str(r["rollouts"]),
                "-" if r["pass_rate"] is None else f"{r['pass_rate']:.0%}",
                "-" if r["mean_reward"] is None else f"{r['mean_reward']:+.2f}",
                f"{r.get('groups', 0)} ({r.get('groups_all_equal', 0)})",
                f"{r['loss']:.4f}", f"{r['step_time_s']:.1f}s",
            )  # fmt: skip
        return Group(head, table) if s.rows else Group(head)
