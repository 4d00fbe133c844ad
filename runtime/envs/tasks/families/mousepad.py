"""Mousepad families: a text file is open in mousepad; a line is added and the file saved."""

from __future__ import annotations

import random

from runtime.envs.tasks.families.base import (
    HOME,
    WORDS,
    Family,
    Instance,
    evaluator,
    file_name,
    open_file,
    text_equals,
    text_of,
    word_lines,
    write_files,
)

__all__ = ["MOUSEPAD_FAMILIES", "append_line", "prepend_line"]


def _document(rng: random.Random) -> tuple[str, list[str], str]:
    """A file name, its lines, and a new line of two or three words."""
    name = file_name(rng)
    lines = word_lines(rng, rng.randint(2, 5))
    new = " ".join(rng.sample(WORDS, rng.randint(2, 3)))
    return name, lines, new


def prepend_line(rng: random.Random) -> Instance:
    """Insert a given line above the first line of the open file and save."""
    name, lines, new = _document(rng)
    path = f"{HOME}/{name}"
    return Instance(
        instruction=(
            f"In the open file {name}, insert the line '{new}' above the first line "
            "and save the file."
        ),
        config=[write_files({path: text_of(lines)}), *open_file(path)],
        evaluator=evaluator([text_equals(path, text_of([new, *lines]), "prepended")]),
        # mousepad opens a file with the cursor at its start
        solution=[{"action": "type", "text": new + "\n"}, {"action": "key", "text": "ctrl+s"}],
        params={"file": name, "line": new},
    )


def append_line(rng: random.Random) -> Instance:
    """Add a given line below the last line of the open file and save."""
    name, lines, new = _document(rng)
    path = f"{HOME}/{name}"
    return Instance(
        instruction=(
            f"In the open file {name}, add the line '{new}' below the last line and save the file."
        ),
        config=[write_files({path: text_of(lines)}), *open_file(path)],
        evaluator=evaluator([text_equals(path, text_of([*lines, new]), "appended")]),
        solution=[
            {"action": "key", "text": "ctrl+End"},
            {"action": "type", "text": new + "\n"},
            {"action": "key", "text": "ctrl+s"},
        ],
        params={"file": name, "line": new},
    )


_VARIES = "file name and lines, the new line"
MOUSEPAD_FAMILIES = (
    Family("mousepad_prepend_line", "mousepad", _VARIES, prepend_line),
    Family("mousepad_append_line", "mousepad", _VARIES, append_line, heldout=True),
)
