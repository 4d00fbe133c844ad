"""The app registry: which app a name, a command line or a file means, and exactly what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.envs.desktop.apps import (
    APPS,
    App,
    app_for_command,
    app_for_file,
    app_named,
    apps_in_command,
    apps_of_task,
    missing_app,
    opener_for,
)

DATA = Path(__file__).parents[3] / "data/osworld"


@pytest.mark.parametrize(
    ("path", "app"),
    [
        ("/home/user/Desktop/186_3.pptx", "libreoffice_impress"),
        ("/home/user/a.PPT", "libreoffice_impress"),
        ("/home/user/Desktop/Bubble_Sort_tutorial.docx", "libreoffice_writer"),
        ("/home/user/Desktop/script.odt", "libreoffice_writer"),
        ("/home/user/EntireSummerSales.xlsx", "libreoffice_calc"),
        ("/home/user/data.csv", "libreoffice_calc"),
        ("/home/user/video.mp4", "vlc"),
        ("/home/user/Desktop/Colorful-Flowers.mp3", "vlc"),
        ("/home/user/Desktop/review_template.pdf", "pdf"),
        ("/home/user/Desktop/berries.png", "image"),
        ("/home/user/Desktop/orange_background.xcf", "gimp"),
        ("/home/user/Desktop/page.html", "chrome"),
        ("/home/user/Desktop/llm_answers.json", "text_editor"),
        ("/home/user/mail.eml", "thunderbird"),
    ],
)
def test_a_file_opens_in_the_app_its_type_belongs_to(path: str, app: str) -> None:
    assert app_for_file(path).name == app
    assert opener_for(path, is_folder=False).app.name == app


def test_a_folder_opens_in_the_file_manager_and_anything_else_as_text() -> None:
    folder = opener_for("/home/user/Documents/Fundings/ecs", is_folder=True)
    assert folder.app.name == "nautilus" and folder.argv[-1] == "/home/user/Documents/Fundings/ecs"
    assert folder.title == "ecs"
    other = opener_for("/home/user/notes.weird", is_folder=False)
    assert other.app.name == "text_editor" and other.argv == ["mousepad", "/home/user/notes.weird"]
    impress = opener_for("/home/user/Desktop/talk.pptx", is_folder=False)
    assert impress.argv == ["soffice", "--norestore", "--impress", "/home/user/Desktop/talk.pptx"]
    assert impress.title == "talk" and impress.window_class == "libreoffice-impress"


def test_names_commands_and_command_lines_from_osworlds_tasks() -> None:
    assert app_named("libreoffice calc") is APPS["libreoffice_calc"]
    assert app_named("vscode") is app_named("vs_code") is APPS["vs_code"]
    assert app_named("ubuntu_media_player") is APPS["vlc"]
    assert app_named("image") is APPS["image"] and app_named("pdf") is APPS["pdf"]
    assert app_named("no such app") is None
    assert app_for_command("/usr/bin/thunderbird") is APPS["thunderbird"]
    names = [
        ("google-chrome --remote-debugging-port=1337", ["chrome"]),
        (["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"], ["chrome"]),
        ("libreoffice --impress", ["libreoffice_impress"]),
        (["libreoffice", "--convert-to", "csv:Text", "--outdir", "/h", "/h/a.xls"], ["libreoffice_calc"]),
        ("soffice --headless --convert-to pdf report.docx", ["libreoffice_writer"]),
        (["/bin/bash", "-c", "cd ~/Downloads && unzip -q x.zip && code --install-extension e.vsix"],
         ["vs_code"]),
        ("echo password | sudo -S apt install jq -y && FOO=1 nohup vlc --start-time=10 a.mp3 &",
         ["vlc"]),
        ('/usr/bin/thunderbird -compose "to=a@b.c,subject=\'Bill\'"', ["thunderbird"]),
        ("export X=1\ngnome-terminal --maximize --working-directory=/home/user", ["os"]),
        ("pkill vlc", []),
        ("echo 'unbalanced", []),
    ]  # fmt: skip
    for command, apps in names:
        assert [a.name for a in apps_in_command(command)] == apps, command


def test_the_apps_a_task_needs() -> None:
    os_task = json.loads((DATA / "os/7688b85f-87a4-4e4a-b2f8-f3d6c3f29b82.json").read_text())
    assert [a.name for a in apps_of_task(os_task)] == ["os"]
    # Shaped as OSWorld's vlc task 386dbd0e: a song in VLC, a lecture opened beside it.
    vlc_task = {
        "related_apps": ["vlc"],
        "config": [
            {"type": "download", "parameters": {"files": []}},
            {"type": "launch", "parameters": {"command": ["vlc", "--start-time=10", "a.mp3"]}},
            {"type": "open", "parameters": {"path": "/home/user/Desktop/lecture.pdf"}},
            {"type": "open", "parameters": {"path": "/home/user/Documents/Fundings/ecs"}},
        ],
        "evaluator": {"postconfig": [{"type": "launch", "parameters": {"command": "code"}}]},
    }
    assert [a.name for a in apps_of_task(vlc_task)] == ["vlc", "pdf", "nautilus", "vs_code"]
    assert apps_of_task({"related_apps": ["nonesuch"], "config": ["not a step"]}) == []


def test_missing_app_names_exactly_what_is_missing(tmp_path: Path) -> None:
    present = tmp_path / "calc.xcd"
    present.write_text("")
    calc_only = App("libreoffice_calc", ("sh",), ("libreoffice-calc",), components=(str(present),))
    assert missing_app(calc_only) is None
    # soffice alone is not Impress: without its component the app is missing, by name.
    impress = App(
        "libreoffice_impress",
        ("sh",),
        ("libreoffice-impress",),
        components=(str(tmp_path / "impress.xcd"),),
    )
    why = missing_app(impress)
    assert why is not None and "impress.xcd not found" in why and "libreoffice-impress" in why
    nothing = App("gimp", ("no-such-gimp-here",), ("gimp",))
    assert missing_app(nothing) == (
        "gimp is not installed here: no-such-gimp-here not found (Debian: gimp)"
    )
    code = App("vs_code", ("no-such-code-here",), unavailable="no registry ships it")
    assert missing_app(code) == "vs_code cannot be had here: no registry ships it"


def test_every_related_app_osworld_names_is_known() -> None:
    # Every `related_apps` name in OSWorld's evaluation_examples (369 tasks).
    names = (
        "os chrome libreoffice_calc libreoffice_impress libreoffice_writer gimp vscode "
        "thunderbird vlc terminal vs_code pdf image writer calc msoffice_excel Writer "
        "browser ubuntu_media_player libreoffice OS Chrome picard"
    ).split() + ["libreoffice calc"]
    assert [n for n in names if app_named(n) is None] == []


def test_scienceboards_apps_by_type_and_by_the_commands_its_tasks_launch() -> None:
    types = "TeXstudio GrassGIS KAlgebra ChimeraX Celestia Lean".split()
    assert [app_named(t).name for t in types] == [
        "texstudio", "grass", "kalgebra", "chimerax", "celestia", "lean"
    ]  # fmt: skip
    lines = [
        ("texstudio /home/user/atelier/refs.bib /home/user/atelier/main.tex", ["texstudio"]),
        ("LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib /app/bin/kalgebra «PORTLIKE»", ["kalgebra"]),
        ("LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib /app/bin/celestia-qt6 «PORTLIKE»",
         ["celestia"]),
        (["chimerax", "--cmd", "remotecontrol rest start json true port «PORTLIKE»"], ["chimerax"]),
        ('gnome-terminal -- /bin/bash -ic "FLASK_PORT=8000 grass --gui /home/user/grassdata/w/PERMANENT"',
         ["os", "grass"]),
        ("bash -c", []),
    ]  # fmt: skip
    for command, apps in lines:
        assert [a.name for a in apps_in_command(command)] == apps, command
    # They claim no file types: a .tex or .bib opens in the text editor, as on OSWorld's VM.
    assert app_for_file("/home/user/Documents/Novels/chapter.tex") is None
    assert (
        opener_for("/home/user/Desktop/references.bib", is_folder=False).app.name == "text_editor"
    )
    for name in ("chimerax", "celestia", "lean"):
        why = missing_app(APPS[name])
        assert why is not None and why.startswith(f"{name} cannot be had here: ")
