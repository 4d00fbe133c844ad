"""Session-wide fixtures: a real Kafka-protocol broker (Tansu) per test, a clean SCALECUA_HOME,
an S3 server and a vLLM server (started once per xdist worker that needs it; `--dist
loadfile` keeps each file on one worker, so module fixtures such as a file's desktops start
once).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtime.broker import EmbeddedBroker
from runtime.config import BusSettings
from tests.vllm_server import VLLM_PYTHON, SharedServer


@pytest.fixture(autouse=True, scope="session")
def _scalecua_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep state files, blobs and the file cache of the test session out of the working tree,
    and let a task's setup fetch only loopback URLs (tests never reach beyond 127.0.0.1)."""
    home = tmp_path_factory.mktemp("scalecua-home")
    os.environ["SCALECUA_HOME"] = str(home)
    os.environ["SCALECUA_FILES_FETCH"] = "loopback"
    os.environ.pop("SCALECUA_BOOTSTRAP", None)
    os.environ.pop("SCALECUA_FILES", None)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A fresh in-memory Tansu broker on a free port with the registry's topics (~0.2 s)."""
    b = EmbeddedBroker(log_file=tmp_path / "broker.log")
    await b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
async def bare_broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A fresh broker without any topic (what a service meets before `topics create`)."""
    b = EmbeddedBroker(log_file=tmp_path / "bare-broker.log")
    await b.start(create=False)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def bus_settings(broker: EmbeddedBroker) -> BusSettings:
    """Client settings pointing at the test broker."""
    return BusSettings(bootstrap=broker.bootstrap)


@pytest.fixture
def cli_env(broker: EmbeddedBroker) -> dict[str, str]:
    """Environment for `scalecua` subprocesses aimed at the test broker."""
    return {**os.environ, "SCALECUA_BOOTSTRAP": broker.bootstrap, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on loopback, with fake credentials so nothing looks elsewhere."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never probe an instance-metadata host
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(var, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServer]:
    """vLLM serving SmolLM2 as `policy`, shared by the session (see tests/vllm_server.py)."""
    from runtime.policy.model import smollm2_policy

    if not VLLM_PYTHON.exists():
        pytest.skip(".venv-vllm is missing: run `bash infra/install_vllm.sh` (install.sh --dev)")
    server = SharedServer(smollm2_policy(), tmp_path_factory.mktemp("vllm"))
    _vllm_servers.append(server)
    try:
        yield server
    finally:
        server.close()


_vllm_servers: list[SharedServer] = []  # the session's (one, once a test asked for it)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the vLLM server once the tests that share it are done: idle, it still spins
    (~3% of a core) for the rest of the session; a later user would start it again."""
    from tests.scheduling import unit_of

    if nextitem is not None and (
        unit_of(nextitem.nodeid) == unit_of(item.nodeid) or "vllm_server" in nextitem.fixturenames
    ):
        return
    for server in _vllm_servers:
        server.close()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 - xdist's types
    """Deal `--dist loadfile` longest file first, heavy shared fixtures on one worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirst

    return LongestFirst(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the longest files first (tests/scheduling.py), so the two workers end together."""
    from tests.scheduling import longest_first

    longest_first(items)
