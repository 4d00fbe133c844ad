"""The desktop's gateway (a SOCKS5 server) on real sockets: what it lets through, where a host
map sends a connection, that nothing of this host is reachable through it in any spelling,
and that bad input only closes that one connection.

In a desktop the gateway listens inside the desktop's network namespace; here it listens on
a host loopback port, which is the same code with one socket made elsewhere (the attacks
from inside real desktops are in test_containment.py)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from runtime.addresses import host_addresses
from runtime.envs.desktop.browser_net import HOSTS_ENV, NETWORK_ENV, BrowserGateway


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"echo:" + await reader.read(100))
    await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A loopback server that answers `echo:<what it got>`."""
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def _gateway(
    monkeypatch: pytest.MonkeyPatch, policy: str, hosts: str
) -> tuple[BrowserGateway, int]:
    monkeypatch.setenv(NETWORK_ENV, policy)
    monkeypatch.setenv(HOSTS_ENV, hosts)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    gateway = BrowserGateway(listener)
    await gateway.start()
    return gateway, listener.getsockname()[1]


async def _connect(
    port: int, host: str, target: int
) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    """A SOCKS5 CONNECT to host:target by name; return the reply code and the stream."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x05\x01\x00")
    assert await reader.readexactly(2) == b"\x05\x00"
    name = host.encode()
    writer.write(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", target))
    reply = await reader.readexactly(10)
    return reply[1], reader, writer


# Every way to spell this host that a client could try (names resolved by the gateway).
HOST_SPELLINGS = [
    "localhost", "LOCALHOST.", "a.localhost", "127.0.0.1", "127.0.0.2", "127.1", "2130706433",
    "0.0.0.0", "0", "::1", "[::1]", "::", "::ffff:127.0.0.1", "::127.0.0.1", "2002:7f00:1::",
    "64:ff9b::7f00:1", "169.254.169.254", "fe80::1", "10.0.0.1", "172.16.0.1", "192.168.1.1",
    "100.64.0.1", "224.0.0.1", "ip6-localhost", socket.gethostname(),
]  # fmt: skip


async def test_local_policy_lets_mapped_hosts_through_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, echo_port: int
) -> None:
    gateway, port = await _gateway(
        monkeypatch, "local", f"www.example.com:443=127.0.0.1:{echo_port}"
    )
    try:
        code, reader, writer = await _connect(port, "www.example.com", 443)
        assert code == 0
        writer.write(b"hi")
        assert await reader.read(100) == b"echo:hi"
        writer.close()
        # Any other name is refused at once, without looking it up (no traffic leaves), and
        # so is every spelling of this host, the loopback server's own port included.
        for host in ["www.example.org", *HOST_SPELLINGS]:
            code, _, writer = await _connect(port, host, echo_port)
            assert code == 2, host
            writer.close()
        assert await gateway.destination("8.8.8.8", 443) is None
    finally:
        await gateway.close()


async def test_web_policy_reaches_only_the_outside(
    monkeypatch: pytest.MonkeyPatch, echo_port: int
) -> None:
    gateway, port = await _gateway(monkeypatch, "web", "")
    try:
        # A public address goes out (nothing answers on this machine; only the decision).
        assert await gateway.destination("8.8.8.8", 443) == ("8.8.8.8", 443)
        assert await gateway.destination("2001:4860:4860::8888", 443) == (
            "2001:4860:4860::8888",
            443,
        )
        # Nothing of this host, in any spelling, by name or by address: its loopback, its
        # own interfaces' addresses, private, link-local and mapped forms.
        own = [str(a) for a in host_addresses()]
        for host in [*HOST_SPELLINGS, *own]:
            assert await gateway.destination(host, echo_port) is None, host
            code, reader, writer = await _connect(port, host, echo_port)
            assert code == 2, host
            assert await reader.read(100) == b""
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")  # not SOCKS: closed at once (it used to hang)
        assert await asyncio.wait_for(reader.read(100), 5) == b""
        writer.close()
        code, _, writer = await _connect(port, "localhost", echo_port)  # still serving
        assert code == 2
        writer.close()
    finally:
        await gateway.close()
