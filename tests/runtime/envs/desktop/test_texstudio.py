"""TeXstudio on a real desktop, started as ScienceBoard's tasks start it.

A task writes /home/user/atelier/main.tex, runs `texstudio /home/user/atelier/main.tex`,
and scores the saved file's whole text and a pdflatex build of it. So: the window comes up
with no dialog in front of the editor, keystrokes reach the document, ctrl+s writes the
file changing nothing but the edit (line endings, trailing newline and whitespace, tabs,
UTF-8 kept), and pdflatex builds a document in the desktop.
"""

from __future__ import annotations

import asyncio

import pytest

from runtime.envs.desktop.apps import APPS, missing_app
from runtime.envs.desktop.controller import DesktopController

pytestmark = pytest.mark.desktop


@pytest.fixture(autouse=True)
def _texstudio_here() -> None:
    assert missing_app(APPS["texstudio"]) is None, missing_app(APPS["texstudio"])


ATELIER = "/home/user/atelier"
# (file, its text, the text after typing "Edited " at the start of line 3 and saving)
DOCUMENTS = (
    (
        "main.tex",
        "\\documentclass{article}\n\\usepackage{amssymb}\n$\\lambda$ λ-cube.  \n"
        "\tTabbed.\n\\begin{document}\nHello.\n\\end{document}\n",
        "\\documentclass{article}\n\\usepackage{amssymb}\nEdited $\\lambda$ λ-cube.  \n"
        "\tTabbed.\n\\begin{document}\nHello.\n\\end{document}\n",
    ),
    (
        "crlf.tex",
        "\\documentclass{article}\r\n\\begin{document}\r\nHello.\r\n\\end{document}",
        "\\documentclass{article}\r\n\\begin{document}\r\nEdited Hello.\r\n\\end{document}",
    ),
)


async def _file_becomes(ctl: DesktopController, path: str, text: str, timeout: float) -> bytes:
    """The file's bytes once they equal `text` (UTF-8), or as they are after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        data = await ctl.get_file(path) or b""
        if data == text.encode() or asyncio.get_running_loop().time() > deadline:
            return data
        await asyncio.sleep(0.2)


async def test_an_edit_saved_in_texstudio_changes_only_the_edit(
    desktop, ctl: DesktopController, wait_window
) -> None:
    assert (
        "Language%20Tool%20URL=\n" in (desktop.home / ".config/texstudio/texstudio.ini").read_text()
    )
    await ctl.execute(["mkdir", "-p", ATELIER])
    for name, before, after in DOCUMENTS:
        path = f"{ATELIER}/{name}"
        await ctl.upload_file(path, before.encode())
        await ctl.launch(f"texstudio {path}", shell=True)  # as the tasks launch it
        listing = await wait_window(ctl, f"{path} - TeXstudio", timeout=60)
        assert len(listing.splitlines()) == 1, listing  # no dialog beside it
        await asyncio.sleep(1.0)  # the editor takes the focus after the window maps
        for action in (
            {"action": "key", "text": "ctrl+Home"},
            {"action": "key", "text": "Down"},
            {"action": "key", "text": "Down"},
            {"action": "type", "text": "Edited "},
            {"action": "key", "text": "ctrl+s"},
        ):
            await ctl.step(action)
        assert await _file_becomes(ctl, path, after, timeout=10) == after.encode()
        await ctl.execute(["pkill", "-x", "texstudio"])
        await asyncio.sleep(0.5)
    listed = (await ctl.execute(["ls", "-A", ATELIER]))["output"].split()
    assert sorted(listed) == ["crlf.tex", "main.tex"]  # no backup or autosave files beside


async def test_pdflatex_builds_a_document_in_the_desktop(ctl: DesktopController) -> None:
    text = (
        "\\documentclass[11pt,a4paper]{article}\n\\usepackage[utf8]{inputenc}\n"
        "\\usepackage[english]{babel}\n\\usepackage{amssymb}\n\\usepackage{bussproofs}\n"
        "\\begin{document}\n\\begin{prooftree}\n\\AxiomC{$\\Gamma \\vdash A: s$}\n"
        "\\UnaryInfC{$\\Gamma, x: A \\vdash x: A$}\n\\end{prooftree}\n\\end{document}\n"
    )
    await ctl.execute(["mkdir", "-p", ATELIER])
    await ctl.upload_file(f"{ATELIER}/main.tex", text.encode())
    built = await ctl.execute(
        f"cd {ATELIER} && pdflatex -interaction=nonstopmode -halt-on-error main.tex",
        shell=True,
        timeout=120,
    )
    assert built["returncode"] == 0, built["output"][-2000:]
    assert (await ctl.get_file(f"{ATELIER}/main.pdf") or b"").startswith(b"%PDF")
