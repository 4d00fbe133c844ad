"""Per-app knowledge documents: what the proposer is told about an app on our desktops.

Each app has a short markdown page (what is installed, what makes a good task, how to set
it up and verify it, solution actions) and the setup that puts the desktop in the app's
starting state for the proposer's live observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from producers.verigen.candidate import APPS
from runtime.errors import ConfigError

__all__ = ["AppKnowledge", "app_knowledge"]

_HERE = Path(__file__).resolve().parent


def _wait_for_class(name: str) -> dict[str, Any]:
    # `launch` returns at once; the observation must see the window, so wait for it.
    script = (
        f"for i in $(seq 1 300); do xdotool search --onlyvisible --class {name} "
        ">/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
    )
    return {"type": "execute", "parameters": {"command": script, "shell": True}}


def _launch(command: list[str], window_class: str, settle: float) -> list[dict[str, Any]]:
    return [
        {"type": "launch", "parameters": {"command": command}},
        _wait_for_class(window_class),
        {"type": "sleep", "parameters": {"seconds": settle}},
    ]


_OBSERVATION_SETUP = {
    "terminal": _launch(["xterm"], "xterm", 0.5),
    "mousepad": _launch(["mousepad"], "mousepad", 0.5),
    "calc": _launch(["soffice", "--calc", "--norestore", "--nologo"], "libreoffice", 2.0),
    "writer": _launch(["soffice", "--writer", "--norestore", "--nologo"], "libreoffice", 2.0),
    "texstudio": _launch(["texstudio"], "texstudio", 2.0),
    "vscode": _launch(["code"], "Code", 3.0),
}
_RELATED = {
    "terminal": ["terminal"],
    "mousepad": ["mousepad"],
    "calc": ["libreoffice_calc"],
    "writer": ["libreoffice_writer"],
    "texstudio": ["texstudio"],
    "vscode": ["vs_code"],
}


@dataclass(frozen=True)
class AppKnowledge:
    """One app: its knowledge document and the setup of its starting state."""

    app: str
    document: str  # markdown, shown to the proposer
    observation_setup: list[dict[str, Any]]  # OSWorld setup steps before the live observation
    related_apps: list[str]  # OSWorld's `related_apps` for its tasks


def app_knowledge(app: str) -> AppKnowledge:
    """The knowledge of one app; ConfigError for an app without a document."""
    if app not in APPS:
        raise ConfigError(f"no knowledge document for app {app!r}; known: {', '.join(APPS)}")
    document = (_HERE / f"{app}.md").read_text(encoding="utf-8")
    return AppKnowledge(app, document, list(_OBSERVATION_SETUP[app]), list(_RELATED[app]))
