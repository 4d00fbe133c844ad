"""What a person gets wrong outside the settings tables is one line too, never a traceback.

A config file that is not UTF-8, a working folder (`SCALECUA_HOME`) that cannot be one, and
a JSON line whose integer does not fit the log's 64 bits each get a one-line reason; the
paths `scalecua up` prints survive a copy into a shell when they hold spaces.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from runtime.broker import free_port

ROOT = Path(__file__).resolve().parents[3]
SCALECUA = [sys.executable, "-m", "cli"]


def _env(home: Path | str, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCALECUA_")}
    return {**clean, "SCALECUA_HOME": str(home), "PYTHONPATH": str(ROOT), **extra}


def _run(argv: list[str], env: dict[str, str], cwd: Path, stdin: bytes = b"") -> tuple[int, str]:
    done = subprocess.run([*SCALECUA, *argv], env=env, cwd=cwd, input=stdin,
                          capture_output=True, timeout=120)  # fmt: skip
    return done.returncode, done.stderr.decode()


def _one_line(rc: int, err: str, code: int = 2) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert rc == code and len(lines) == 1, (rc, err[-3000:])
    assert lines[0].startswith("scalecua: error: "), lines[0]
    return lines[0]


def test_a_config_file_that_is_not_utf8_is_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "latin1.toml").write_bytes("[train]\n# réglages\nlr = 1e-5\n".encode("latin-1"))
    rc, err = _run(["--config", "latin1.toml", "config", "show"], _env(tmp_path / "h"), tmp_path)
    line = _one_line(rc, err)
    assert "latin1.toml: not UTF-8" in line and "line 2" in line, line
    # ./scalecua.toml, read without being named, is checked the same way.
    (tmp_path / "scalecua.toml").write_bytes(b"\xff\xfe[train]\n")
    line = _one_line(*_run(["tasks", "list"], _env(tmp_path / "h"), tmp_path))
    assert "scalecua.toml: not UTF-8" in line, line


@pytest.mark.parametrize(
    ("home", "words"),
    [
        ("a-file", "is a file, not a folder"),
        ("a-file/below", "cannot be made a folder: Not a directory"),
        ("/proc/self/scalecua", "is under /proc"),
        ("/proc/self", "is under /proc"),
        ("/sys/kernel", "is under /sys"),
    ],
)
@pytest.mark.parametrize("command", ["topics list", "broker"])
def test_a_home_that_cannot_be_one_is_named_in_one_line(
    home: str, words: str, command: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    argv = [*command.split(), *(["--port", str(free_port())] if command == "broker" else [])]
    line = _one_line(*_run(argv, _env(home), tmp_path))
    assert f"SCALECUA_HOME={home} " in line and words in line, line


def test_a_read_only_home_is_named_before_the_broker_starts(tmp_path: Path) -> None:
    """A read-only mount (root writes anywhere else): `broker` stops before it listens."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private read-only mount")
    home = tmp_path / "home"
    home.mkdir()
    argv = shlex.join([*SCALECUA, "broker", "--port", str(free_port())])
    script = (f"mount --bind {home} {home} && mount -o remount,ro,bind {home} && "
              f"exec {argv}")  # fmt: skip
    unshare = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    done = subprocess.run(unshare, env=_env(home), cwd=tmp_path, capture_output=True, timeout=60)
    line = _one_line(done.returncode, done.stderr.decode())
    assert f"SCALECUA_HOME={home} is not writable (a read-only file system)" in line, line


def test_produce_names_an_integer_beyond_64_bits_in_one_line(cli_env: dict[str, str]) -> None:
    example = subprocess.run([*SCALECUA, "produce", "reward", "--example"], env=cli_env,
                             capture_output=True, timeout=60).stdout  # fmt: skip
    good = orjson.loads(example)

    def with_value(key: str, value: int) -> bytes:  # orjson itself stops at 64 bits
        line = example.strip().replace(f'"{key}":{good[key]}'.encode(), f'"{key}":{value}'.encode())
        assert line != example.strip(), key
        return line

    huge = with_value("policy_version", 99999999999999999999999)
    nested = with_value("group_size", 2**64)
    done = subprocess.run([*SCALECUA, "produce", "reward"], env=cli_env, capture_output=True,
                          input=huge + b"\n" + nested + b"\n" + example, timeout=60)  # fmt: skip
    err = done.stderr.decode()
    assert "Traceback" not in err and done.returncode == 1, err[-3000:]
    assert err.splitlines() == [
        "line 1: reward: policy_version = 99999999999999999999999 does not fit in 64 bits "
        "(can't serialize ints < -2**63 or > 2**64 - 1)",
        f"line 2: reward: group_size = {2**64} does not fit in 64 bits "
        "(can't serialize ints < -2**63 or > 2**64 - 1)",
        "wrote 1 records to reward; 2 invalid lines",
    ]


@pytest.mark.desktop
def test_the_paths_up_prints_are_quoted_when_they_hold_spaces(tmp_path: Path) -> None:
    home = tmp_path / "a home with spaces"
    argv = ["up", "--policy", "tiny", "--iterations", "1", "--batch", "1", "--n", "2",
            "--desktops", "1", "--no-dashboard", "--tasks", "terminal_write_greeting"]  # fmt: skip
    proc = subprocess.Popen([*SCALECUA, *argv], env=_env(home), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        assert proc.stderr is not None
        while time.monotonic() < deadline and (line := proc.stderr.readline()):
            lines.append(line.rstrip("\n"))
            if "] sampler: " in line:  # every setup line that names a path came before
                break
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=120)
        lines += rest.splitlines()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "\n".join(lines)
    quoted = shlex.quote(str(home))[:-1]  # the quoted home, open for what follows it
    expected = {
        "] service logs: ": f"{quoted}/runs/",
        "] archiver writing every topic to ": f"{quoted}/archive'",
        "] trainer: ": f"checkpoints in {quoted}/checkpoints/",
    }
    for start, path in expected.items():
        said = [line for line in lines if start in line]
        assert said and path in said[0], (start, text[-3000:])
    for line in lines:  # nowhere the bare path with its spaces
        assert f" {home}" not in line, line
    if out.strip():  # the summary, when the stop got that far: its commands split right
        replay = shlex.split(orjson.loads(out.strip().splitlines()[-1])["replay"])
        assert replay[replay.index("--archive") + 1] == str(home / "archive")
