#!/usr/bin/env bash
# Sourced by infra/containers.sh and the tests' fixtures: use a Docker daemon, or start one
# of the project's own that never touches the host's networking.
#
#   source infra/images/dockerd.sh; ensure_dockerd     # exports DOCKER_HOST
#   ensure_dockerd_running                              # the same, but never starts one
#   stop_dockerd                                        # stops only the daemon we started
#
# An existing daemon is used when DOCKER_HOST answers, or the default socket does.
# Otherwise dockerd starts with no bridge, no iptables/ip6tables rules, no IP forwarding or
# masquerading (each default would rewrite the host's network setup), and a data root,
# exec root and socket of its own, so it never meets another daemon on the machine.

SCALECUA_DOCKER_ROOT="${SCALECUA_DOCKER_ROOT:-/var/lib/scalecua-docker}"
SCALECUA_DOCKER_RUN="${SCALECUA_DOCKER_RUN:-/run/scalecua-docker}"
SCALECUA_DOCKER_SOCK="${SCALECUA_DOCKER_RUN}/docker.sock"

_docker_answers() {
  DOCKER_HOST="$1" timeout 60 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# Use a daemon that answers (exporting DOCKER_HOST); fail when none does.
ensure_dockerd_running() {
  if [ -n "${DOCKER_HOST:-}" ] && _docker_answers "$DOCKER_HOST"; then
    export DOCKER_HOST; return 0
  fi
  for host in "unix://$SCALECUA_DOCKER_SOCK" "unix:///var/run/docker.sock"; do
    if _docker_answers "$host"; then export DOCKER_HOST="$host"; return 0; fi
  done
  return 1
}

ensure_dockerd() {
  ensure_dockerd_running && return 0
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    echo "[containers] no Docker engine: apt-get install docker.io (infra/install.sh --containers does)" >&2
    return 1
  fi
  mkdir -p "$SCALECUA_DOCKER_ROOT" "$SCALECUA_DOCKER_RUN"
  echo "[containers] starting dockerd (data root $SCALECUA_DOCKER_ROOT, socket $SCALECUA_DOCKER_SOCK)"
  # setsid: the daemon outlives this shell (containers.sh down stops it).
  setsid dockerd \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --data-root "$SCALECUA_DOCKER_ROOT" --exec-root "$SCALECUA_DOCKER_RUN/exec" \
    --pidfile "$SCALECUA_DOCKER_RUN/dockerd.pid" --host "unix://$SCALECUA_DOCKER_SOCK" \
    >"$SCALECUA_DOCKER_RUN/dockerd.log" 2>&1 </dev/null &
  local deadline=$((SECONDS + 60))
  while ! _docker_answers "unix://$SCALECUA_DOCKER_SOCK"; do
    if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$!" 2>/dev/null; then
      echo "[containers] dockerd did not start; its log ($SCALECUA_DOCKER_RUN/dockerd.log) ends:" >&2
      tail -5 "$SCALECUA_DOCKER_RUN/dockerd.log" >&2
      return 1
    fi
    sleep 0.5
  done
  export DOCKER_HOST="unix://$SCALECUA_DOCKER_SOCK"
}

stop_dockerd() {
  local pidfile="$SCALECUA_DOCKER_RUN/dockerd.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    echo "[containers] stopping dockerd ($pid)"
    kill "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  fi
}
