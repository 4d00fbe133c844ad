"""A real HTTP server on 127.0.0.1 for the file cache's tests: files, redirects, transient
failures and bodies of any size, each request counted. It runs in a thread, so a test may
block on a `scalecua` subprocess while the server answers it."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    """What one path answers: a body, a redirect, or failures before the body."""

    body: bytes = b""
    status: int = 200
    redirect: str = ""  # a Location (relative to the server, or absolute)
    fail_first: int = 0  # answer 503 to the first n requests
    chunked: bool = False  # no Content-Length: the body streams in chunks
    content_type: str = "application/octet-stream"


@dataclass
class LoopbackServer:
    """The running server: its base URL, its routes and how often each path was asked for."""

    url: str
    routes: dict[str, Route]
    hits: Counter = field(default_factory=Counter)


@contextmanager
def loopback_server(routes: dict[str, Route]) -> Iterator[LoopbackServer]:
    """Serve `routes` on a free loopback port until the block ends."""
    state = LoopbackServer("", routes)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path
            state.hits[path] += 1
            route = state.routes.get(path)
            if route is None:
                return self._answer(404, b"not found")
            if state.hits[path] <= route.fail_first:
                return self._answer(503, b"try again")
            if route.redirect:
                self.send_response(302)
                self.send_header("Location", route.redirect)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if route.chunked:
                return self._chunked(route)
            return self._answer(route.status, route.body, route.content_type)

        def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _chunked(self, route: Route) -> None:
            self.send_response(200)
            self.send_header("Content-Type", route.content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(route.body), 1024):
                part = route.body[i : i + 1024]
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args: object) -> None:  # keep the test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
