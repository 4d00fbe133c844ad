"""`scalecua broker --listen/--advertise` (issue 32, hosts apart): the embedded broker on the
one interface other hosts reach it by, 127.0.0.1 unless told; wrong addresses are one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.broker import free_port

SCALECUA = [sys.executable, "-m", "cli"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCALECUA_")}
    return {**clean, "SCALECUA_HOME": str(home), "PYTHONUNBUFFERED": "1", **extra}


def test_the_broker_listens_on_the_address_it_is_told_and_records_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    port = free_port("127.0.0.2")
    broker = subprocess.Popen([*SCALECUA, "broker", "--listen", "127.0.0.2", "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert broker.stdout.readline().strip() == f"127.0.0.2:{port}"
        state = json.loads((tmp_path / "broker.json").read_text())
        assert state["bootstrap"] == f"127.0.0.2:{port}"  # what local commands then dial
        listed = subprocess.run([*SCALECUA, "topics", "list"], env=env, capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        assert listed.returncode == 0 and '"exists":true' in listed.stdout, listed.stderr
        with socket.socket() as s:  # nothing on loopback's usual address
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        broker.send_signal(signal.SIGINT)
        _, err = broker.communicate(timeout=15)
    assert broker.returncode == 0, err
    assert "listening on 127.0.0.2" not in err  # loopback: no warning
    assert f"broker ready at 127.0.0.2:{port}" in err


@pytest.mark.parametrize(
    ("argv", "extra", "code", "words"),
    [
        (["--listen", "0.0.0.0"], {}, 2,
         "[broker] listen = 0.0.0.0 on the command line (--listen): expected one IPv4 address"),
        ([], {"SCALECUA_BROKER_LISTEN": "::1"}, 2, "[broker] listen = ::1 in $SCALECUA_BROKER_LISTEN"),
        (["--listen", "broker.internal"], {}, 2, "[broker] listen = broker.internal"),
        (["--advertise", "10.0.0.1:9092"], {}, 2,
         "[broker] advertise = 10.0.0.1:9092 on the command line (--advertise): expected a host"),
        (["--listen", "192.0.2.1"], {}, 1,
         "cannot listen on 192.0.2.1: Cannot assign requested address (not an address of this "
         "host's interfaces)"),
    ],
)  # fmt: skip
def test_an_address_the_broker_cannot_listen_on_is_one_line(
    argv: list[str], extra: dict[str, str], code: int, words: str, tmp_path: Path
) -> None:
    done = subprocess.run([*SCALECUA, "broker", *argv], env=_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("scalecua: error: ") and words in lines[0], lines[0]
