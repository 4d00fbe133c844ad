"""ScienceBoard's additions to the desktop server (scienceboard_routes.py) on a real desktop:
text files read and written with the agent's rights, a shallower accessibility tree, and a
LaTeX project compiled inside the desktop."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from runtime.envs.desktop.apps import APPS, missing_app
from runtime.envs.desktop.controller import DesktopController
from runtime.envs.desktop.lifecycle import Desktop
from runtime.errors import DesktopError

pytestmark = pytest.mark.desktop

DOC = "\\documentclass{article}\n\\begin{document}\nHello \\cite{k}.\n\\bibliographystyle{plain}\n\\bibliography{refs}\n\\end{document}\n"  # noqa: E501
BIB = "@misc{k, title={A title}, author={An Author}, year={2024}}\n"


async def test_text_files_written_appended_and_read(ctl: DesktopController, desktop: Desktop):
    await ctl.write_text("/home/user/atelier/notes/a.txt", "é one\r\n")
    await ctl.write_text("~/atelier/notes/a.txt", "two\n", append=True)
    assert (desktop.home / "atelier/notes/a.txt").read_bytes() == "é one\r\ntwo\n".encode()
    assert await ctl.read_text("/home/user/atelier/notes/a.txt") == "é one\ntwo\n"  # text mode
    with pytest.raises(DesktopError, match="404"):
        await ctl.read_text("/home/user/atelier/none.txt")
    with pytest.raises(DesktopError, match="404"):
        await ctl.read_text("/etc/shadow")  # the agent may not read it, so neither may /read


async def test_opt_sets_the_depth_of_accessibility_trees(ctl: DesktopController):
    try:
        await ctl.set_a11y_depth(2)
        shallow = ET.fromstring(await ctl.accessibility_tree())
        assert all(len(app) == 0 for app in shallow)  # desktop-frame > application, no deeper
        with pytest.raises(DesktopError, match="depth"):
            await ctl.set_a11y_depth(0)
    finally:
        await ctl.set_a11y_depth(50)


async def test_tex_check_compiles_in_the_desktop_with_bibtex(ctl: DesktopController):
    assert missing_app(APPS["texstudio"]) is None
    await ctl.write_text("/home/user/tex/main.tex", DOC)
    await ctl.write_text("/home/user/tex/refs.bib", BIB)
    assert await ctl.tex_check("/home/user/tex", "main", bibtex=True) == {"pass": True}
    assert "\\bibitem{k}" in await ctl.read_text("/home/user/tex/main.bbl")
    await ctl.write_text("/home/user/tex/main.tex", DOC.replace("Hello", "\\undefinedmacro"))
    failed = await ctl.tex_check("/home/user/tex", "main")
    assert failed["pass"] is False and "Undefined control sequence" in failed["log"]
