# syntax=docker/dockerfile:1
# One image for every component: `memory-mcp serve`, `operator`, `migrate`, `backfill` and the
# Ray Serve embedder (KubeRay starts Ray inside it). Runs as a non-root user on a read-only root
# filesystem: everything that writes (HOME, caches, Ray's session dir) lives under /tmp, which
# the chart mounts as an emptyDir.
FROM python:3.11-slim

# torch is installed first and on its own, from the PyTorch CPU index, so that resolving the
# package's dependencies finds it satisfied and never pulls a CUDA build. For GPU embedder workers,
# build a variant with --build-arg TORCH_INDEX_URL=<a CUDA wheel index>.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# "--editable" for the skaffold dev profile, whose file sync replaces sources under /app: every
# component is then installed from its folder in place.
ARG INSTALL_MODE=""

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp/home \
    XDG_CACHE_HOME=/tmp/cache \
    HF_HOME=/tmp/cache/huggingface \
    HF_HUB_OFFLINE=1 \
    TORCH_HOME=/tmp/cache/torch \
    MPLCONFIGDIR=/tmp/cache/matplotlib \
    MEMORY_MCP_DATA_DIR=/tmp/memory-mcp

# wget: KubeRay's health probes on Ray pods call it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY memory_mcp ./memory_mcp
COPY store ./store
COPY server ./server
COPY embedder ./embedder
COPY operator ./operator
RUN pip install ${INSTALL_MODE} ./memory_mcp ${INSTALL_MODE} ./store ${INSTALL_MODE} ./embedder \
    ${INSTALL_MODE} ./server ${INSTALL_MODE} ./operator ".[ray,operator]"
# Checked from outside the source folder, as the components run: the package and the standard
# library resolve as installed, and the torch installed above was not replaced.
RUN cd / && python -c "import collections, operator, memory_mcp.operator, memory_mcp.server, sys, torch; \
sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}' or not hasattr(operator, 'itemgetter'))"

# The static embedding (search's third signal) is distilled from the packaged MiniLM here, at
# install, into the read-only image: a pod then loads it in a second instead of distilling it into
# its emptyDir on every start (minutes on a busy node).
ENV MEMORY_MCP_STATIC_EMBEDDING_DIR=/opt/memory-mcp
RUN python -c "from pathlib import Path; from memory_mcp.embedder.static import load_static_model; \
load_static_model(Path('/opt/memory-mcp'))"

RUN groupadd --system --gid 10001 memory \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp/home --no-create-home memory \
    && if [ -n "${INSTALL_MODE}" ]; then chown -R 10001:10001 /app; fi
USER 10001:10001

EXPOSE 8765 8080 8000
ENTRYPOINT ["memory-mcp"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8765"]
