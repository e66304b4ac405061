# One image for both commands: `numasched run` (the scheduler) and `numasched exporter` (the node agent).
#   docker build -t numasched:latest .
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN python -m venv /opt/numasched \
 && /opt/numasched/bin/pip install --upgrade pip \
 && /opt/numasched/bin/pip install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="numasched" \
      org.opencontainers.image.description="Topology-aware secondary scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/numasched /opt/numasched
ENV PATH=/opt/numasched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid, so runAsNonRoot can verify it without a name lookup.
USER 65532:65532
EXPOSE 10259
ENTRYPOINT ["numasched"]
CMD ["run"]
