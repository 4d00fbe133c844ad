"""The browser's own network: a network namespace per desktop, one way out, and a relay for
the Chrome DevTools Protocol (CDP).

OSWorld's tasks start Chrome with `--remote-debugging-port=1337` and forward port 9222 to
it with socat. Desktops share the host's network, so two desktops would fight over those
fixed ports, and a program in one desktop could drive another desktop's browser (CDP has
no authentication). So each desktop's server creates a network namespace for its browser
at start (`BrowserNetwork.create`) and holds it open by a file descriptor; the
`google-chrome` and `socat` wrappers (chrome.py) enter it. In there:

- 127.0.0.1:1337 and :9222 are this desktop's alone; nothing outside the namespace,
  the host included, can connect to them.
- The only way out is a SOCKS5 gateway that the server serves on 127.0.0.1:1080 inside the
  namespace (the browser is started with `--proxy-server` on it, loopback included). It
  connects from the server, in the desktop's own network, after applying the host map and
  the policy below. Chrome resolves no name itself: the gateway gets the host names.
- The host reaches the debugging port only through the server: `GET
  /scalecua/chrome/{port}/json/...` and the WebSocket `/scalecua/chrome/{port}/devtools/...`
  are relayed to 127.0.0.1:{port} inside the namespace (runtime.envs.desktop.cdp is the
  client).

Settings, read from the environment when the desktop starts:

- `SCALECUA_BROWSER_NETWORK`: `local` (default) lets the browser reach loopback addresses
  (the host's 127.0.0.1, where a test, a mirror or a program in the desktop serves) and
  mapped hosts only, and looks no name up; `web` lets it reach anything the desktop can
  (the live web on a connected machine).
- `SCALECUA_BROWSER_HOSTS`: `HOST[:PORT]=ADDR:PORT` entries separated by commas or
  spaces; `*` matches any host. `*:443=127.0.0.1:8443` sends every https connection to a
  local server. A mapped destination is always allowed.

Sockets belong to the namespace they were created in, whichever thread later uses them:
so the server creates sockets inside the namespace from short-lived threads that enter it
and end, and serves them from its event loop, which never leaves the desktop's network.
Where namespaces cannot be made, the browser shares the desktop's network (logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import ipaddress
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

log = logging.getLogger(__name__)

__all__ = ["GATEWAY_PORT", "BrowserNetwork", "HostMap", "add_relay_routes"]

GATEWAY_PORT = 1080  # the SOCKS5 gateway, on 127.0.0.1 inside the browser's namespace
NETWORK_ENV = "SCALECUA_BROWSER_NETWORK"
HOSTS_ENV = "SCALECUA_BROWSER_HOSTS"
POLICIES = ("local", "web")
_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40
_CHUNK = 1 << 16
HANDSHAKE_TIMEOUT = 10.0  # seconds for a client to say where it wants to go
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def _in_thread(fn: Callable[[], T]) -> T:
    """Run fn on a fresh thread that ends afterwards (it may leave this thread's namespace)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="browser-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


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


def is_loopback(host: str) -> bool:
    """Whether host names this machine's loopback (an address, or `localhost`)."""
    if host.lower() in ("localhost", "localhost.") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BrowserNetwork:
    """The browser's network namespace of one desktop, with its gateway and its relay."""

    def __init__(self, netns_fd: int | None, gateway: socket.socket | None) -> None:
        self._fd = netns_fd
        self._gateway_sock = gateway
        self._server: asyncio.AbstractServer | None = None
        self._session: aiohttp.ClientSession | None = None
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
    def create(cls) -> BrowserNetwork:
        """Make the namespace (loopback up, gateway socket listening); without one on failure."""
        try:
            fd, gateway = _in_thread(_make_namespace)
        except OSError as exc:
            log.warning("no network namespace for the browser (%s): it shares the desktop's", exc)
            return cls(None, None)
        return cls(fd, gateway)

    @property
    def path(self) -> str | None:
        """What `nsenter --net=` takes to enter the namespace (None: there is none)."""
        return None if self._fd is None else f"/proc/{os.getpid()}/fd/{self._fd}"

    def socket(
        self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0
    ) -> socket.socket:
        """A new socket inside the namespace (in the desktop's network if there is none)."""
        if self._fd is None:
            return socket.socket(family, kind, proto)
        fd = self._fd

        def make() -> socket.socket:
            _check(_libc.setns(fd, _CLONE_NEWNET), "setns")
            return socket.socket(family, kind, proto)

        return _in_thread(make)

    async def start(self) -> None:
        """Serve the gateway (call once, on the server's event loop)."""
        if self._gateway_sock is not None:
            self._server = await asyncio.start_server(self._handle, sock=self._gateway_sock)

    async def close(self) -> None:
        """Stop the gateway and the relay's connections, and let the namespace go."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self._session is not None:
            await self._session.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def client(self) -> aiohttp.ClientSession:
        """An HTTP client whose connections are made inside the namespace."""
        if self._session is None:

            def factory(addr_info: Any) -> socket.socket:
                family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
                return self.socket(family, kind, proto)

            connector = aiohttp.TCPConnector(socket_factory=factory, force_close=True)
            # A relayed DevTools WebSocket lives as long as its client keeps it open.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    # -- the SOCKS5 gateway (RFC 1928, CONNECT without authentication) ------------------------
    def destination(self, host: str, port: int) -> tuple[str, int] | None:
        """Where a browser connection to host:port goes, or None if the policy refuses it."""
        mapped = self.hosts.lookup(host, port)
        if mapped is not None:
            return mapped
        if self.policy == "web" or is_loopback(host):
            return host, port
        return None

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
        target = self.destination(host, port)
        if target is None:
            log.info("browser gateway: refused %s:%d (policy %s)", host, port, self.policy)
            writer.write(_reply(2))
        return target

    async def _forward(
        self, target: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Connect to target from the desktop's network and copy both ways until both end."""
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*target), 30)
        except (OSError, TimeoutError) as exc:
            writer.write(_reply(5 if isinstance(exc, ConnectionRefusedError) else 4))
            return
        writer.write(_reply(0))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


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


def _make_namespace() -> tuple[int, socket.socket]:
    """On a thread of its own: unshare the network, raise loopback, listen for the gateway."""
    _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ctl:
            flags = struct.pack("16sH", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING)
            fcntl.ioctl(ctl, _SIOCSIFFLAGS, flags)
        gateway = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        gateway.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        gateway.bind(("127.0.0.1", GATEWAY_PORT))
        gateway.listen(128)
        gateway.setblocking(False)
    except OSError:
        os.close(fd)
        raise
    return fd, gateway


# -- the CDP relay, a route of the desktop server ----------------------------------------------
def add_relay_routes(app: web.Application, network: BrowserNetwork) -> None:
    """Add `/scalecua/chrome/{port}/json/...` and the `.../devtools/...` WebSocket to `app`."""

    async def json_route(request: web.Request) -> web.Response:
        port = _port(request)
        url = f"http://127.0.0.1:{port}/json/{request.match_info['tail']}"
        try:
            async with network.client().get(url, timeout=aiohttp.ClientTimeout(10)) as r:
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
            upstream = await network.client().ws_connect(url, max_msg_size=0)
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
