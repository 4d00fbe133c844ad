"""The desktop's `code` without a desktop: the address a path opens at, the wrapper it runs
as, the folders a home gets, and what the app table says when code-server is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

from runtime.envs.desktop import apps, vscode


def _query(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def test_window_url_opens_folders_workspaces_and_files(tmp_path: Path) -> None:
    assert vscode.window_url([]) == f"http://127.0.0.1:{vscode.PORT}/"
    folder, other = tmp_path / "project", tmp_path / "other"
    folder.mkdir()
    other.mkdir()
    assert _query(vscode.window_url([str(folder), str(other)])) == {"folder": str(folder)}
    workspace = str(tmp_path / "p.code-workspace")
    assert _query(vscode.window_url([workspace])) == {"workspace": workspace}
    query = _query(vscode.window_url([str(tmp_path / "a.py")], port=9))
    assert json.loads(query["payload"]) == [
        ["openFile", f"vscode-remote://127.0.0.1:9{tmp_path}/a.py"]
    ]


def test_wrapper_runs_this_file_with_node_and_code_server(tmp_path: Path) -> None:
    vscode.write_wrappers(tmp_path)
    code = tmp_path / "code"
    assert os.access(code, os.X_OK)
    text = code.read_text()
    assert text.startswith("#!/bin/sh\nexec /usr/bin/python3 -I ")
    assert vscode.__file__ in text and str(vscode.node_binary()) in text
    assert str(vscode.code_server_dir()) in text and text.endswith('"$@"\n')


def test_seed_profile_makes_the_folders_getters_read(tmp_path: Path) -> None:
    vscode.seed_profile(tmp_path)
    assert (tmp_path / ".config/Code/User").is_dir()
    assert not (tmp_path / ".vscode").exists()  # the home's top level is the VM user's skeleton
    machine = json.loads((tmp_path / ".config/Code/Machine/settings.json").read_text())
    assert machine["chat.disableAIFeatures"] is True
    assert not (tmp_path / ".config/Code/User/settings.json").exists()  # the user's: the task's


def test_missing_code_server_is_named_with_its_installer(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_CODE_SERVER": str(tmp_path / "none")}
    probe = "from runtime.envs.desktop.apps import APPS, missing_app; print(missing_app(APPS['vs_code']))"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f"{tmp_path}/none/out/node/entry.js not found" in out
    assert "infra/install.sh" in out and "code-server from npm" in out
    assert apps.app_for_command("code") is apps.APPS["vs_code"]
    assert apps.app_for_file("/home/user/p.code-workspace") is apps.APPS["vs_code"]
