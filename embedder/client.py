"""What the server uses to get vectors: one interface, in-process or over HTTP to Ray Serve.

Every failure to get vectors surfaces as :class:`EmbedderUnavailable`, so callers need one
``except`` to fall back (search falls back to full text; writes land and are embedded later).
"""

from __future__ import annotations

import asyncio
import functools
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx2

from memory_mcp.metrics import EMBEDDING_DURATION, EMBEDDING_FAILURES
from memory_mcp.settings import Settings

from .batcher import DEFAULT_MAX_WAIT_S, MicroBatcher
from .model import encode, load_model, model_dim, model_name

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_QUERY_CACHE_SIZE = 1024


class EmbedderUnavailable(Exception):
    """Vectors could not be obtained (timeout, service down, bad response, model failure)."""


@runtime_checkable
class Embedder(Protocol):
    """An embedding backend. Vectors are unit length, ``dim`` wide."""

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search query; repeated queries are answered from a small LRU cache."""
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

    def __init__(self, *, dim: int, name: str, timeout_s: float, query_cache_size: int) -> None:
        self._dim = dim
        self._name = name
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

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector per text, in order; :class:`EmbedderUnavailable` on any failure."""
        if not texts:
            return []
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout_s):
                vectors = await self._embed(texts)
        except EmbedderUnavailable:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise
        except TimeoutError as exc:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise EmbedderUnavailable(
                f"{self.backend} embedder gave no vectors within {self._timeout_s:g}s"
            ) from exc
        except Exception as exc:
            EMBEDDING_FAILURES.labels(backend=self.backend).inc()
            raise EmbedderUnavailable(f"{self.backend} embedder failed: {exc}") from exc
        finally:
            EMBEDDING_DURATION.labels(backend=self.backend).observe(time.perf_counter() - started)
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        vector = (await self.embed([text]))[0]
        self._cache.put(text, vector)
        return vector

    @abstractmethod
    async def _embed(self, texts: list[str]) -> list[list[float]]: ...

    @abstractmethod
    async def aclose(self) -> None: ...


class LocalEmbedder(_BaseEmbedder):
    """Embeds in this process, through a micro-batcher so concurrent calls share forward passes."""

    backend = "local"

    def __init__(
        self,
        model: SentenceTransformer,
        *,
        name: str,
        max_batch: int = 64,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        timeout_s: float = 10.0,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> None:
        """Wrap an already loaded model; call :meth:`start` before use (or use :meth:`load`)."""
        super().__init__(
            dim=model_dim(model), name=name, timeout_s=timeout_s, query_cache_size=query_cache_size
        )
        self.model = model
        self.batcher = MicroBatcher(
            functools.partial(encode, model, batch_size=max_batch), max_batch=max_batch, max_wait_s=max_wait_s
        )

    @classmethod
    async def load(
        cls,
        model_path: str | None = None,
        device: str = "cpu",
        *,
        max_batch: int = 64,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        timeout_s: float = 10.0,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> LocalEmbedder:
        """Load the model (in a thread: it takes seconds) and start the batcher.

        Raises :class:`~memory_mcp.embedder.model.EmbeddingModelNotFound` for a missing model path.
        """
        model = await asyncio.to_thread(load_model, model_path, device)
        embedder = cls(
            model,
            name=model_name(model_path),
            max_batch=max_batch,
            max_wait_s=max_wait_s,
            timeout_s=timeout_s,
            query_cache_size=query_cache_size,
        )
        await embedder.start()
        return embedder

    async def start(self) -> None:
        await self.batcher.start()

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        vectors = await self.batcher.embed(texts)
        result: list[list[float]] = vectors.tolist()
        return result

    async def aclose(self) -> None:
        await self.batcher.stop()


class RemoteEmbedder(_BaseEmbedder):
    """Calls the Ray Serve embedding deployment over HTTP (``POST /embed``, ``GET /info``).

    ``url`` is the base URL of the service, e.g. ``http://memory-mcp-embedder:8000``.
    Build it with :meth:`connect`, which asks the service for its width and model name.
    """

    backend = "remote"

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        url: str,
        dim: int,
        name: str,
        timeout_s: float,
        query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE,
    ) -> None:
        super().__init__(dim=dim, name=name, timeout_s=timeout_s, query_cache_size=query_cache_size)
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
        """Open a connection pool and read ``dim`` and ``model`` from ``GET {url}/info``.

        Raises :class:`EmbedderUnavailable` if the service cannot be reached or answers nonsense.
        """
        base = url.rstrip("/")
        # Keep every connection alive: under load each concurrent search holds one, and re-opening
        # connections beyond a smaller keep-alive pool costs more than the request itself.
        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        client = httpx2.AsyncClient(base_url=base, timeout=httpx2.Timeout(timeout_s), limits=limits)
        try:
            async with asyncio.timeout(timeout_s):
                info = await _request_json(client, "GET", "/info", base)
            dim, name = info.get("dim"), info.get("model")
            if not isinstance(dim, int) or dim < 1 or not isinstance(name, str):
                raise EmbedderUnavailable(f"embedding service at {base} sent an invalid /info: {info!r}")
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, TimeoutError):
                raise EmbedderUnavailable(
                    f"embedding service at {base} did not answer within {timeout_s:g}s"
                ) from exc
            raise
        return cls(
            client, url=base, dim=dim, name=name, timeout_s=timeout_s, query_cache_size=query_cache_size
        )

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        body = await _request_json(self._client, "POST", "/embed", self.url, {"texts": texts})
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


async def _request_json(
    client: httpx2.AsyncClient, method: str, path: str, base: str, payload: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One HTTP call whose every failure mode becomes an :class:`EmbedderUnavailable` naming the URL."""
    target = f"{base}{path}"
    try:
        response = await client.request(method, path, json=payload)
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


async def make_embedder(settings: Settings, *, query_cache_size: int = DEFAULT_QUERY_CACHE_SIZE) -> Embedder:
    """The embedder the settings ask for: remote when an embedder URL is set, in-process otherwise."""
    url = settings.resolved_embedder_url
    if url:
        return await RemoteEmbedder.connect(
            url, timeout_s=settings.embedder_timeout_s, query_cache_size=query_cache_size
        )
    return await LocalEmbedder.load(
        settings.embedding_model,
        settings.embedding_device,
        max_batch=settings.embedder_max_batch,
        timeout_s=settings.embedder_timeout_s,
        query_cache_size=query_cache_size,
    )
