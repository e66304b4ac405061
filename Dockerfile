# One image for both commands: `numasched run` (the scheduler) and `numasched exporter` (the node agent).
#   docker build -t numasched:latest .
#
# The base image is pinned by digest (the multi-architecture index of python:3.11.14-slim-bookworm),
# so a rebuild gets the same layers; move it forward on purpose, tag and digest together.
# Every Python package, the build tools included, comes from requirements.lock with its hashes
# (`make lock` writes it from pyproject.toml); pip refuses anything else.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock .
RUN python -m venv /opt/numasched \
 && /opt/numasched/bin/pip install --require-hashes --only-binary=:all: --no-deps -r requirements.lock
COPY . .
# numasched itself, built with the locked setuptools and nothing fetched.
RUN /opt/numasched/bin/pip install --no-deps --no-build-isolation --no-index . \
 && /opt/numasched/bin/pip uninstall --yes setuptools wheel

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="numasched" \
      org.opencontainers.image.description="Topology-aware secondary scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/numasched /opt/numasched
ENV PATH=/opt/numasched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid, so runAsNonRoot can verify it without a name lookup.
USER 65532:65532
# The scheduler's /healthz /readyz /metrics (not kube-scheduler's 10259), the exporter's /metrics.
EXPOSE 10351 9464
ENTRYPOINT ["numasched"]
CMD ["run"]
