# syntax=docker/dockerfile:1
# An image per component, one target each, built from the same stages:
#   server    memory-mcp serve and migrate: core with tracing, store with the document extractors,
#             the embedder (in-process, torch CPU), the server; no kopf, no Ray
#   operator  memory-mcp operator: core, store, the operator; no torch, no Ray, no extractors
#   embedder  the Ray Serve embedder (KubeRay starts Ray inside it): core, store, embedder[ray]
# Each runs as a non-root user on a read-only root filesystem: everything that writes (HOME, caches,
# Ray's session dir) lives under /tmp, which the chart mounts as an emptyDir.

# Build arguments, brought into each stage that uses them.
# "--editable" for the skaffold dev profile, whose file sync replaces sources under /app: every
# component is then installed from its folder in place.
ARG INSTALL_MODE=""
# torch is installed first and on its own, from the PyTorch CPU index, so that resolving the
# components' dependencies finds it satisfied and never pulls a CUDA build. For GPU embedder workers,
# build the embedder target with --build-arg TORCH_INDEX_URL=<a CUDA wheel index>.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# A folder of wheels that holds the torch build to install (mounted into the build, e.g.
# `buildah bud -v /opt/wheels:/opt/wheels:ro --build-arg TORCH_FIND_LINKS=/opt/wheels`), for a
# machine that reaches PyPI but not the PyTorch index. Set, it replaces TORCH_INDEX_URL.
ARG TORCH_FIND_LINKS=""
# The image every stage starts from: the registry's python:3.11-slim, or a local one made from
# Debian packages by scripts/base-image where no registry is reachable (same Debian release, same
# Python minor version, `python` and `pip` on PATH).
ARG BASE_IMAGE=python:3.11-slim

# What every image shares: the interpreter, the user, the writable places under /tmp.
FROM ${BASE_IMAGE} AS base
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp/home \
    XDG_CACHE_HOME=/tmp/cache \
    MEMORY_MCP_DATA_DIR=/tmp/memory-mcp
RUN groupadd --system --gid 10001 memory \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp/home --no-create-home memory
WORKDIR /app

# The server's and the embedder's common layer. Sources are copied after it, so that a change to
# them never reinstalls torch.
FROM base AS torch
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
ARG TORCH_FIND_LINKS
ENV HF_HOME=/tmp/cache/huggingface \
    HF_HUB_OFFLINE=1 \
    TORCH_HOME=/tmp/cache/torch \
    MPLCONFIGDIR=/tmp/cache/matplotlib
RUN if [ -n "${TORCH_FIND_LINKS}" ]; then \
        pip install --find-links "${TORCH_FIND_LINKS}" "torch==${TORCH_VERSION}"; \
    else \
        pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"; \
    fi

FROM base AS operator
ARG INSTALL_MODE
COPY memory_mcp ./memory_mcp
COPY store ./store
COPY operator ./operator
RUN pip install ${INSTALL_MODE} ./memory_mcp ${INSTALL_MODE} ./store ${INSTALL_MODE} ./operator
# Checked from outside the source folder, as the operator runs: the standard library's operator
# module is not shadowed, and nothing heavy came in through a dependency.
RUN cd / && python -c "import importlib.util as u, operator, sys, memory_mcp.operator.main; \
sys.exit(not hasattr(operator, 'itemgetter') or any(u.find_spec(m) for m in ('torch', 'ray', 'pypdf')))"
RUN if [ -n "${INSTALL_MODE}" ]; then chown -R 10001:10001 /app; fi
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["memory-mcp"]
CMD ["operator"]

FROM torch AS server
# Tesseract reads scanned PDF pages and images (English, German, Italian).
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-deu \
       tesseract-ocr-ita \
    && rm -rf /var/lib/apt/lists/*
ARG INSTALL_MODE
ARG TORCH_VERSION
COPY memory_mcp ./memory_mcp
COPY store ./store
COPY embedder ./embedder
COPY server ./server
# A folder installed with extras is named plain too: pip (23.2) matches another component's plain
# requirement of it (memory-mcp-core needs memory-mcp-store) only to a plain folder.
RUN pip install ${INSTALL_MODE} ./memory_mcp ${INSTALL_MODE} "./memory_mcp[tracing]" ${INSTALL_MODE} ./store \
    ${INSTALL_MODE} "./store[documents]" ${INSTALL_MODE} ./embedder ${INSTALL_MODE} ./server
RUN cd / && python -c "import importlib.util as u, sys, torch, memory_mcp.server.app, opentelemetry.sdk.trace; \
sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}' or any(u.find_spec(m) for m in ('kopf', 'ray')))"
# The static embedding (search's third signal) is distilled from the packaged MiniLM here, at
# install, into the read-only image: a pod then loads it in a second instead of distilling it into
# its emptyDir on every start (minutes on a busy node). MiniLM's ONNX files (short passes through
# ONNX Runtime, and the int8 copy that questions take) are exported beside it, so a pod never
# exports; the build fails if it cannot.
# ONNX Runtime's usage telemetry stays off here too (memory_mcp.core sets the same default in every
# process): no device id is written into the image, nothing is sent from a pod.
ENV MEMORY_MCP_STATIC_EMBEDDING_DIR=/opt/memory-mcp \
    ORT_DISABLE_TELEMETRY=1
# Readable by the image's user (10001): the distiller writes its files for the user that made them.
RUN python -c "from pathlib import Path; from memory_mcp.embedder.static import load_static_model; \
load_static_model(Path('/opt/memory-mcp'))" \
    && python -c "import sys; from pathlib import Path; from memory_mcp.embedder.model import load_model; \
m = load_model(None, onnx_roots=[Path('/opt/memory-mcp')], int8_queries=True); m.short_runtime_settled.wait(); \
sys.exit(m.short_runtime != 'onnxruntime' or not m.queries_differ)" \
    && chmod -R a+rX /opt/memory-mcp
RUN if [ -n "${INSTALL_MODE}" ]; then chown -R 10001:10001 /app; fi
USER 10001:10001
EXPOSE 8765
ENTRYPOINT ["memory-mcp"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8765"]

FROM torch AS embedder
# wget: KubeRay's health probes on Ray pods call it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*
ARG INSTALL_MODE
ARG TORCH_VERSION
COPY memory_mcp ./memory_mcp
COPY store ./store
COPY embedder ./embedder
RUN pip install ${INSTALL_MODE} ./memory_mcp ${INSTALL_MODE} ./store ${INSTALL_MODE} ./embedder \
    ${INSTALL_MODE} "./embedder[ray]"
RUN cd / && python -c "import importlib.util as u, sys, torch, ray.serve, memory_mcp.embedder.serve; \
sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}' or any(u.find_spec(m) for m in ('kopf', 'pypdf')))"
RUN if [ -n "${INSTALL_MODE}" ]; then chown -R 10001:10001 /app; fi
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["memory-mcp"]
CMD ["embedder"]
