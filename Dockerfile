# syntax=docker/dockerfile:1
# One image for both roles of agentrun:
#   operator:  agentrun operator           (the image's default command)
#   worker:    agentrun worker             (the operator sets this command on each worker pod)
#
# Build:  docker build -t agentrun:0.1.0 .
# The base is pinned to a full patch tag. Pin it to a digest as well (python:3.11.14-slim-bookworm@sha256:…)
# when you build in an environment that can resolve one; this repository's CI has no registry access to look
# it up, so no digest is written here.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- builder: turns the checkout into one wheel (the same command tests/unit/test_dockerfile.py runs) ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agentrun ./agentrun
COPY agentrun_core ./agentrun_core
COPY agent_worker ./agent_worker
COPY agentrun_dev ./agentrun_dev
COPY agentrun_examples ./agentrun_examples
COPY operator ./operator
COPY crds ./crds
COPY deploy ./deploy
# The lock travels next to the wheel: the runtime stage installs exactly these dependency versions.
COPY constraints.txt /dist/constraints.txt
RUN python -m pip wheel --no-deps --wheel-dir /dist .

# ---- runtime: the wheel and its runtime dependencies only (no dev extras: no embedded Postgres, no kubectl) ----
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="agentrun" \
      org.opencontainers.image.description="Kubernetes operator and worker for durable LangGraph agents" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=builder /dist /dist
# pip precompiles every module, so a read-only root filesystem costs nothing at start-up. The dependency
# versions are the locked ones (constraints.txt), as in CI.
RUN python -m pip install -c /dist/constraints.txt /dist/*.whl \
 && rm -rf /dist \
 && groupadd --system --gid 10001 agentrun \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin agentrun
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
# Numeric user so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
# The root filesystem can be mounted read-only: bytecode is precompiled above, HOME and scratch go to /tmp
# (an emptyDir in deploy/base).
EXPOSE 8080
ENTRYPOINT ["agentrun"]
CMD ["operator"]
