"""What every task family is built from: the family record, its instances, setup and checks.

A family is a function `make(rng) -> Instance` plus a name, an app and a held-out mark;
`Family.instance(seed)` seeds the generator with the family's name and the seed, so an
instance is a pure function of both. Setup steps and checks are plain OSWorld JSON:

- files are written by an `execute` step (`printf` in the desktop's shell), never read
  from the host, so an instance runs from the `tasks` topic with no task folder;
- a terminal is opened in setup (the agent's first turn can type a command);
- a text check compares a file with the expected text, which the evaluator's `postconfig`
  writes under /tmp/scalecua-expected after the episode (the agent cannot read it early);
- every evaluator starts its `postconfig` by sleeping a moment, so a command typed in the
  last turn (or a save) has finished before the getters read the desktop.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Check",
    "Family",
    "GeneratedTask",
    "Instance",
    "NOUNS",
    "WORDS",
    "cell_equals",
    "evaluator",
    "file_name",
    "listing_is",
    "open_file",
    "open_spreadsheet",
    "open_terminal",
    "path_state",
    "text_equals",
    "text_of",
    "type_command",
    "word_lines",
    "write_files",
    "EXPECTED_DIR",
    "HOME",
    "SNAPSHOT",
    "SOURCE",
]

HOME = "/home/user"
EXPECTED_DIR = "/tmp/scalecua-expected"  # where postconfig writes the expected texts
SNAPSHOT = "scalecua-desktop"
SOURCE = "scalecua-families"

# File stems and content words. No word is a substring of another (grep and sed on
# these words then match exactly the lines and words meant; a test checks it).
NOUNS = tuple(
    """
    notes report todo budget ideas draft summary agenda plan journal recipes contacts
    goals inventory schedule minutes letter memo invoice diary outline backlog roster
    errands
    """.split()
)
WORDS = tuple(
    """
    apple river candle orbit maple pepper silver tiger violet window harbor lemon
    meadow puzzle rocket saddle thunder velvet walnut yellow anchor bamboo copper
    dragon ember falcon garden hollow island jasmine kettle lantern marble nectar olive
    pillow quartz raven sunset tulip canyon pebble frost willow cobalt meteor saffron
    glacier
    """.split()
)


@dataclass(frozen=True)
class Instance:
    """What a family's generator returns for one draw of its parameters."""

    instruction: str  # names every parameter the solution needs
    config: list[dict[str, Any]]  # OSWorld setup steps
    evaluator: dict[str, Any]  # OSWorld evaluator object
    solution: list[dict[str, Any]]  # the reference actions, one per agent turn
    params: dict[str, str]  # the parameters the instruction names (checked by the tests)


@dataclass(frozen=True)
class Family:
    """A parameterised task: a generator of instances and how it is reported."""

    name: str
    app: str  # OSWorld's related_apps entry: "terminal", "mousepad" or "libreoffice_calc"
    varies: str  # what differs between instances, for the docs and `scalecua tasks families`
    make: Callable[[random.Random], Instance]
    heldout: bool = False  # every instance is held out: never trained on, reported apart

    def draw(self, seed: int) -> Instance:
        """The instance of this family for `seed` (deterministic)."""
        return self.make(random.Random(f"{self.name}:{seed}"))

    def instance(self, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The OSWorld task JSON for `seed`, id `<family>-<seed>`, and its reference solution."""
        drawn = self.draw(seed)
        task = {
            "id": f"{self.name}-{seed}",
            "snapshot": SNAPSHOT,
            "instruction": drawn.instruction,
            "source": SOURCE,
            "config": drawn.config,
            "related_apps": [self.app],
            "evaluator": drawn.evaluator,
            "family": self.name,
            "seed": seed,
        }
        return task, drawn.solution


@dataclass(frozen=True)
class GeneratedTask:
    """One generated instance, ready to write or publish."""

    family: str
    seed: int
    split: str  # "train" or "heldout"
    task: dict[str, Any]  # OSWorld task JSON; the reference solution is under "solution"
    solution: list[dict[str, Any]] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        """The task id, `<family>-<seed>`."""
        return str(self.task["id"])


# -- parameters ------------------------------------------------------------------------


def file_name(rng: random.Random, ext: str = "txt", avoid: tuple[str, ...] = ()) -> str:
    """A file name such as `budget17.txt`, different from every name in `avoid`."""
    while True:
        name = f"{rng.choice(NOUNS)}{rng.randint(1, 99)}.{ext}"
        if name not in avoid:
            return name


def word_lines(
    rng: random.Random, n: int, words: tuple[str, ...] = WORDS, width: int = 2
) -> list[str]:
    """n lines of `width` words each."""
    return [" ".join(rng.choice(words) for _ in range(width)) for _ in range(n)]


def text_of(lines: list[str]) -> str:
    """Lines joined into a text file's content (with a final newline)."""
    return "".join(line + "\n" for line in lines)


# -- setup steps ------------------------------------------------------------------------


def write_files(files: dict[str, str]) -> dict[str, Any]:
    """One `execute` step that writes each text to its absolute path (folders created)."""
    parts = []
    for path, text in files.items():
        folder = path.rsplit("/", 1)[0]
        parts.append(
            f"mkdir -p {shlex.quote(folder)} && printf '%s' {shlex.quote(text)} > {shlex.quote(path)}"
        )
    return {"type": "execute", "parameters": {"shell": True, "command": " && ".join(parts)}}


# Waits until a terminal window holds the keyboard focus, then (on scalecua desktops, whose
# terminals log their sessions) until the shell has printed its prompt.
_WAIT_TERMINAL = (
    "for i in $(seq 1 200); do xdotool getwindowfocus getwindowname 2>/dev/null "
    "| grep -qi -e terminal -e xterm && break; sleep 0.05; done; "
    "d=/home/user/.cache/scalecua-terminal; for i in $(seq 1 100); do [ -d $d ] || break; "
    'f=$(ls -t $d/*.log 2>/dev/null | head -n 1); [ -s "$f" ] && break; sleep 0.05; done'
)


def open_terminal() -> list[dict[str, Any]]:
    """Setup steps that open a terminal in the home folder and wait until it can be typed in."""
    return [
        {
            "type": "launch",
            "parameters": {"command": ["gnome-terminal", f"--working-directory={HOME}"]},
        },
        {"type": "execute", "parameters": {"shell": True, "command": _WAIT_TERMINAL}},
    ]


def open_file(path: str, settle: float = 1.0) -> list[dict[str, Any]]:
    """Setup steps that open a file in its app (waiting for the window), then settle."""
    return [
        {"type": "open", "parameters": {"path": path}},
        {"type": "sleep", "parameters": {"seconds": settle}},
    ]


def open_spreadsheet(path: str) -> list[dict[str, Any]]:
    """Open a spreadsheet in Calc and wait until the document has loaded (its lock file)."""
    name = path.rsplit("/", 1)[1]
    folder = path.rsplit("/", 1)[0]
    wait_lock = (
        f'for i in $(seq 1 300); do [ -e "{folder}/.~lock.{name}#" ] && exit 0; '
        "sleep 0.1; done; exit 1"
    )
    return [
        {"type": "open", "parameters": {"path": path}},
        {"type": "execute", "parameters": {"shell": True, "command": wait_lock}},
        {"type": "sleep", "parameters": {"seconds": 2.0}},
    ]


# -- the agent's actions ----------------------------------------------------------------


def type_command(command: str) -> dict[str, Any]:
    """The action that types a shell command and presses Enter."""
    return {"action": "type", "text": command + "\n"}


# -- checks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One metric of an evaluator with its getters and the postconfig steps it needs."""

    func: str
    result: dict[str, Any]
    expected: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    postconfig: list[dict[str, Any]] = field(default_factory=list)


def text_equals(path: str, text: str, tag: str) -> Check:
    """The file at `path` holds `text` (blanks, such as a final newline, ignored)."""
    expected_path = f"{EXPECTED_DIR}/{tag}.txt"
    return Check(
        func="compare_text_file",
        result={"type": "vm_file", "path": path, "dest": f"{tag}.txt"},
        expected={"type": "vm_file", "path": expected_path, "dest": f"expected-{tag}.txt"},
        options={"ignore_blanks": True},
        postconfig=[write_files({expected_path: text})],
    )


def path_state(path: str, want: str) -> Check:
    """`path` is a folder (`want="folder"`), a file (`"file"`) or absent (`"absent"`)."""
    quoted = shlex.quote(path)
    command = (
        f"if [ -d {quoted} ]; then echo state=folder; elif [ -e {quoted} ]; "
        "then echo state=file; else echo state=absent; fi"
    )
    return Check(
        func="check_include_exclude",
        result={"type": "vm_command_line", "command": command, "shell": True},
        expected={"type": "rule", "rules": {"include": [f"state={want}"], "exclude": []}},
    )


def listing_is(folder: str, present: list[str], absent: list[str]) -> Check:
    """The folder lists every name in `present` and none in `absent`."""
    command = f"ls -1A {shlex.quote(folder)} | sed 's/.*/<&>/'"
    rules = {"include": [f"<{n}>" for n in present], "exclude": [f"<{n}>" for n in absent]}
    return Check(
        func="check_include_exclude",
        result={"type": "vm_command_line", "command": command, "shell": True},
        expected={"type": "rule", "rules": rules},
    )


def cell_equals(path: str, cell: str, value: float | str) -> Check:
    """Cell `cell` of the first sheet of the spreadsheet at `path` holds `value`."""
    name = path.rsplit("/", 1)[1]
    props = {"value": {"method": "eq", "ref": value}}
    rule = {"type": "check_cell", "sheet_idx": "RI0", "coordinate": cell, "props": props}
    return Check(
        func="compare_table",
        result={"type": "vm_file", "path": path, "dest": name},
        options={"rules": [rule]},
    )


def evaluator(checks: list[Check], settle: float = 0.5) -> dict[str, Any]:
    """An OSWorld evaluator that passes (1.0) only when every check does."""
    postconfig: list[dict[str, Any]] = [{"type": "sleep", "parameters": {"seconds": settle}}]
    for check in checks:
        postconfig += check.postconfig
    if len(checks) == 1:
        (check,) = checks
        out: dict[str, Any] = {"postconfig": postconfig, "func": check.func, "result": check.result}
        if check.expected is not None:
            out["expected"] = check.expected
        if check.options:
            out["options"] = check.options
        return out
    return {
        "postconfig": postconfig,
        "func": [c.func for c in checks],
        "result": [c.result for c in checks],
        "expected": [c.expected for c in checks],
        "options": [c.options for c in checks],
        "conj": "and",
    }
