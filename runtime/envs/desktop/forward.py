"""Reaching a port inside a desktop's own network from the host: a TCP forward per port.

An app in a desktop listens on the port OSWorld's VM uses (VLC's HTTP interface on 8080,
Chrome's remote debugging behind socat on 9222), inside the desktop's network namespace,
which the host cannot enter. The server, which lives in the host's network, listens on a
free port of the host's loopback for each such port on request and pipes every
connection it accepts to that port inside. A desktop's processes cannot reach the
forwarding port (they have no route to the host), so only host processes use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from concurrent.futures import ThreadPoolExecutor

from runtime.envs.desktop.namespaces import AgentSide

__all__ = ["PortForwarder"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class PortForwarder:
    """Host loopback ports, each piping to one port on the desktop's loopback."""

    def __init__(self, agent: AgentSide) -> None:
        # Sockets take the network namespace of the thread that creates them: this one
        # thread lives inside the desktop's, and makes every socket that connects in.
        self._inside = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="netns", initializer=agent.enter_network
        )
        self._servers: dict[int, asyncio.Server] = {}
        self._pipes: set[asyncio.Task] = set()

    async def forward(self, port: int) -> int:
        """Return the host loopback port that reaches `port` inside (listening from now on)."""
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port}")
        if port not in self._servers:
            self._servers[port] = await asyncio.start_server(
                lambda r, w: self._accepted(r, w, port), "127.0.0.1", 0
            )
        return self._servers[port].sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every open connection."""
        for server in self._servers.values():
            server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        self._inside.shutdown(wait=False)

    async def _accepted(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            loop = asyncio.get_running_loop()
            sock = await loop.run_in_executor(self._inside, _inside_socket)
            try:
                await loop.sock_connect(sock, ("127.0.0.1", port))
            except OSError as exc:
                sock.close()
                log.info("forward to %d inside: %s", port, exc)
                return
            in_reader, in_writer = await asyncio.open_connection(sock=sock)
            try:
                await asyncio.gather(_pipe(reader, in_writer), _pipe(in_reader, writer))
            finally:
                in_writer.close()
        finally:
            writer.close()
            self._pipes.discard(task)


def _inside_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close the other side."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
