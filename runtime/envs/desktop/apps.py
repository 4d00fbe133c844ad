"""The desktop apps OSWorld's VM has, by the names its tasks use, and whether this host has them.

A task names its apps several ways: `related_apps`/`snapshot` ("chrome", "vs_code"), the
commands its setup launches (`google-chrome`, `socat`, `code`, `/usr/bin/thunderbird`), and
the files it opens (a `.pptx` opens in Impress). `APPS` maps each to what must be installed
here; `missing_app` says, in a sentence, why an app cannot run on this host.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

__all__ = ["App", "APPS", "app_for_command", "app_for_file", "app_named", "missing_app"]


@dataclass(frozen=True)
class App:
    """One app of OSWorld's VM and what this host needs to run it."""

    name: str  # OSWorld's name (`related_apps`, `snapshot`)
    executables: tuple[str, ...]  # all must be on PATH (or absolute and present)
    packages: tuple[str, ...] = ()  # Debian packages that provide them
    commands: tuple[str, ...] = ()  # command names a task's setup launches it by
    extensions: tuple[str, ...] = ()  # files of these types open in it
    aliases: tuple[str, ...] = field(default=())  # other spellings in `related_apps`


APPS: dict[str, App] = {
    app.name: app
    for app in (
        App("os", ("bash",), aliases=("OS", "terminal", "ubuntu")),
        App("libreoffice_calc", ("soffice",), ("libreoffice-calc",), ("libreoffice",),
            (".xlsx", ".xls", ".ods", ".csv"), ("libreoffice calc", "calc", "libreoffice")),
        App("libreoffice_writer", ("soffice",), ("libreoffice-writer",), (),
            (".docx", ".doc", ".odt", ".rtf"), ("writer", "Writer")),
        App("libreoffice_impress", ("soffice",), ("libreoffice-impress",), (),
            (".pptx", ".ppt", ".odp"), ("impress",)),
        App("chrome", ("chromium", "socat"), ("chromium", "socat"), ("google-chrome", "socat"),
            (".html", ".htm"), ("Chrome", "browser", "google-chrome")),
        App("gimp", ("gimp",), ("gimp",), ("gimp",), (".xcf",), ("image",)),
        App("vlc", ("vlc",), ("vlc",), ("vlc",), (".mp4", ".mp3", ".wav", ".avi", ".mkv"),
            ("ubuntu_media_player",)),
        App("thunderbird", ("thunderbird",), ("thunderbird",), ("thunderbird",
            "/usr/bin/thunderbird"), (".eml",)),
        App("nautilus", ("nautilus",), ("nautilus",), ("nautilus",)),
        App("vs_code", ("code",), (), ("code",), (".py",), ("vscode",)),
        App("pdf", ("evince",), ("evince",), (), (".pdf",)),
    )
}  # fmt: skip

_BY_NAME = {alias.lower(): app for app in APPS.values() for alias in (app.name, *app.aliases)}
_BY_COMMAND = {cmd: app for app in APPS.values() for cmd in app.commands}
_BY_EXTENSION = {ext: app for app in APPS.values() for ext in app.extensions}


def app_named(name: str) -> App | None:
    """The app a `related_apps`/`snapshot` name means, or None if it names no app we know."""
    return _BY_NAME.get(name.strip().lower())


def app_for_command(command: str) -> App | None:
    """The app a launched command belongs to (`google-chrome`, `/usr/bin/thunderbird`), if any."""
    return _BY_COMMAND.get(command) or _BY_COMMAND.get(os.path.basename(command))


def app_for_file(path: str) -> App | None:
    """The app a file of this type opens in on OSWorld's VM, if any."""
    return _BY_EXTENSION.get(os.path.splitext(path)[1].lower())


def missing_app(app: App) -> str | None:
    """Why `app` cannot run on this host (a sentence naming what is missing), or None if it can."""
    absent = [e for e in app.executables if not _installed(e)]
    if not absent:
        return None
    hint = f" (Debian: {' '.join(app.packages)})" if app.packages else ""
    return f"{app.name} is not installed here: {', '.join(absent)} not found{hint}"


def _installed(executable: str) -> bool:
    if os.path.isabs(executable):
        return os.access(executable, os.X_OK)
    return shutil.which(executable) is not None
