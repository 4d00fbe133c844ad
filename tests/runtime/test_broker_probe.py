"""The compose healthcheck's probe: a real broker answers it, anything else does not."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from runtime.broker import EmbeddedBroker, free_port
from runtime.broker_probe import answers


def _probe(bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.broker_probe", bootstrap],
                          capture_output=True, text=True, timeout=30)  # fmt: skip


async def test_a_running_broker_answers_and_a_stopped_one_does_not(
    broker: EmbeddedBroker,
) -> None:
    assert answers(broker.bootstrap)
    done = _probe(broker.bootstrap)
    assert (done.returncode, done.stderr) == (0, "")
    broker.stop()
    assert not answers(broker.bootstrap)
    done = _probe(broker.bootstrap)
    assert done.returncode == 1 and "does not answer" in done.stderr


@pytest.fixture
def not_kafka() -> Iterator[str]:
    """A listener that answers every connection with an HTTP error, then closes it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # close() does not wake an accept() blocked in another thread
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    thread.join(timeout=5)


def test_a_port_with_no_broker_or_another_protocol_does_not_answer(not_kafka: str) -> None:
    assert not answers(f"127.0.0.1:{free_port()}")
    assert not answers(not_kafka)
    assert not answers("127.0.0.1:not-a-port")


def test_the_probe_says_how_to_call_it() -> None:
    done = _probe("no-port-here")
    assert done.returncode == 2 and "usage: python -m runtime.broker_probe HOST:PORT" in done.stderr
