"""The browser's gateway (a SOCKS5 server) on real sockets: what it lets through, where a host
map sends a connection, and that bad input only closes that one connection.

In a desktop the gateway listens inside the browser's network namespace; here it listens on
a host loopback port, which is the same code with one socket made elsewhere."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from runtime.envs.desktop.browser_net import HOSTS_ENV, NETWORK_ENV, BrowserNetwork


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
) -> tuple[BrowserNetwork, int]:
    monkeypatch.setenv(NETWORK_ENV, policy)
    monkeypatch.setenv(HOSTS_ENV, hosts)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    network = BrowserNetwork(None, listener)
    await network.start()
    return network, listener.getsockname()[1]


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


async def test_local_policy_lets_loopback_and_mapped_hosts_through(
    monkeypatch: pytest.MonkeyPatch, echo_port: int
) -> None:
    network, port = await _gateway(
        monkeypatch, "local", f"www.example.com:443=127.0.0.1:{echo_port}"
    )
    try:
        for host, target in (("localhost", echo_port), ("www.example.com", 443)):
            code, reader, writer = await _connect(port, host, target)
            assert code == 0
            writer.write(b"hi")
            assert await reader.read(100) == b"echo:hi"
            writer.close()
        # Any other name is refused at once, without looking it up (no traffic leaves).
        code, _, writer = await _connect(port, "www.example.org", 443)
        assert code == 2
        writer.close()
        assert network.destination("10.1.2.3", 80) is None
    finally:
        await network.close()


async def test_web_policy_and_garbage(monkeypatch: pytest.MonkeyPatch, echo_port: int) -> None:
    network, port = await _gateway(monkeypatch, "web", "")
    try:
        assert network.destination("www.example.org", 443) == ("www.example.org", 443)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")  # not SOCKS: closed at once (it used to hang)
        assert await asyncio.wait_for(reader.read(100), 5) == b""
        writer.close()
        code, reader, writer = await _connect(port, "127.0.0.1", echo_port)  # still serving
        assert code == 0
        writer.close()
    finally:
        await network.close()
