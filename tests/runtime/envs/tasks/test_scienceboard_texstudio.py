"""Real ScienceBoard TeXstudio tasks, JSON unchanged (tests/data/scienceboard), on one real
desktop with TeXstudio and TeX Live. Each scores 0.0 untouched (or wrongly solved) and 1.0
after what an agent would do, with ScienceBoard's own actions where it has them:

- C-06: make the document compile (`\\or` is no LaTeX command; `\\vee` is): the `compile`
  check runs pdflatex in the desktop.
- B-01: fill `\\cite{}` with the key in refs.bib: the `file` check (the whole file equals the
  touched text with the placeholder replaced) and `compile` with bibtex.
- C-02: correct one letter of a typo, typed in TeXstudio itself and saved with ctrl+s.
- D-01: answer a question about the document (`answer`, ScienceBoard's ANS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.envs.desktop.apps import APPS, missing_app
from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from tests.desktop_shell import until_shell

pytestmark = pytest.mark.desktop

TEX = Path(__file__).resolve().parents[3] / "data" / "scienceboard" / "VM" / "TeXstudio"
MAIN = "/home/user/atelier/main.tex"


@pytest.fixture(autouse=True)
def _texstudio_here() -> None:
    assert missing_app(APPS["texstudio"]) is None, missing_app(APPS["texstudio"])


async def _write_main(controller: Any, text: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The agent's `write_file` of main.tex: the actions played and their errors."""
    return await play(controller, [{"action": "write_file", "text": MAIN, "content": text}])


async def _set_up(controller: Any, task: Task) -> None:
    await run_setup(controller, task)
    assert await until_shell(controller, "wmctrl -lx | grep -qi texstudio"), "no TeXstudio window"


async def test_c06_compiles_only_once_the_formula_is_fixed(task_desktop):
    task = load_task(TEX / "C-06.json")
    source = task.native["initialize"][0]["text"]
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await _set_up(controller, task)
        untouched = await evaluate(controller, task, [])
        played, errors = await _write_main(controller, source.replace(r"\or", r"\vee"))
        solved = await evaluate(controller, task, played)
    assert errors == []
    assert (untouched.score, solved.score) == (0.0, 1.0), (untouched, solved)
    assert [f.func for f in solved.funcs] == ["sb_compile"]


async def test_b01_the_cite_key_checked_as_the_whole_file_and_by_bibtex(task_desktop):
    task = load_task(TEX / "B-01.json")
    source = task.native["initialize"][0]["text"]
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await _set_up(controller, task)
        untouched = await evaluate(controller, task, [])
        wrong = source.replace(r"\cite{}", r"\cite{lean2015}")  # no such key: bibtex warns only
        played, _ = await _write_main(controller, wrong)
        miscited = await evaluate(controller, task, played)
        compiles = await controller.tex_check("/home/user/atelier", "main", bibtex=True)
        right = source.replace(r"\cite{}", r"\cite{de2015lean}")
        played, errors = await _write_main(controller, right)
        solved = await evaluate(controller, task, played)
        bbl = await controller.read_text("/home/user/atelier/main.bbl")
    assert errors == []
    assert untouched.score == 0.0 and miscited.score == 0.0
    assert [(f.func, f.score) for f in miscited.funcs] == [("sb_file", 0.0)]
    assert compiles == {"pass": True}  # it compiles (bibtex only warns), but is not the text
    assert solved.score == 1.0, solved
    assert "\\bibitem{de2015lean}" in bbl  # bibtex ran, with the .bib the task wrote


async def test_c02_a_letter_corrected_in_texstudio_and_saved(task_desktop):
    task = load_task(TEX / "C-02.json")
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await _set_up(controller, task)
        untouched = await evaluate(controller, task, [])
        line = next(
            n
            for n, text in enumerate(task.native["initialize"][0]["text"].split("\n"), 1)
            if r"\Pi x: M. B" in text
        )
        column = task.native["initialize"][0]["text"].split("\n")[line - 1].index(r"\Pi x: M")
        edit = [
            {"action": "key", "text": "ctrl+g"},  # TeXstudio's Go to Line
            {"action": "wait", "duration": 1.0},
            {"action": "type", "text": f"{line}\n"},
            {"action": "wait", "duration": 0.5},
            {"action": "key", "text": "Home"},
            *[{"action": "key", "text": "Right"}] * (column + len(r"\Pi x: ")),
            {"action": "key", "text": "shift+Right"},
            {"action": "type", "text": "A"},
            {"action": "key", "text": "ctrl+s"},
            {"action": "wait", "duration": 1.0},
        ]
        played, errors = await play(controller, edit)
        solved = await evaluate(controller, task, played)
        text = await controller.read_text(MAIN)
    assert errors == []
    assert untouched.score == 0.0
    assert solved.score == 1.0, (solved, text)


async def test_d01_the_answer_is_scored_as_scienceboard_scores_ans(task_desktop):
    task = load_task(TEX / "D-01.json")
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await _set_up(controller, task)
        none = await evaluate(controller, task, [])
        wrong = await evaluate(controller, task, [{"action": "answer", "text": "107"}])
        done = await evaluate(controller, task, [{"action": "done"}])
        right = await evaluate(controller, task, [{"action": "answer", "text": "13"}])
    assert [none.score, wrong.score, done.score, right.score] == [0.0, 0.0, 0.0, 1.0]
