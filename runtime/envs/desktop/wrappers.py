"""Programs a desktop puts first on its PATH, so OSWorld's commands behave as on its VM.

- `sudo` (sudo.py): everything in a desktop already runs as root of its user namespace,
  where the real setuid sudo refuses to run; this one asks for the VM's password as sudo
  does, then runs the command, so `echo password | sudo -S cmd` works as on the VM.
- `xterm`: logs its session to TERMINAL_LOG_DIR (one file per terminal), since xterm has no
  accessibility tree from which OSWorld's `vm_terminal_output` could read the screen.
- `gnome-terminal` (what OSWorld's setups launch) and `x-terminal-emulator` (ctrl+alt+t):
  that logging xterm, with gnome-terminal's `--`, `-x`, `-e`, `--working-directory` and
  `--title` understood.
- `xdg-open`: the app a file's type belongs to (apps.py, as the server's /setup/open_file),
  a folder in the file manager, a web address in the browser.
- `vlc`/`cvlc` (vlc_launch.py): VLC's launcher without its refusal to run as root.
- `google-chrome`, `socat`, `pkill`/`pgrep`: the browser's, written by chrome.py (Chromium
  in a network of its own, its profile where OSWorld's tasks read Chrome's).
- `code`: VS Code, written by vscode.py (code-server's workbench in a Chromium app window,
  its settings and extensions where OSWorld's getters read VS Code's).
- `kalgebra`: Debian's KAlgebra with its accessibility on: Qt's bridge always on (no
  desktop session asks for it), and the calculator's log, a QtWebEngine page, exposed too
  (`--force-renderer-accessibility`; the engine's sandbox off, since a desktop runs as root).
  ScienceBoard's checks of KAlgebra read the Variables and Functions panels and that log.

LibreOffice needs no wrapper: it finds a running instance through a pipe in /tmp, and
each desktop has its own /tmp, so its default profile (~/.config/libreoffice) is right.
Nor do GIMP, Thunderbird, Nautilus, Evince and eog: their profiles live in the home.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from runtime.envs.desktop import vscode
from runtime.envs.desktop.apps import APPS, FOLDER, TEXT_EDITOR

__all__ = ["TERMINAL_LOG_DIR", "VM_PASSWORD", "write_wrappers", "xdg_open_script"]

# Read by runtime.envs.tasks.getters (vm_terminal_output); emptied by every reset with the home.
TERMINAL_LOG_DIR = "/home/user/.cache/scalecua-terminal"
# The password of OSWorld's VM user, which its tasks pipe into `sudo -S`.
VM_PASSWORD = "password"
_SUDO = Path(__file__).with_name("sudo.py")
_VLC = Path(__file__).with_name("vlc_launch.py")

_XTERM = f"""#!/bin/sh
mkdir -p {TERMINAL_LOG_DIR}
exec /usr/bin/xterm -u8 -l -lf "{TERMINAL_LOG_DIR}/$(date +%s%N)-$$.log" "$@"
"""

_KALGEBRA = """#!/bin/sh
export QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 QTWEBENGINE_DISABLE_SANDBOX=1
export QTWEBENGINE_CHROMIUM_FLAGS="${QTWEBENGINE_CHROMIUM_FLAGS:+$QTWEBENGINE_CHROMIUM_FLAGS }--force-renderer-accessibility"
exec /usr/bin/kalgebra "$@"
"""

_GNOME_TERMINAL = """#!/bin/sh
title=""
while [ $# -gt 0 ]; do
  case "$1" in
    --|-x|--execute) shift; break ;;
    -e|--command) c="$2"; shift $#; set -- sh -c "$c"; break ;;
    --command=*) c="${1#--command=}"; shift $#; set -- sh -c "$c"; break ;;
    --working-directory=*) cd "${1#--working-directory=}" || exit 1 ;;
    --title=*) title="${1#--title=}" ;;
    -t|--title) title="$2"; shift ;;
  esac
  shift
done
[ -n "$title" ] || title="Terminal"
if [ $# -gt 0 ]; then exec xterm -T "$title" -e "$@"; fi
exec xterm -T "$title"
"""


def xdg_open_script() -> str:
    """The desktop's `xdg-open`: a shell script made from apps.py's table of file types."""
    cases = []
    for app in APPS.values():
        types = "|".join(f".{ext[1:]}" for ext in app.extensions if ext != FOLDER)
        if types and app.opener:
            cases.append(f'  {types}) exec {shlex.join(app.opener)} "$target" ;;')
    folder = shlex.join(APPS["nautilus"].opener)
    return f"""#!/bin/sh
[ $# -ge 1 ] || {{ echo "usage: xdg-open {{ file | URL }}" >&2; exit 1; }}
target="$1"
case "$target" in
  http://*|https://*) exec {shlex.join(APPS["chrome"].opener)} "$target" ;;
  file://*) target="${{target#file://}}" ;;
esac
if [ -d "$target" ]; then
  command -v {APPS["nautilus"].executables[0]} >/dev/null && exec {folder} "$target"
  cd "$target" && exec xterm
fi
case ".$(printf '%s' "${{target##*.}}" | tr 'A-Z' 'a-z')" in
{chr(10).join(cases)}
esac
exec {shlex.join(TEXT_EDITOR.opener)} "$target"
"""


def write_wrappers(bin_dir: Path) -> None:
    """Write the wrapper programs of a desktop into `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {
        "sudo": f'#!/bin/sh\nexec /usr/bin/python3 -I {shlex.quote(str(_SUDO))} {shlex.quote(VM_PASSWORD)} "$@"\n',
        "xterm": _XTERM,
        "gnome-terminal": _GNOME_TERMINAL,
        "x-terminal-emulator": '#!/bin/sh\nexec xterm "$@"\n',
        "xdg-open": xdg_open_script(),
        # No sound card in a desktop: VLC's dummy audio output plays in real time, silently.
        "vlc": f'#!/bin/sh\nexec /usr/bin/python3 -I {shlex.quote(str(_VLC))} --aout=adummy "$@"\n',
        "cvlc": '#!/bin/sh\nexec vlc -I dummy "$@"\n',
        "kalgebra": _KALGEBRA,
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    vscode.write_wrappers(bin_dir)
