"""Programs a desktop puts first on its PATH, so OSWorld's commands behave as on its VM.

- `sudo` (sudo.py): everything in a desktop already runs as root of its user namespace,
  where the real setuid sudo refuses to run; this one asks for the VM's password as sudo
  does, then runs the command, so `echo password | sudo -S cmd` works as on the VM.
- `xterm`: logs its session to TERMINAL_LOG_DIR (one file per terminal), since xterm has no
  accessibility tree from which OSWorld's `vm_terminal_output` could read the screen.
- `gnome-terminal` (what OSWorld's setups launch) and `x-terminal-emulator` (ctrl+alt+t):
  that logging xterm, with gnome-terminal's `--`, `-x`, `-e`, `--working-directory` and
  `--title` understood.
- `xdg-open` (when xdg-utils is absent): the app OSWorld's image would pick by extension.

LibreOffice needs no wrapper: it finds a running instance through a pipe in /tmp, and
each desktop has its own /tmp, so its default profile (~/.config/libreoffice) is right.
"""

from __future__ import annotations

import shlex
from pathlib import Path

# Read by runtime.envs.tasks.getters (vm_terminal_output); emptied by every reset with the home.
TERMINAL_LOG_DIR = "/home/user/.cache/scalecua-terminal"
# The password of OSWorld's VM user, which its tasks pipe into `sudo -S`.
VM_PASSWORD = "password"
_SUDO = Path(__file__).with_name("sudo.py")

_XTERM = f"""#!/bin/sh
mkdir -p {TERMINAL_LOG_DIR}
exec /usr/bin/xterm -u8 -l -lf "{TERMINAL_LOG_DIR}/$(date +%s%N)-$$.log" "$@"
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


_XDG_OPEN = """#!/bin/sh
case "$1" in
  *.xlsx|*.xls|*.csv|*.ods|*.tsv) exec soffice --norestore --calc "$1" ;;
  *.docx|*.doc|*.odt|*.rtf) exec soffice --norestore --writer "$1" ;;
  *.pptx|*.ppt|*.odp) exec soffice --norestore --impress "$1" ;;
esac
if [ -d "$1" ]; then cd "$1" && exec xterm; fi
exec mousepad "$1"
"""


def write_wrappers(bin_dir: Path) -> None:
    """Write the wrapper programs of a desktop into `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {
        "sudo": f'#!/bin/sh\nexec /usr/bin/python3 -I {shlex.quote(str(_SUDO))} {shlex.quote(VM_PASSWORD)} "$@"\n',
        "xterm": _XTERM,
        "gnome-terminal": _GNOME_TERMINAL,
        "x-terminal-emulator": '#!/bin/sh\nexec xterm "$@"\n',
    }
    if not Path("/usr/bin/xdg-open").exists():
        scripts["xdg-open"] = _XDG_OPEN
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
