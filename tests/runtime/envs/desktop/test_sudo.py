"""The desktop's `sudo` remembers a password as sudo's default `timestamp_type=tty` does.

Run here exactly as a desktop runs it (the wrapper wrappers.py writes, first on PATH), in
shells with no controlling terminal, as OSWorld's setup commands run: there sudo keys the
remembered password by the parent process, so a second `sudo` in the same shell does not
ask again, while a sudo in another shell does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runtime.envs.desktop.wrappers import write_wrappers


@pytest.fixture
def shell(tmp_path: Path):
    """`shell(cmd)`: run cmd in a new `sh` with no terminal and the desktop's sudo first on PATH."""
    write_wrappers(tmp_path / "bin")
    (tmp_path / "xdg").mkdir(mode=0o700)
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
    }

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sh", "-c", command],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            start_new_session=True,  # no controlling terminal, as under the desktop server
        )

    return run


def test_one_shell_asks_once(shell, tmp_path: Path) -> None:
    # OSWorld task 7688b85f's setup, verbatim in shape.
    done = shell("echo 'password' | sudo -S touch todo.txt && sudo mkdir done")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "todo.txt").is_file() and (tmp_path / "done").is_dir()


def test_another_shell_must_give_the_password_again(shell, tmp_path: Path) -> None:
    assert shell("echo password | sudo -S true").returncode == 0
    other = shell("sudo touch other.txt")
    assert other.returncode == 1 and "a terminal is required" in other.stderr
    assert not (tmp_path / "other.txt").exists()


def test_a_wrong_password_is_not_remembered(shell, tmp_path: Path) -> None:
    wrong = shell("echo nope | sudo -S true; sudo touch after.txt")
    assert "1 incorrect password attempt" in wrong.stderr
    assert "a terminal is required" in wrong.stderr
    assert not (tmp_path / "after.txt").exists()


def test_k_and_big_k_forget_the_password(shell, tmp_path: Path) -> None:
    forgot = shell("echo password | sudo -S true && sudo -K && sudo touch a.txt")
    assert forgot.returncode == 1 and not (tmp_path / "a.txt").exists()
    ignored = shell("echo password | sudo -S -k true && sudo touch b.txt")
    assert ignored.returncode == 1 and not (tmp_path / "b.txt").exists()
    validated = shell("echo password | sudo -S -v && sudo touch c.txt")
    assert validated.returncode == 0 and (tmp_path / "c.txt").exists()
