#!/usr/bin/env bash
# Sourced by infra/containers.sh and the tests' fixtures: use a Docker daemon, or start one
# of the project's own that never touches the host's networking.
#
#   source infra/images/dockerd.sh; ensure_dockerd     # exports DOCKER_HOST
#   ensure_dockerd_running                              # the same, but never starts one
#   release_dockerd                                     # this command is done with the daemon
#   stop_dockerd                                        # stops only the daemon we started
#
# An existing daemon is used when DOCKER_HOST answers, or the default socket does.
# Otherwise dockerd starts with no bridge, no iptables/ip6tables rules, no IP forwarding or
# masquerading (each default would rewrite the host's network setup), and a data root,
# exec root and socket of its own, so it never meets another daemon on the machine.
#
# Who stops the project's own daemon: one started for a command (a build, a benchmark, a
# test session) stops when the last command using it ends, unless a container runs on it;
# `containers.sh up` makes it the stack's, and `containers.sh down` hands it back. Every
# command holds a shared lock on $SCALECUA_DOCKER_USERS while it runs (ensure_dockerd takes
# it for the shell; Python takes the same flock), and only the one that can take the lock
# alone may stop the daemon.

SCALECUA_DOCKER_ROOT="${SCALECUA_DOCKER_ROOT:-/var/lib/scalecua-docker}"
SCALECUA_DOCKER_RUN="${SCALECUA_DOCKER_RUN:-/run/scalecua-docker}"
SCALECUA_DOCKER_SOCK="${SCALECUA_DOCKER_RUN}/docker.sock"
SCALECUA_DOCKER_USERS="${SCALECUA_DOCKER_RUN}/users.lock"
# Present while the project's own daemon runs for commands only (not for a stack).
SCALECUA_DOCKER_TRANSIENT="${SCALECUA_DOCKER_RUN}/for-commands"

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

# Hold the shared lock for as long as this shell runs (its children inherit it, dockerd not).
_hold_dockerd() {
  [ -z "${_SCALECUA_DOCKER_LEASE:-}" ] || return 0
  mkdir -p "$SCALECUA_DOCKER_RUN"
  exec {_SCALECUA_DOCKER_LEASE}>>"$SCALECUA_DOCKER_USERS"
  flock -s "$_SCALECUA_DOCKER_LEASE"
}

ensure_dockerd() {
  _hold_dockerd
  ensure_dockerd_running && return 0
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    echo "[containers] no Docker engine: apt-get install docker.io (infra/install.sh --containers does)" >&2
    return 1
  fi
  mkdir -p "$SCALECUA_DOCKER_ROOT" "$SCALECUA_DOCKER_RUN"
  echo "[containers] starting dockerd (data root $SCALECUA_DOCKER_ROOT, socket $SCALECUA_DOCKER_SOCK)"
  touch "$SCALECUA_DOCKER_TRANSIENT"  # for commands, until `containers.sh up` takes it
  # setsid: the daemon outlives this shell (release_dockerd or containers.sh down stops it);
  # it must not hold the users' lock, or no one could ever take it alone.
  setsid dockerd \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --data-root "$SCALECUA_DOCKER_ROOT" --exec-root "$SCALECUA_DOCKER_RUN/exec" \
    --pidfile "$SCALECUA_DOCKER_RUN/dockerd.pid" --host "unix://$SCALECUA_DOCKER_SOCK" \
    >"$SCALECUA_DOCKER_RUN/dockerd.log" 2>&1 </dev/null {_SCALECUA_DOCKER_LEASE}>&- &
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

# This command is done with the daemon: stop the project's own when it runs for commands only,
# no other command holds it and no container runs on it (SCALECUA_KEEP_DOCKERD=1: never).
release_dockerd() {
  if [ -n "${_SCALECUA_DOCKER_LEASE:-}" ]; then
    exec {_SCALECUA_DOCKER_LEASE}>&-
    unset _SCALECUA_DOCKER_LEASE
  fi
  [ -z "${SCALECUA_KEEP_DOCKERD:-}" ] && [ -f "$SCALECUA_DOCKER_TRANSIENT" ] || return 0
  local lock
  exec {lock}>>"$SCALECUA_DOCKER_USERS"
  if flock -n -x "$lock" && [ -f "$SCALECUA_DOCKER_TRANSIENT" ] \
      && [ -z "$(DOCKER_HOST="unix://$SCALECUA_DOCKER_SOCK" timeout 60 docker ps -q 2>/dev/null)" ]; then
    stop_dockerd
  fi
  exec {lock}>&-
}

stop_dockerd() {
  local pidfile="$SCALECUA_DOCKER_RUN/dockerd.pid"
  rm -f "$SCALECUA_DOCKER_TRANSIENT"
  [ -f "$pidfile" ] || return 0
  local pid; pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    echo "[containers] stopping dockerd ($pid)"
    kill "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  fi
}
