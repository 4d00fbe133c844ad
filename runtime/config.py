"""Settings read from the environment, as small named value objects with defaults.

Every command and service reads its settings here, so one variable points the whole system
at another broker or blob store:

    SCALECUA_BOOTSTRAP   Kafka bootstrap servers ("host:port[,host:port]"); unset means the
                         embedded broker that `scalecua broker` writes to its state file
    SCALECUA_HOME        working folder for state, blobs and archives (default ./var)
    SCALECUA_BLOBS       blob store URL: a folder or s3://bucket/prefix (default $HOME/blobs)
    SCALECUA_FILES       the file cache tasks' URLs are served from: a folder or s3://bucket/prefix
                         (default $HOME/files)
    SCALECUA_FILES_FETCH which URLs a task's setup may fetch when they are not cached:
                         on (any http(s) URL; default), loopback (127.0.0.1 only), off (none)
    SCALECUA_PRODUCER_ID name this process writes into every event's envelope
    SCALECUA_METRICS_HOST the one address services serve `--metrics-port` on (default 127.0.0.1;
                         across hosts, the interface the metrics scraper reaches)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from runtime.addresses import listen_address
from runtime.errors import ConfigError, SettingError
from topics.events import producer_id

__all__ = [
    "BusSettings",
    "FETCH_MODES",
    "blob_store_url",
    "file_cache_url",
    "file_fetch_mode",
    "home_dir",
    "metrics_host",
    "resolve_bootstrap",
    "broker_state_file",
]

FETCH_MODES = ("on", "loopback", "off")  # SCALECUA_FILES_FETCH: which URLs setup may fetch


def home_dir() -> Path:
    """Return the scalecua working folder (created if missing); SettingError if it cannot be one."""
    raw = os.environ.get("SCALECUA_HOME")
    path = Path(raw or "var").resolve()
    named = f"SCALECUA_HOME={raw}" if raw else f"the working folder {path} (SCALECUA_HOME)"
    # Kernel file systems take mkdir or writes in ways of their own (ENOENT, EACCES even for
    # root): say what is wrong before anything tries to keep state there.
    kernel = next((top for top in _KERNEL_FILE_SYSTEMS if path.is_relative_to(top)), None)
    if kernel is not None:
        raise SettingError(f"{named} is under {kernel}: choose a folder on a disk")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SettingError(f"{named} is a file, not a folder") from None
    except OSError as exc:
        raise SettingError(f"{named} cannot be made a folder: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(path) else "no write permission"
        raise SettingError(f"{named} is not writable ({why})")
    return path


_KERNEL_FILE_SYSTEMS = ("/proc", "/sys")  # /dev/shm is a real tmpfs: allowed


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def broker_state_file() -> Path:
    """Return the file where a running embedded broker records its bootstrap address."""
    return home_dir() / "broker.json"


def blob_store_url() -> str:
    """Return the blob store URL: $SCALECUA_BLOBS, else the `blobs` folder in home_dir()."""
    return os.environ.get("SCALECUA_BLOBS") or str(home_dir() / "blobs")


def file_cache_url() -> str:
    """Return the file cache URL: $SCALECUA_FILES, else the `files` folder in home_dir()."""
    return os.environ.get("SCALECUA_FILES") or str(home_dir() / "files")


def file_fetch_mode() -> str:
    """Return which URLs a task's setup may fetch: $SCALECUA_FILES_FETCH, default "on"."""
    mode = os.environ.get("SCALECUA_FILES_FETCH") or "on"
    if mode not in FETCH_MODES:
        raise SettingError(
            f"$SCALECUA_FILES_FETCH = {mode}: choose one of {', '.join(FETCH_MODES)}"
        )
    return mode


def metrics_host() -> str:
    """Return the address services serve /metrics on: $SCALECUA_METRICS_HOST, else 127.0.0.1."""
    raw = os.environ.get("SCALECUA_METRICS_HOST")
    if not raw:
        return "127.0.0.1"
    try:
        return listen_address(raw)
    except ValueError as exc:
        raise SettingError(f"$SCALECUA_METRICS_HOST = {raw}: {exc}") from None


def resolve_bootstrap(explicit: str | None = None) -> str:
    """Return the bootstrap servers: the argument, $SCALECUA_BOOTSTRAP, or the embedded broker."""
    if explicit:
        return explicit
    env = os.environ.get("SCALECUA_BOOTSTRAP")
    if env:
        return env
    state = broker_state_file()
    if state.exists():
        import orjson

        try:
            return str(orjson.loads(state.read_bytes())["bootstrap"])
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"broken broker state file {state}: {exc}") from exc
    raise ConfigError(
        "no broker configured: set SCALECUA_BOOTSTRAP=host:port, or start one with `scalecua broker`"
    )


@dataclass(frozen=True)
class BusSettings:
    """Kafka client settings that work on both Tansu and Apache Kafka."""

    bootstrap: str  # "host:port[,host:port]"
    client_id: str = field(default_factory=producer_id)
    request_timeout_ms: int = 10_000  # bound on any single broker request
    connect_timeout_s: float = 10.0  # bound on start(): fail clearly when the broker is down
    session_timeout_ms: int = 3_000  # Tansu holds JoinGroup for half of this
    heartbeat_interval_ms: int = 500
    rebalance_timeout_ms: int = 6_000
    # How long the broker holds an empty fetch. Every idle consumer asks again this often:
    # at 25 ms a loop's services kept Tansu at half a core with no traffic; 100 ms cut the
    # broker's and services' CPU in half at the paper's rate with p99 step -> segment and
    # complete -> reward unchanged (0.15-0.19 s; bench/fleet.py).
    fetch_max_wait_ms: int = 100
    max_poll_records: int = 500
    linger_ms: int = 5
    acks: str | int = "all"
    compression: str | None = None  # None, "gzip", "snappy", "lz4", "zstd"
    max_request_size: int = 32 * 1024 * 1024
    # How stale a client's view of the topics may get. Clients never auto-create topics (see
    # runtime/bus.py), so one that started before its topics existed learns of them here.
    metadata_max_age_ms: int = 5_000
    # Whether a group member sends LeaveGroup when it stops; None: yes, except on the
    # embedded broker (Tansu), where a leave can wedge the group (see runtime/bus.py).
    leave_group_on_stop: bool | None = None

    @classmethod
    def from_env(cls, bootstrap: str | None = None) -> BusSettings:
        """Build settings from the environment (and an optional explicit bootstrap)."""
        return cls(bootstrap=resolve_bootstrap(bootstrap))
