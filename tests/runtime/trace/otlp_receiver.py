"""A real OTLP/HTTP trace receiver for tests: POST /v1/traces, protobuf in and out.

Built on the official `opentelemetry-proto` messages (what a collector's OTLP receiver
decodes), on a thread of its own: it answers as the OTLP/HTTP specification asks (200 with
an `ExportTraceServiceResponse`, 415 for a body that is not protobuf, 400 for one that does
not parse), so the SDK's exporter talks to it exactly as to a collector.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    resource: dict[str, object]


@dataclass
class Received:
    """What the receiver took, request by request."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Spans by trace id."""
        out: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans:
            out.setdefault(span.trace_id, []).append(span)
        return out


def _value(v: object) -> object:
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(v, kind) if kind else None


def _decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(), name=s.name,
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                    attributes={a.key: _value(a.value) for a in s.attributes},
                    resource=resource,
                ))  # fmt: skip
    return out


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """Serve OTLP/HTTP on 127.0.0.1; yield (base URL, what it received)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                return self._answer(404, b"")
            if self.headers.get("Content-Type") != "application/x-protobuf":
                return self._answer(415, b"")
            try:
                spans = _decode(body)
            except DecodeError:
                return self._answer(400, b"")
            with received.lock:
                received.spans += spans
                received.requests += 1
            self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
