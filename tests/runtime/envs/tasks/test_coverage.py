"""`scalecua tasks coverage` on real OSWorld task files (tests/data/osworld, copied unchanged):
every task runnable here or given its precise reasons, per-domain totals, and a file seeded
with `scalecua tasks files add` turning a task runnable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runtime.envs.desktop.apps import APPS, missing_app
from runtime.envs.tasks.coverage import apps_needed, live_web_urls
from runtime.envs.tasks.model import Task, load_task
from runtime.envs.tasks.support import unsupported_parts

SCALECUA = [sys.executable, "-m", "cli"]
OSWORLD = Path(__file__).resolve().parents[3] / "data" / "osworld"
INDEX = OSWORLD / "index_coverage.json"
SHARED = "06fe7178-4491-4589-810f-2e2bc9502122"
TRASH = "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"  # os: recover a poster from the Trash
BLUETOOTH = "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"  # os: infeasible, no setup


def _coverage(env: dict[str, str], out: Path) -> tuple[str, dict]:
    run = subprocess.run([*SCALECUA, "tasks", "coverage", str(OSWORLD), "--index", str(INDEX),
                          "--json", str(out)], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


def _kinds(verdict: dict, kind: str) -> list[dict]:
    return [r for r in verdict["reasons"] if r["kind"] == kind]


def _expected_unknown(key: str) -> list[str]:
    """What the vocabulary lacks today (it grows as metrics land, so it is asked, not listed)."""
    task = load_task(OSWORLD / f"{key}.json")
    return [f"{part} is not implemented here" for part in unsupported_parts(task)]


def _expected_apps(names: list[str]) -> list[str]:
    return [m for m in (missing_app(APPS[n]) for n in names) if m]


def test_coverage_gives_every_task_a_verdict_and_its_reasons(tmp_path: Path) -> None:
    env = {**os.environ, "SCALECUA_FILES": str(tmp_path / "files")}
    table, report = _coverage(env, tmp_path / "coverage.json")
    tasks = {t["key"]: t for t in report["tasks"]}
    assert report["total"] == 7 and len(tasks) == 7
    assert report["supported"] == sum(t["supported"] for t in tasks.values())
    assert report["runnable"] == sum(t["runnable"] for t in tasks.values())
    for key, verdict in tasks.items():
        if key.startswith("vs_code/0000"):
            continue
        details = [r["detail"] for r in _kinds(verdict, "unknown")]
        assert details == _expected_unknown(key), key
        assert verdict["supported"] == (
            not _kinds(verdict, "unknown") and not _kinds(verdict, "app")
        )
        assert verdict["runnable"] == (verdict["reasons"] == [])

    # Infeasible, nothing to set up: runnable.
    assert tasks[f"os/{BLUETOOTH}"]["runnable"] and tasks[f"os/{BLUETOOTH}"]["reasons"] == []
    # Its one file is on Google Drive and not cached: supported, not runnable, the URL named.
    trash = tasks[f"os/{TRASH}"]
    url = load_task(OSWORLD / "os" / f"{TRASH}.json").config[0]["parameters"]["files"][0]["url"]
    assert trash["supported"] and not trash["runnable"]
    assert trash["reasons"] == [
        {"kind": "file", "detail": f"{url} is not cached (config step 0 (download))", "url": url}
    ]
    # Two tasks, one id: both kept, under their domains.
    chrome, thunderbird = tasks[f"chrome/{SHARED}"], tasks[f"thunderbird/{SHARED}"]
    assert chrome["id"] == thunderbird["id"] == SHARED
    assert [r["url"] for r in _kinds(chrome, "web")] == [
        "https://www.lonelyplanet.com", "https://www.airbnb.com", "https://www.tripadvisor.com",
    ]  # fmt: skip
    assert not chrome["runnable"] and not _kinds(chrome, "file")
    assert [r["detail"] for r in _kinds(chrome, "app")] == [
        f"{m} (needed: related_apps)" for m in _expected_apps(["chrome"])
    ]
    assert len(_kinds(thunderbird, "file")) == 1 and not _kinds(thunderbird, "web")
    assert "thunderbird-profile" not in json.dumps(_kinds(thunderbird, "file"))  # a URL, not a path
    # Google Drive and a Google login in setup: an account, never runnable.
    drive = tasks["multi_apps/46407397-a7d5-4c6b-92c6-dbe038b1457b"]
    assert [r["detail"] for r in _kinds(drive, "account")] == [
        "needs a Google account (config step `googledrive`)",
        "needs a Google account (config step `login`)",
        "needs a Google account (result getter `googledrive_file`)",
    ]
    assert not drive["runnable"]
    # VS Code: supported only where a `code` is installed.
    vscode = tasks["vs_code/7c4cc09e-7a92-40dd-8338-b2286535c4ed"]
    assert vscode["supported"] == (missing_app(APPS["vs_code"]) is None)
    # An index entry without a file is a reason too.
    (missing,) = tasks["vs_code/00000000-0000-0000-0000-not-copied-here"]["reasons"]
    assert missing["kind"] == "task" and "no task file" in missing["detail"]

    os_row = report["by_domain"]["os"]
    assert (os_row["total"], os_row["supported"], os_row["runnable"]) == (2, 2, 1)
    assert os_row["not_runnable"]["file"] == 1
    assert report["not_runnable"]["account"] == 1 and report["not_runnable"]["task"] == 1
    assert {"kind": "file", "label": "file not cached", "tasks": 3, "alone": 0} in report[
        "blockers"
    ]
    lines = table.splitlines()
    assert lines[0].startswith("domain") and any(line.startswith("total") for line in lines)
    assert any(line.split()[:4] == ["os", "2", "2", "1"] for line in lines)

    # Seed the poster by hand: the task becomes runnable.
    poster = tmp_path / "poster.webp"
    poster.write_bytes(b"RIFF\x1a\x00\x00\x00WEBPVP8L")
    add = subprocess.run([*SCALECUA, "tasks", "files", "add", url, str(poster)], env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert add.returncode == 0, add.stderr
    _, after = _coverage(env, tmp_path / "after.json")
    assert {t["key"]: t for t in after["tasks"]}[f"os/{TRASH}"]["runnable"]
    assert after["runnable"] == report["runnable"] + 1


def test_the_apps_a_task_needs_come_from_what_it_names_launches_opens_and_reads() -> None:
    task = Task.from_dict({
        "id": "t", "instruction": "x", "snapshot": "chrome", "related_apps": [],
        "config": [
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
            {"type": "execute", "parameters": {"command": "gimp -n /home/user/a.png", "shell": True}},
            {"type": "open", "parameters": {"path": "/home/user/deck.pptx"}},
        ],
        "evaluator": {"func": "check_json", "result": {"type": "vlc_config", "dest": "vlcrc"},
                      "expected": {"type": "rule", "rules": {}}},
    })  # fmt: skip
    needed, unknown = apps_needed(task)
    assert {name: why for name, (_, why) in needed.items()} == {
        "chrome": "snapshot",  # no related_apps: the snapshot names the app
        "gimp": "config step 1 runs gimp",
        "libreoffice_impress": "config step 2 opens /home/user/deck.pptx",
        "vlc": "result getter vlc_config",
    }
    assert unknown == []
    listed = Task.from_dict(
        {**task.to_dict(), "snapshot": "chrome", "related_apps": ["vlc", "kdenlive"]}
    )
    needed, unknown = apps_needed(listed)
    assert "vlc" in needed and needed["vlc"][1] == "related_apps" and unknown == ["kdenlive"]
    assert needed["chrome"][1] == "config step 0 runs google-chrome"  # not from the snapshot


def test_live_web_is_what_the_browser_opens_beyond_loopback() -> None:
    task = Task.from_dict({
        "id": "t", "instruction": "x",
        "config": [
            {"type": "launch", "parameters": {"command": ["google-chrome", "https://example.org/a"]}},
            {"type": "execute", "parameters": {"command": "curl -o x https://files.example.org/x"}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [
                "http://127.0.0.1:8000/local", "https://example.org/a", "https://example.org/b"]}},
        ],
        "evaluator": {"func": "exact_match",
                      "result": {"type": "page_info", "url": "https://example.org/c"},
                      "expected": {"type": "rule", "rules": {}}},
    })  # fmt: skip
    assert live_web_urls(task) == [
        "https://example.org/a", "https://example.org/b", "https://example.org/c",
    ]  # fmt: skip


def test_vs_code_extensions_by_id_need_the_marketplace() -> None:
    """An extension installed by id, or checked for with no .vsix among the task's files,
    comes from VS Code's marketplace, which desktops cannot reach; a .vsix installs offline."""
    listed = {
        "type": "vm_command_line",
        "command": ["code", "--list-extensions", "|", "grep", "a.b"],
    }
    check = {
        "func": "is_extension_installed",
        "result": listed,
        "expected": {"type": "rule", "rules": {"type": "contain", "expected": "a.b"}},
    }
    by_id = Task.from_dict({
        "id": "t", "instruction": "x", "evaluator": check,
        "config": [{"type": "command", "parameters": {"command": ["code", "--install-extension", "ms-python.python"]}}],
    })  # fmt: skip
    market = "https://marketplace.visualstudio.com/items?itemName="
    assert live_web_urls(by_id) == [f"{market}ms-python.python", f"{market}a.b"]
    vsix = Task.from_dict({
        "id": "t", "instruction": "x", "evaluator": check,
        "config": [{"type": "download", "parameters": {"files": [
            {"url": "https://example.org/x", "path": "/home/user/test.vsix"}]}}],
    })  # fmt: skip
    assert live_web_urls(vsix) == []
