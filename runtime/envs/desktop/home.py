"""The home folder a desktop presents as /home/user, and restoring it between episodes.

A restored home is what the user's home on OSWorld's VM image looks like: the folders of
a fresh Ubuntu account, and the apps' settings as the image has them, past their first
run, so an OSWorld task's keystrokes reach the document and its checks read the same
files: LibreOffice (no Tip of the Day, no what's-new bar, no "Keep current format"
question on saving a non-ODF file, no autosave), VLC (no privacy question; the HTTP
interface on with the password OSWorld's getters use), GIMP (an image's colour profile
kept, without asking), TeXstudio (no session restored, no LaTeX-configuration check at
start, no LanguageTool server started or asked), and the default video player (GNOME
Videos, as on Ubuntu; an OSWorld task asks to make VLC the default). Thunderbird's
first-run defaults are the desktop's system preferences instead (init.py), because tasks
unpack profiles of their own; the browser's profile is past its first run too (chrome.py),
and VS Code's user and extensions folders exist (vscode.py).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from runtime.envs.desktop import chrome, vscode

__all__ = [
    "LIBREOFFICE_PROFILE",
    "SKELETON_DIRS",
    "VLC_HTTP_PASSWORD",
    "VLC_HTTP_PORT",
    "libreoffice_registry",
    "restore_home",
]

# The folders of a fresh Ubuntu account, which OSWorld tasks assume exist.
SKELETON_DIRS = (
    "Desktop",
    "Documents",
    "Downloads",
    "Music",
    "Pictures",
    "Public",
    "Templates",
    "Videos",
    ".config",
    ".local/share",
    ".cache",
)
# LibreOffice's default user profile (what `soffice` uses without -env:UserInstallation).
LIBREOFFICE_PROFILE = ".config/libreoffice/4/user"
# VLC's HTTP interface as OSWorld's VM has it (its getters read status.xml on 8080 with
# this password); the first-run privacy question answered.
VLC_HTTP_PASSWORD = "password"
VLC_HTTP_PORT = 8080  # VLC's default, inside the desktop's own network
_SETTINGS = {
    ".config/vlc/vlcrc": (
        "[qt]\nqt-privacy-ask=0\n\n"
        f"[lua]\nhttp-password={VLC_HTTP_PASSWORD}\n\n"
        "[core]\nextraintf=http\n"
    ),
    ".config/GIMP/2.10/gimprc": "(color-profile-policy keep)\n",
    # TeXstudio takes the rest from its defaults and writes them all back on exit. Its editor
    # settings stay as shipped (ScienceBoard's VM sets none); Debian's build has autosave and
    # update checks off already, written down here so that another build keeps them off.
    ".config/texstudio/texstudio.ini": (
        "[texmaker]\n"
        "Files\\RestoreSession=false\n"  # open only the files a task names
        "Files\\Autosave=0\n"
        "Update\\AutoCheck=false\n"
        "Startup\\CheckLatexConfiguration=false\n"  # a dialog if it finds no pdflatex
        # Grammar: LanguageTool (a Java server on localhost:8081) neither started nor asked;
        # the built-in word checks stay.
        "Grammar\\Language%20Tool%20Autorun=false\n"
        "Grammar\\Language%20Tool%20URL=\n"
    ),
    ".config/mimeapps.list": "[Default Applications]\n"
    + "".join(
        f"video/{kind}=org.gnome.Totem.desktop\n"
        for kind in ("mp4", "x-matroska", "webm", "x-msvideo", "quicktime", "mpeg", "ogg")
    ),
}

_REGISTRY = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" \
xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
{items}
</oor:items>
"""
_ITEM = '<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>'


def libreoffice_registry(version: str) -> str:
    """The registrymodifications.xcu of a profile past its first run, for LibreOffice `version`."""
    settings = [
        ("/org.openoffice.Setup/Office", "ooSetupInstCompleted", "true"),
        ("/org.openoffice.Office.Common/Misc", "FirstRun", "false"),
        ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "false"),
        # What's-new shows when the running version is newer than the profile's last one.
        ("/org.openoffice.Setup/Product", "ooSetupLastVersion", version),
        ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "false"),
        ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "false"),
    ]
    items = "\n".join(_ITEM.format(path=p, name=n, value=v) for p, n, v in settings)
    return _REGISTRY.format(items=items)


@functools.cache
def _libreoffice_version() -> str:
    """The installed LibreOffice's major.minor ("7.4"), as its profile records it."""
    try:
        found = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "libreoffice-core"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        found = ""
    upstream = found.split(":")[-1].split("-")[0].split(".")
    if len(upstream) >= 2 and all(part.isdigit() for part in upstream[:2]):
        return ".".join(upstream[:2])
    return "99.9"  # unknown: newer than any release, so no what's-new bar either


def restore_home(home: Path) -> None:
    """Empty `home` and recreate the skeleton, keeping the folder itself (a mount point)."""
    home.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(home):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
    for name in SKELETON_DIRS:
        (home / name).mkdir(parents=True, exist_ok=True)
    profile = home / LIBREOFFICE_PROFILE
    profile.mkdir(parents=True)
    (profile / "registrymodifications.xcu").write_text(libreoffice_registry(_libreoffice_version()))
    for name, text in _SETTINGS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    chrome.seed_profile(home)
    vscode.seed_profile(home)
