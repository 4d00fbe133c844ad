"""compare_image_text with the real OCR (Tesseract): terminal pictures drawn with PIL, and
OSWorld's own task (multi_apps 02ce9a50, "run `ls` in /home/user and save a screenshot as
ls.png on the Desktop"), unchanged, on a real desktop.

The rule is the task's own, `" Ls"`: EasyOCR's spelling of `ls` on OSWorld's VM. Tesseract
reads the `ls` drawn here as `ls` (in some terminal fonts and sizes as `1s`); both fold to
the rule's `" ls"`.
"""

from __future__ import annotations

import io
from pathlib import Path

import docx
import pytest
from PIL import Image, ImageDraw, ImageFont

from runtime.envs.tasks.evaluate import evaluate
from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.ocr import ocr_fold, ocr_unavailable, read_image_text
from runtime.envs.tasks.model import load_task
from runtime.envs.tasks.runner import play
from runtime.envs.tasks.setup import run_setup
from runtime.envs.tasks.support import unsupported_parts
from runtime.errors import TaskError
from tests.desktop_shell import until_shell
from tests.osworld import DATA, osworld_json, seeded_task

TASK = "multi_apps/02ce9a50-7af2-47ed-8596-af0c230501f8"
RULE = osworld_json(TASK)["evaluator"]["expected"]["rules"]  # {"type": "text", "text": " Ls"}
LISTING = "Desktop  Documents  Downloads  Music  Pictures  Public  snap  Templates  Videos"


def _terminal(path: Path, command: str, output: str, background: str, text: str) -> str:
    """A terminal as a screenshot shows it: a prompt, a command, its output, a new prompt."""
    font = ImageFont.truetype("DejaVuSansMono.ttf", 15)
    image = Image.new("RGB", (900, 120), background)
    draw = ImageDraw.Draw(image)
    prompt = "user@user-virtual-machine:~$ "
    for i, (left, right) in enumerate([(prompt, command), ("", output), (prompt, "")]):
        y = 8 + 21 * i
        draw.text((8, y), left, font=font, fill="#8ae234")
        draw.text((8 + draw.textlength(left, font=font), y), right, font=font, fill=text)
    image.save(path)
    return str(path)


def test_the_rule_is_the_tasks_own():
    assert RULE == {"type": "text", "text": " Ls"}
    assert ocr_fold(" Ls") == ocr_fold(" 1s") == ocr_fold(" ls") == " ls"
    assert ocr_fold(" Is") != " ls"  # a capital I is not folded: prose says "Is" often


def test_the_command_read_in_a_terminal_scores_1(tmp_path):
    dark = _terminal(tmp_path / "dark.png", "ls", LISTING, "#300a24", "white")
    light = _terminal(tmp_path / "light.png", "ls", LISTING, "white", "black")
    assert "Documents" in read_image_text(dark)
    assert METRICS["compare_image_text"](dark, RULE) == 1.0
    assert METRICS["compare_image_text"](light, RULE) == 1.0


def test_another_command_or_no_picture_scores_0(tmp_path):
    pwd = _terminal(tmp_path / "pwd.png", "pwd", "/home/user", "#300a24", "white")
    prose = _terminal(tmp_path / "cat.png", "cat notes", "Is this the list?", "white", "black")
    not_an_image = tmp_path / "ls.png"
    not_an_image.write_text("ls")
    assert "pwd" in read_image_text(pwd)
    assert METRICS["compare_image_text"](pwd, RULE) == 0.0
    assert METRICS["compare_image_text"](prose, RULE) == 0.0
    assert METRICS["compare_image_text"](str(not_an_image), RULE) == 0.0
    assert METRICS["compare_image_text"](None, RULE) == 0.0
    assert METRICS["compare_image_text"](str(tmp_path / "missing.png"), RULE) == 0.0


def test_an_unknown_rule_or_no_tesseract_is_a_task_error(tmp_path, monkeypatch):
    dark = _terminal(tmp_path / "dark.png", "ls", LISTING, "#300a24", "white")
    with pytest.raises(TaskError, match="rule type"):
        METRICS["compare_image_text"](dark, {"type": "regex", "text": "ls"})
    assert ocr_unavailable() is None
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "tesseract-ocr tesseract-ocr-eng" in (ocr_unavailable() or "")
    with pytest.raises(TaskError, match="Tesseract"):
        METRICS["compare_image_text"](dark, RULE)


def test_the_osworld_task_is_supported():
    assert unsupported_parts(load_task(DATA / f"{TASK}.json")) == []


def _tutorial() -> bytes:
    """A stand-in for the task's tutorial (its Google Drive file cannot be fetched here)."""
    document = docx.Document()
    document.add_heading("Top 10 Linux commands for newbies", 0)
    for text in [
        "The terminal is where Linux shows its power. Ten commands for your first week.",
        "1. pwd prints the folder you are in.",
        "2. cd changes the folder, mkdir makes one.",
    ]:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# The agent's way to save the screen, as a script on the desktop: typed in full, its Python
# line (and its ~/Desktop/ls.png) would sit on the screen next to the command being scored.
_GRAB = """#!/bin/sh
python -c "from PIL import ImageGrab; ImageGrab.grab().save('/home/user/Desktop/.s.png')"
mv /home/user/Desktop/.s.png /home/user/Desktop/ls.png
"""


@pytest.mark.desktop
async def test_osworld_task_on_a_desktop_untouched_wrong_command_and_solved(task_desktop, tmp_path):
    """Untouched (no ls.png) 0.0; a screenshot after `pwd` 0.0; after `ls` 1.0. The agent
    saves the screen from a maximised terminal with PIL (pyautogui.screenshot() needs
    gnome-screenshot or scrot, which the desktop does not have); a terminal left small over
    the open document is read as one block with the document's text around it."""
    task = seeded_task(TASK, {"top-10-linux-commands-for-newbies.docx": _tutorial()})
    shot = "/home/user/Desktop/ls.png"
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        await run_setup(controller, task)
        untouched = await evaluate(controller, task, [])
        await controller.upload_file("/tmp/grab", _GRAB.encode())
        await controller.execute("chmod +x /tmp/grab", shell=True)
        played, errors = await play(controller, [{"action": "key", "text": "ctrl+alt+t"}])
        assert await until_shell(controller, "wmctrl -lx | grep -qi xterm"), "no xterm window"
        await controller.execute(
            "wmctrl -x -r xterm -b add,maximized_vert,maximized_horz", shell=True
        )
        scores, read = [], []
        for command in ("pwd", "ls"):
            await controller.execute(f"rm -f {shot}", shell=True)
            typed = [{"action": "type", "text": f"{command}\n/tmp/grab\n"}]
            steps, more = await play(controller, typed)
            played, errors = played + steps, errors + more
            assert await until_shell(controller, f"test -s {shot}"), f"no {shot}"
            scores.append(await evaluate(controller, task, played))
            kept = tmp_path / f"{command}.png"  # what was scored, read again for the message
            kept.write_bytes(await controller.get_file(shot) or b"")
            read.append(read_image_text(kept))
    assert errors == []
    assert untouched.score == 0.0, untouched
    assert [s.score for s in scores] == [0.0, 1.0], (scores, read)
