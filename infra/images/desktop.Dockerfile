# The desktop image: Xvfb, openbox, AT-SPI, the apps and the desktop server
# (runtime/envs/desktop). Built by infra/images/build.sh from the imported Debian base;
# run by the Docker desktop provider (runtime/envs/desktop/docker.py), one container a desktop.
ARG BASE

# The server's Python packages, from the wheelhouse the host's pip resolved (no index here).
FROM ${BASE} AS venv
COPY wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install -q --no-index --no-deps --disable-pip-version-check /wheels/*.whl

FROM ${BASE}
ARG APT_PACKAGES
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${APT_PACKAGES} >/dev/null \
    && rm -rf /var/lib/apt/lists/*
# Fontconfig's caches record their folders' mtimes to the nanosecond, and a committed layer
# keeps whole seconds only: caches made in the apt layer above would be stale in every
# container, and each desktop's first app would spend seconds rebuilding them. Made again in
# a layer of their own, they match the folders as every container sees them.
RUN fc-cache -f
COPY --from=venv /opt/venv /opt/venv
# VS Code (--full-desktop): code-server as infra/install.sh builds it on the host, where
# runtime/envs/desktop/vscode.py looks (<venv>/code-server); empty in the lean image.
COPY code-server /opt/venv/code-server
COPY runtime /opt/scalecua/runtime
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/scalecua \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
