"""The home folder a desktop presents as /home/user, and restoring it between episodes.

A restored home is what the user's home on OSWorld's VM image looks like: the folders of
a fresh Ubuntu account, and a LibreOffice profile that has been through its first run
(no Tip of the Day, no what's-new bar, no "Keep current format" question on saving a
non-ODF file, no autosave), so an OSWorld task's keystrokes reach the document, and a
browser profile past its first run (chrome.py).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from runtime.envs.desktop.chrome import seed_profile

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
    seed_profile(home)
