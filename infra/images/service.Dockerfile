# The scalecua service image: every stage (broker, archiver, rollout, judge, segmenter,
# sampler, trainer, dashboard) is `scalecua COMMAND` in it. Built by infra/images/build.sh
# from the imported Debian base with the project's locked packages (infra/constraints.txt)
# and the CPU torch wheel; infra/compose.local.yml runs it.
ARG BASE

FROM ${BASE}
# Every locked package, from the wheelhouse the host's pip resolved, which build.sh serves on
# 127.0.0.1 for this step (no index here): the wheels never enter a layer.
ARG WHEELS_URL
ARG WHEEL_FILES
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install -q --no-index --no-deps --disable-pip-version-check \
       $(for wheel in ${WHEEL_FILES}; do echo "${WHEELS_URL}/${wheel}"; done)
COPY pyproject.toml README.md /opt/scalecua/
COPY topics /opt/scalecua/topics
COPY runtime /opt/scalecua/runtime
COPY producers /opt/scalecua/producers
COPY consumers /opt/scalecua/consumers
COPY cli /opt/scalecua/cli
# Bytecode once at build: containers never write it (PYTHONDONTWRITEBYTECODE), so without
# this every service start and healthcheck compiles the sources it imports again.
RUN /opt/venv/bin/python -m compileall -q /opt/scalecua \
    && printf '#!/bin/sh\nexec /opt/venv/bin/python -m cli "$@"\n' >/usr/local/bin/scalecua \
    && chmod 755 /usr/local/bin/scalecua
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/scalecua \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SCALECUA_HOME=/data/home \
    SCALECUA_BLOBS=/data/blobs
WORKDIR /opt/scalecua
ENTRYPOINT ["tini", "--"]
CMD ["scalecua", "--help"]
