"""The browser's way out of a desktop, and a relay for the Chrome DevTools Protocol (CDP).

The browser runs in the desktop's own network (namespaces.py: only a loopback), as every
app of the desktop does, so on 127.0.0.1 it meets what the desktop serves (a page a
terminal serves, its own debugging ports 1337 and 9222), as on OSWorld's VM, and nothing
else. Its one way out is a SOCKS5 gateway that the server serves on 127.0.0.1:1080 in that
network (the browser is started with `--proxy-server` on it; chrome.py). A program the
agent runs may use the gateway too: it is a way out for the whole desktop, and what it
lets through is the policy below, applied to every connection by the address it goes to:

- a host the operator mapped (`SCALECUA_BROWSER_HOSTS`) goes to its mapped address, even on
  this machine (a mirror, a test's site): the map is the operator's list of what desktops
  may reach here;
- with `SCALECUA_BROWSER_NETWORK=web`, any other host goes out only if it is the outside:
  its name is resolved here and every address it resolves to must be public
  (runtime.addresses.is_public: not loopback, private, link-local, multicast, reserved, an
  address of this host, nor any IPv6 form of one); the connection goes to the address
  checked, never to the name again;
- everything else is refused; with the default `local`, no name is looked up and no
  connection leaves this machine but to mapped hosts.

The gateway's connections leave from the server, in the host's network; no program of the
desktop can reach the host's loopback through it (the broker, the dashboard, another
desktop's server), nor connect to the host at all by any other path.

The host reaches the debugging port only through the server: `GET
/scalecua/chrome/{port}/json/...` and the WebSocket `/scalecua/chrome/{port}/devtools/...`
are relayed to 127.0.0.1:{port} inside the desktop's network (runtime.envs.desktop.cdp is
the client).

Settings, read from the environment when the desktop starts:

- `SCALECUA_BROWSER_NETWORK`: `local` (default) or `web` (the live web, on a connected machine).
- `SCALECUA_BROWSER_HOSTS`: `HOST[:PORT]=ADDR:PORT` entries separated by commas or
  spaces; `*` matches any host. `*:443=127.0.0.1:8443` sends every https connection to a
  local server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from runtime.addresses import host_addresses, is_public, parse_address

log = logging.getLogger(__name__)

__all__ = [
    "GATEWAY_PORT",
    "BrowserGateway",
    "HostMap",
    "add_relay_routes",
    "CONNECT_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "HOSTS_ENV",
    "NETWORK_ENV",
    "POLICIES",
    "SocketFactory",
]

GATEWAY_PORT = 1080  # the SOCKS5 gateway, on 127.0.0.1 in the desktop's network
NETWORK_ENV = "SCALECUA_BROWSER_NETWORK"
HOSTS_ENV = "SCALECUA_BROWSER_HOSTS"
POLICIES = ("local", "web")
_CHUNK = 1 << 16
HANDSHAKE_TIMEOUT = 10.0  # seconds for a client to say where it wants to go
CONNECT_TIMEOUT = 30.0
SocketFactory = Callable[[int, int, int], socket.socket]


@dataclass(frozen=True)
class HostMap:
    """Where the gateway sends a connection for a host and port (`SCALECUA_BROWSER_HOSTS`)."""

    entries: dict[tuple[str, int | None], tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> HostMap:
        """Parse `HOST[:PORT]=ADDR:PORT` entries; raise ValueError naming a bad one."""
        entries: dict[tuple[str, int | None], tuple[str, int]] = {}
        for item in text.replace(",", " ").split():
            source, sep, target = item.partition("=")
            addr, _, tport = target.rpartition(":")
            host, _, sport = source.partition(":")
            if not sep or not host or not addr or not tport.isdigit():
                raise ValueError(f"bad host map entry {item!r}: expected HOST[:PORT]=ADDR:PORT")
            if sport and not sport.isdigit():
                raise ValueError(f"bad host map entry {item!r}: the port must be a number")
            entries[(host.lower(), int(sport) if sport else None)] = (addr.strip("[]"), int(tport))
        return cls(entries)

    @classmethod
    def from_env(cls) -> HostMap:
        """The map `SCALECUA_BROWSER_HOSTS` sets (empty if unset); ValueError if malformed."""
        return cls.parse(os.environ.get(HOSTS_ENV, ""))

    def lookup(self, host: str, port: int) -> tuple[str, int] | None:
        """The mapped (addr, port) for host:port, or None; exact host before `*`."""
        host = host.lower()
        for key in ((host, port), (host, None), ("*", port), ("*", None)):
            if key in self.entries:
                return self.entries[key]
        return None


class BrowserGateway:
    """The desktop's SOCKS5 gateway out: serves a listening socket, applies the policy."""

    def __init__(self, listener: socket.socket | None) -> None:
        self._listener = listener
        self._server: asyncio.AbstractServer | None = None
        self.policy = os.environ.get(NETWORK_ENV, "local").strip().lower() or "local"
        if self.policy not in POLICIES:
            log.warning("%s=%r is not one of %s; using local", NETWORK_ENV, self.policy, POLICIES)
            self.policy = "local"
        try:
            self.hosts = HostMap.from_env()
        except ValueError as exc:
            log.warning("%s ignored: %s", HOSTS_ENV, exc)
            self.hosts = HostMap()

    @classmethod
    def listening(cls, make_socket: SocketFactory) -> BrowserGateway:
        """A gateway listening on 127.0.0.1:GATEWAY_PORT of the socket factory's network."""
        listener = make_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", GATEWAY_PORT))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        return cls(listener)

    async def start(self) -> None:
        """Serve the gateway (call once, on the server's event loop)."""
        if self._listener is not None:
            self._server = await asyncio.start_server(self._handle, sock=self._listener)

    async def close(self) -> None:
        """Stop the gateway; connections already open end with their clients."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # -- the policy --------------------------------------------------------------------------
    async def destination(self, host: str, port: int) -> tuple[str, int] | None:
        """The address a connection to host:port goes to, or None if the policy refuses it."""
        mapped = self.hosts.lookup(host, port)
        if mapped is not None:
            return mapped
        if self.policy != "web" or not 0 < port < 65536:
            return None
        addresses = await _resolve(host)
        own = host_addresses()
        if not addresses or not all(is_public(a, own) for a in addresses):
            return None
        return str(addresses[0]), port

    # -- SOCKS5 (RFC 1928: CONNECT, no authentication) ---------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                target = await self._request(reader, writer)
            if target is not None:
                await self._forward(target, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError, TimeoutError):
            pass  # a client that does not speak SOCKS5, or went away: only its connection ends
        finally:
            writer.close()

    async def _request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        """Read the greeting and the CONNECT request; the destination to open, or None (the
        refusal is written)."""
        version, count = await reader.readexactly(2)
        if version != 5:
            return None
        if 0 not in await reader.readexactly(count):
            writer.write(b"\x05\xff")  # no acceptable method
            return None
        writer.write(b"\x05\x00")
        _, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))
        elif kind == 3:
            host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("idna")
        else:
            writer.write(_reply(8))
            return None
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1:
            writer.write(_reply(7))  # only CONNECT
            return None
        target = await self.destination(host, port)
        if target is None:
            log.info("browser gateway: refused %s:%d (policy %s)", host, port, self.policy)
            writer.write(_reply(2))
        return target

    async def _forward(
        self, target: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Connect to target from the host's network and copy both ways until both end."""
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*target), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            writer.write(_reply(5 if isinstance(exc, ConnectionRefusedError) else 4))
            return
        writer.write(_reply(0))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address `host` names (an address names itself); [] if it resolves to none."""
    address = parse_address(host)
    if address is not None:
        return [address]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    found = [parse_address(str(info[4][0])) for info in infos]
    return [a for a in found if a is not None]


def _reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


# -- the CDP relay, a route of the desktop server ----------------------------------------------
def add_relay_routes(app: web.Application, make_socket: SocketFactory) -> None:
    """Add `/scalecua/chrome/{port}/json/...` and the `.../devtools/...` WebSocket to `app`,
    connecting with sockets from `make_socket` (inside the desktop's network)."""
    sessions: list[aiohttp.ClientSession] = []

    def client() -> aiohttp.ClientSession:
        if not sessions:

            def factory(addr_info: Any) -> socket.socket:
                return make_socket(addr_info[0], addr_info[1], addr_info[2])

            connector = aiohttp.TCPConnector(socket_factory=factory, force_close=True)
            # A relayed DevTools WebSocket lives as long as its client keeps it open.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            sessions.append(aiohttp.ClientSession(connector=connector, timeout=timeout))
        return sessions[0]

    async def close_client(_app: web.Application) -> None:
        for session in sessions:
            await session.close()

    async def json_route(request: web.Request) -> web.Response:
        port = _port(request)
        url = f"http://127.0.0.1:{port}/json/{request.match_info['tail']}"
        try:
            async with client().get(url, timeout=aiohttp.ClientTimeout(10)) as r:
                body = await r.read()
                return web.Response(body=body, status=r.status, content_type="application/json")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return web.json_response(
                {"status": "error", "message": f"nothing answers on port {port}: {exc}"}, status=502
            )

    async def devtools_route(request: web.Request) -> web.StreamResponse:
        port = _port(request)
        url = f"ws://127.0.0.1:{port}/devtools/{request.match_info['tail']}"
        try:
            upstream = await client().ws_connect(url, max_msg_size=0)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return web.json_response(
                {"status": "error", "message": f"nothing answers on port {port}: {exc}"}, status=502
            )
        downstream = web.WebSocketResponse(max_msg_size=0)
        await downstream.prepare(request)
        try:
            await asyncio.gather(_relay(upstream, downstream), _relay(downstream, upstream))
        finally:
            await upstream.close()
            await downstream.close()
        return downstream

    app.on_cleanup.append(close_client)
    app.router.add_get("/scalecua/chrome/{port:\\d+}/json/{tail:.*}", json_route)
    app.router.add_get("/scalecua/chrome/{port:\\d+}/devtools/{tail:.*}", devtools_route)


def _port(request: web.Request) -> int:
    port = int(request.match_info["port"])
    if not 0 < port < 65536 or port == GATEWAY_PORT:
        raise web.HTTPBadRequest(text=f"no debugging port {port}")
    return port


async def _relay(source: Any, sink: Any) -> None:
    """Copy WebSocket messages from source to sink until either closes."""
    with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
        async for message in source:
            if message.type == aiohttp.WSMsgType.TEXT:
                await sink.send_str(message.data)
            elif message.type == aiohttp.WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            else:
                break
    with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
        await sink.close()
