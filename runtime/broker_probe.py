"""Whether a Kafka-protocol broker answers: one ApiVersions round trip, standard library only.

    python -m runtime.broker_probe 127.0.0.1:19092     # exit 0 if it answers, 1 if not

Container healthchecks run this every few seconds for as long as a stack is up, so it
must cost little: `scalecua topics list` imports the CLI and aiokafka (~0.35 s of CPU a
run, 12% of a core at a 3 s interval); this costs ~0.03 s.
"""

from __future__ import annotations

import socket
import struct
import sys

__all__ = ["answers", "main"]

_API_VERSIONS = 18  # the one request every Kafka-protocol broker answers before any other
_CORRELATION_ID = 0x5CA1E


def answers(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """Whether the broker at host:port answers an ApiVersions request without an error."""
    host, _, port = bootstrap.rpartition(":")
    client = b"scalecua-probe"
    # Request header v1 (api key, api version 0, correlation id, client id); empty v0 body.
    body = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(client)) + client
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _read(sock, 4))[0]
            if size < 6:
                return False
            correlation, error = struct.unpack(">ih", _read(sock, 6))
    except (OSError, ValueError, struct.error):
        return False
    return correlation == _CORRELATION_ID and error == 0


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-answer")
        data += chunk
    return data


def main(argv: list[str]) -> int:
    """Exit status for a healthcheck: 0 if the broker at argv[0] answers, 1 if not."""
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m runtime.broker_probe HOST:PORT", file=sys.stderr)
        return 2
    if answers(argv[0]):
        return 0
    print(f"broker at {argv[0]} does not answer ApiVersions", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
