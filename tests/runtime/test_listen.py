"""Where services listen (issue 32, hosts apart): 127.0.0.1 unless a deploy names the one
interface a host serves on; then the broker advertises that address (or a name the other
hosts know it by) and /metrics serves there. Linux answers on all of 127/8, so 127.0.0.2
stands for "another interface" on one machine."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from aiokafka.client import AIOKafkaClient

from runtime.addresses import listen_address
from runtime.broker import EmbeddedBroker, free_port
from runtime.errors import ConfigError, SettingError
from runtime.metrics_http import MetricsServer, ServiceMetricsExporter


@pytest.mark.parametrize(
    ("text", "address"),
    [("127.0.0.1", "127.0.0.1"), ("10.0.0.7", "10.0.0.7"), ("::1", "::1"), ("[::1]", "::1")],
)
def test_listen_address_takes_one_interface_s_address(text: str, address: str) -> None:
    assert listen_address(text) == address


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0.0.0.0", "every interface"),
        ("::", "every interface"),
        ("broker.internal", "not a plain IP address"),
        ("10.0.0.1:9092", "not a plain IP address"),
        ("fe80::1%eth0", "not a plain IP address"),
        ("224.0.0.1", "multicast"),
    ],
)
def test_listen_address_refuses_every_interface_names_and_groups(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        listen_address(text)


def _refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) != 0


async def _advertised(bootstrap: str) -> list[tuple[str, int]]:
    """The brokers the cluster metadata names, as a client learns them from `bootstrap`."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        return [(b.host, b.port) for b in client.cluster.brokers()]
    finally:
        await client.close()


async def test_the_broker_listens_on_the_address_it_is_given_and_advertises_it() -> None:
    broker = EmbeddedBroker(host="127.0.0.2")
    await broker.start()
    try:
        assert broker.bootstrap == f"127.0.0.2:{broker.port}" == broker.listen
        assert await _advertised(broker.bootstrap) == [("127.0.0.2", broker.port)]
        assert _refused("127.0.0.1", broker.port)  # that one interface, and no other
    finally:
        broker.stop()


async def test_the_broker_advertises_the_name_clients_know_it_by() -> None:
    broker = EmbeddedBroker(host="127.0.0.1", advertise="localhost")
    await broker.start()
    try:
        assert broker.bootstrap == f"localhost:{broker.port}"
        assert broker.listen == f"127.0.0.1:{broker.port}"
        assert await _advertised(broker.bootstrap) == [("localhost", broker.port)]
    finally:
        broker.stop()


def test_a_broker_on_an_address_this_host_lacks_is_refused_at_once() -> None:
    with pytest.raises(ConfigError, match="not an address of this host's interfaces"):
        EmbeddedBroker(host="192.0.2.1", port=9092)  # TEST-NET-1: never a local address
    with pytest.raises(ConfigError, match="IPv4 only"):  # Tansu would advertise "[::1]"
        EmbeddedBroker(host="::1")


async def test_metrics_serve_on_the_interface_a_deploy_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = ServiceMetricsExporter("svc", lambda: {"episodes": 3})
    port = free_port("127.0.0.2")
    monkeypatch.setenv("SCALECUA_METRICS_HOST", "127.0.0.2")
    server = await MetricsServer(exporter, port).start()
    try:
        async with httpx.AsyncClient() as client:
            body = (await client.get(f"http://127.0.0.2:{port}/metrics")).text
        assert 'scalecua_episodes{service="svc"} 3.0' in body
        assert await asyncio.to_thread(_refused, "127.0.0.1", port)
    finally:
        await server.stop()
    monkeypatch.delenv("SCALECUA_METRICS_HOST")
    assert MetricsServer(exporter, port).host == "127.0.0.1"  # the default stays loopback


@pytest.mark.parametrize("value", ["0.0.0.0", "metrics.internal"])
def test_metrics_refuse_every_interface_and_names(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCALECUA_METRICS_HOST", value)
    exporter = ServiceMetricsExporter("svc", dict)
    with pytest.raises(SettingError, match=f"SCALECUA_METRICS_HOST = {value}"):
        MetricsServer(exporter, 9100)
