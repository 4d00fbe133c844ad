"""Terminal and file families: a terminal is open in the home folder; one command solves each.

Every reference solution is a single turn: the shell command typed into the open terminal,
followed by Enter. Files live in the home folder or one of its usual subfolders.
"""

from __future__ import annotations

import random

from runtime.envs.tasks.families.base import (
    HOME,
    NOUNS,
    WORDS,
    Family,
    Instance,
    evaluator,
    file_name,
    listing_is,
    open_terminal,
    path_state,
    text_equals,
    text_of,
    type_command,
    word_lines,
    write_files,
)

__all__ = [
    "TERMINAL_FAMILIES",
    "append_line",
    "copy_file",
    "count_lines",
    "delete_file",
    "echo_to_file",
    "folder_name",
    "grep_lines",
    "make_folder",
    "rename_file",
    "replace_word",
    "sort_lines",
]

_SUBFOLDERS = ("Documents/", "Desktop/", "Downloads/")


def folder_name(rng: random.Random) -> str:
    """A folder name such as `budget_maple`."""
    return f"{rng.choice(NOUNS)}_{rng.choice(WORDS)}"


def _maybe_in_subfolder(rng: random.Random, name: str) -> str:
    return name if rng.random() < 0.5 else rng.choice(_SUBFOLDERS) + name


def echo_to_file(rng: random.Random) -> Instance:
    """Create a file holding one given word."""
    name = _maybe_in_subfolder(rng, file_name(rng))
    word = rng.choice(WORDS)
    return Instance(
        instruction=f"Create the file {name} in the home folder containing only the word {word}.",
        config=open_terminal(),
        evaluator=evaluator([text_equals(f"{HOME}/{name}", word + "\n", "result")]),
        solution=[type_command(f"echo {word} > ~/{name}")],
        params={"file": name, "word": word},
    )


def append_line(rng: random.Random) -> Instance:
    """Append a given line to an existing file."""
    name = file_name(rng)
    lines = word_lines(rng, rng.randint(2, 5))
    new = " ".join(rng.sample(WORDS, 2))
    return Instance(
        instruction=f"Add the line '{new}' at the end of {name} in the home folder.",
        config=[write_files({f"{HOME}/{name}": text_of(lines)}), *open_terminal()],
        evaluator=evaluator([text_equals(f"{HOME}/{name}", text_of([*lines, new]), "appended")]),
        solution=[type_command(f"echo '{new}' >> ~/{name}")],
        params={"file": name, "line": new},
    )


def make_folder(rng: random.Random) -> Instance:
    """Create a folder with a given name."""
    folder = _maybe_in_subfolder(rng, folder_name(rng))
    return Instance(
        instruction=f"Create the folder {folder} in the home folder.",
        config=open_terminal(),
        evaluator=evaluator([path_state(f"{HOME}/{folder}", "folder")]),
        solution=[type_command(f"mkdir ~/{folder}")],
        params={"folder": folder},
    )


def copy_file(rng: random.Random) -> Instance:
    """Copy a file to a new name, keeping the original."""
    src = file_name(rng)
    dst = _maybe_in_subfolder(rng, file_name(rng, avoid=(src,)))
    text = text_of(word_lines(rng, rng.randint(2, 5), width=3))
    return Instance(
        instruction=(f"Copy {src} to {dst} (both in the home folder), keeping the original {src}."),
        config=[write_files({f"{HOME}/{src}": text}), *open_terminal()],
        evaluator=evaluator(
            [text_equals(f"{HOME}/{dst}", text, "copy"), text_equals(f"{HOME}/{src}", text, "kept")]
        ),
        solution=[type_command(f"cp ~/{src} ~/{dst}")],
        params={"source": src, "copy": dst},
    )


def rename_file(rng: random.Random) -> Instance:
    """Rename a file (its content unchanged, the old name gone)."""
    old = file_name(rng, ext=rng.choice(("txt", "md", "log")))
    new = file_name(rng, ext=rng.choice(("txt", "md", "log")), avoid=(old,))
    text = text_of(word_lines(rng, rng.randint(2, 5), width=3))
    return Instance(
        instruction=f"Rename {old} in the home folder to {new}.",
        config=[write_files({f"{HOME}/{old}": text}), *open_terminal()],
        evaluator=evaluator(
            [text_equals(f"{HOME}/{new}", text, "renamed"), path_state(f"{HOME}/{old}", "absent")]
        ),
        solution=[type_command(f"mv ~/{old} ~/{new}")],
        params={"old": old, "new": new},
    )


def delete_file(rng: random.Random) -> Instance:
    """Delete one named file from a folder of several."""
    folder = folder_name(rng)
    names: list[str] = []
    for _ in range(rng.randint(3, 4)):
        names.append(file_name(rng, ext=rng.choice(("txt", "md", "log")), avoid=tuple(names)))
    victim = rng.choice(names)
    kept = [n for n in names if n != victim]
    files = {f"{HOME}/{folder}/{n}": text_of(word_lines(rng, 2)) for n in names}
    return Instance(
        instruction=(
            f"Delete the file {victim} from the folder {folder} in the home folder, "
            "keeping the other files."
        ),
        config=[write_files(files), *open_terminal()],
        evaluator=evaluator([listing_is(f"{HOME}/{folder}", kept, [victim])]),
        solution=[type_command(f"rm ~/{folder}/{victim}")],
        params={"file": victim, "folder": folder},
    )


def count_lines(rng: random.Random) -> Instance:
    """Write the number of lines of a file into another file."""
    src = file_name(rng, ext=rng.choice(("txt", "log")))
    out = file_name(rng, avoid=(src,))
    n = rng.randint(3, 15)
    return Instance(
        instruction=(
            f"Count the lines of {src} in the home folder and write only that number "
            f"into {out} in the home folder."
        ),
        config=[write_files({f"{HOME}/{src}": text_of(word_lines(rng, n))}), *open_terminal()],
        evaluator=evaluator([text_equals(f"{HOME}/{out}", f"{n}\n", "count")]),
        solution=[type_command(f"wc -l < ~/{src} > ~/{out}")],
        params={"file": src, "out": out},
    )


def replace_word(rng: random.Random) -> Instance:
    """Replace every occurrence of one word with another, in place."""
    name = file_name(rng)
    old, new = rng.sample(WORDS, 2)
    others = tuple(w for w in WORDS if w not in (old, new))
    lines = word_lines(rng, rng.randint(3, 5), others, width=3)
    for i in rng.sample(range(len(lines)), 2):  # the old word in two lines, once or twice
        words = lines[i].split()
        for j in rng.sample(range(len(words)), rng.randint(1, 2)):
            words[j] = old
        lines[i] = " ".join(words)
    text = text_of(lines)
    return Instance(
        instruction=(
            f"In {name} in the home folder, replace every '{old}' with '{new}' "
            "and save the file in place."
        ),
        config=[write_files({f"{HOME}/{name}": text}), *open_terminal()],
        evaluator=evaluator([text_equals(f"{HOME}/{name}", text.replace(old, new), "replaced")]),
        solution=[type_command(f"sed -i 's/{old}/{new}/g' ~/{name}")],
        params={"file": name, "old": old, "new": new},
    )


def sort_lines(rng: random.Random) -> Instance:
    """Sort a file's lines alphabetically into another file."""
    src = file_name(rng)
    out = file_name(rng, avoid=(src,))
    words = rng.sample(WORDS, rng.randint(4, 7))
    while words == sorted(words):
        rng.shuffle(words)
    return Instance(
        instruction=(
            f"Sort the lines of {src} in the home folder alphabetically and write them "
            f"to {out} in the home folder."
        ),
        config=[write_files({f"{HOME}/{src}": text_of(words)}), *open_terminal()],
        evaluator=evaluator([text_equals(f"{HOME}/{out}", text_of(sorted(words)), "sorted")]),
        solution=[type_command(f"sort ~/{src} > ~/{out}")],
        params={"file": src, "out": out},
    )


def grep_lines(rng: random.Random) -> Instance:
    """Keep the lines of a file that contain a given word, in another file."""
    src = file_name(rng, ext="log")
    out = file_name(rng, avoid=(src,))
    word = rng.choice(WORDS)
    others = tuple(w for w in WORDS if w != word)
    lines = word_lines(rng, rng.randint(5, 8), others, width=3)
    hits = sorted(rng.sample(range(len(lines)), rng.randint(2, 3)))
    for i in hits:
        words = lines[i].split()
        words[rng.randrange(len(words))] = word
        lines[i] = " ".join(words)
    return Instance(
        instruction=(
            f"Write every line of {src} in the home folder that contains the word {word} "
            f"into {out} in the home folder."
        ),
        config=[write_files({f"{HOME}/{src}": text_of(lines)}), *open_terminal()],
        evaluator=evaluator(
            [text_equals(f"{HOME}/{out}", text_of([lines[i] for i in hits]), "matches")]
        ),
        solution=[type_command(f"grep {word} ~/{src} > ~/{out}")],
        params={"file": src, "word": word, "out": out},
    )


TERMINAL_FAMILIES = (
    Family("echo_to_file", "terminal", "file name and folder, the word", echo_to_file),
    Family("append_line", "terminal", "file name and lines, the new line", append_line),
    Family("make_folder", "terminal", "folder name and parent", make_folder),
    Family("copy_file", "terminal", "both names, folder, text", copy_file, heldout=True),
    Family("rename_file", "terminal", "both names and extensions, text", rename_file),
    Family("delete_file", "terminal", "folder, 3-4 file names, which goes", delete_file),
    Family("count_lines", "terminal", "both names, the line count", count_lines),
    Family("replace_word", "terminal", "file name, old and new word, text", replace_word),
    Family("sort_lines", "terminal", "both names, 4-7 words and their order", sort_lines),
    Family("grep_lines", "terminal", "both names, the word, which lines hold it", grep_lines),
)
