"""In-process micro-batcher: concurrent embedding requests share one forward pass.

A transformer forward pass over 32 short sentences costs little more than over one on a CPU, so
under concurrent load (many searches at once) collecting requests for a few milliseconds and
encoding them together multiplies throughput. The forward pass runs in a dedicated worker thread so
the event loop keeps accepting requests while the model works.

Every request is tagged passage (what is saved) or query (what is searched for): queries and saves
share a batch, and the encode function gets each text's kind (E5 encodes the two differently).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from memory_mcp.core.backends import TextKind
from memory_mcp.core.metrics import (
    EMBEDDER_BATCH_SIZE,
    EMBEDDER_ENCODE,
    EMBEDDER_QUEUE_DEPTH,
    EMBEDDER_QUEUE_WAIT,
    EMBEDDER_REQUESTS,
)

# (texts, the kind of each text) -> one row per text
EncodeFn = Callable[[list[str], list[TextKind]], NDArray[np.float32]]

DEFAULT_MAX_WAIT_S = 0.003


class BatcherClosed(RuntimeError):
    """The batcher is not running (never started, or stopped)."""


@dataclass
class BatcherStats:
    """What the batcher has done since it was created (for tests, benchmarks and debugging)."""

    forward_passes: int = 0
    sentences: int = 0
    requests: int = 0
    largest_batch: int = 0


@dataclass
class _Request:
    texts: list[str]
    kind: TextKind
    future: asyncio.Future[NDArray[np.float32]]
    enqueued_at: float = field(default_factory=time.perf_counter)


class MicroBatcher:
    """Queue ``embed`` calls and serve them in batches of up to ``max_batch`` sentences.

    ``encode_fn`` gets the texts of a whole batch with the kind of each, and must return one row per
    text (:func:`~memory_mcp.embedder.model.encode_mixed` does). A request with
    more texts than ``max_batch`` is encoded on its own (``encode_fn`` splits it). If a forward pass
    fails, every request in that batch gets the exception.
    """

    def __init__(
        self,
        encode_fn: EncodeFn,
        *,
        max_batch: int = 64,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must not be negative")
        self._encode_fn = encode_fn
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.stats = BatcherStats()
        # None is the stop marker.
        self._queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        # A request that did not fit in the previous batch; it opens the next one.
        self._held: _Request | None = None
        # Whether the last forward pass served more than one request: only then is waiting for
        # company likely to pay off. A lone caller never pays max_wait_s.
        self._busy = False
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._closing

    async def start(self) -> None:
        """Start the batching loop on the running event loop (idempotent)."""
        if self._worker is not None:
            return
        self._closing = False
        # One thread: forward passes never overlap, and the model is not shared between threads.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._worker = asyncio.create_task(self._run(), name="embedder-batcher")

    async def stop(self) -> None:
        """Stop taking requests, finish the ones already queued, then stop the loop (idempotent)."""
        if self._worker is None:
            return
        self._closing = True
        worker = self._worker
        # Wakes the loop if it is waiting on an empty queue.
        self._queue.put_nowait(None)
        try:
            await worker
        finally:
            self._worker = None
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    async def embed(self, texts: Sequence[str], *, kind: TextKind = "passage") -> NDArray[np.float32]:
        """Vectors for ``texts`` (one row each, encoded as ``kind``), computed in a shared forward pass."""
        if not self.running:
            raise BatcherClosed("the embedding batcher is not running")
        if not texts:
            # encode_fn answers an empty list without a forward pass; it knows the width.
            return self._encode_fn([], [])
        request = _Request(list(texts), kind, asyncio.get_running_loop().create_future())
        EMBEDDER_QUEUE_DEPTH.inc(len(request.texts))
        self._queue.put_nowait(request)
        return await request.future

    async def _run(self) -> None:
        try:
            while True:
                batch = await self._collect()
                if batch:
                    await self._process(batch)
                if self._closing and self._held is None and self._queue.empty():
                    return
        except BaseException as exc:
            # Never leave a caller waiting on a loop that is gone.
            self._fail_pending(BatcherClosed(f"the embedding batcher stopped unexpectedly: {exc!r}"))
            raise

    def _fail_pending(self, exc: Exception) -> None:
        pending = [self._held] if self._held is not None else []
        self._held = None
        while not self._queue.empty():
            request = self._queue.get_nowait()
            if request is not None:
                pending.append(request)
        for request in pending:
            EMBEDDER_QUEUE_DEPTH.dec(len(request.texts))
        self._settle(pending, exc)

    async def _collect(self) -> list[_Request]:
        """Wait for one request, then gather more until full or ``max_wait_s`` has passed.

        The wait only happens under concurrent load (see ``_busy``); otherwise the batch is what
        is already queued.
        """
        first = self._held if self._held is not None else await self._queue.get()
        self._held = None
        if first is None:
            return []
        batch = [first]
        size = len(first.texts)
        deadline = time.perf_counter() + (self.max_wait_s if self._busy else 0.0)
        while size < self.max_batch:
            try:
                request = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - time.perf_counter()
                if remaining <= 0 or self._closing:
                    break
                try:
                    request = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if request is None:
                continue
            if size + len(request.texts) > self.max_batch:
                self._held = request
                break
            batch.append(request)
            size += len(request.texts)
        self._busy = len(batch) > 1
        return batch

    async def _process(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        live: list[_Request] = []
        for request in batch:
            EMBEDDER_QUEUE_DEPTH.dec(len(request.texts))
            # A caller that gave up (timeout, cancellation) needs no forward pass.
            if request.future.done():
                EMBEDDER_REQUESTS.labels(outcome="cancelled").inc()
                continue
            EMBEDDER_QUEUE_WAIT.observe(started - request.enqueued_at)
            live.append(request)
        if not live:
            return
        texts = [text for request in live for text in request.texts]
        kinds = [request.kind for request in live for _ in request.texts]
        loop = asyncio.get_running_loop()
        try:
            vectors = await loop.run_in_executor(self._executor, self._encode_fn, texts, kinds)
            if vectors.shape[0] != len(texts):
                raise RuntimeError(f"encoder returned {vectors.shape[0]} vectors for {len(texts)} texts")
        except Exception as exc:
            self._settle(live, exc)
            return
        except asyncio.CancelledError:
            self._settle(live, BatcherClosed("the embedding batcher was cancelled during a forward pass"))
            raise
        finally:
            EMBEDDER_ENCODE.observe(time.perf_counter() - started)
            EMBEDDER_BATCH_SIZE.observe(len(texts))
            self._record(len(live), len(texts))
        offset = 0
        for request in live:
            rows = vectors[offset : offset + len(request.texts)]
            offset += len(request.texts)
            if not request.future.done():
                request.future.set_result(rows)
            EMBEDDER_REQUESTS.labels(outcome="ok").inc()

    @staticmethod
    def _settle(requests: list[_Request], exc: BaseException) -> None:
        """Fail every request of a batch with the same exception."""
        for request in requests:
            if not request.future.done():
                request.future.set_exception(exc)
            EMBEDDER_REQUESTS.labels(outcome="error").inc()

    def _record(self, requests: int, sentences: int) -> None:
        self.stats.forward_passes += 1
        self.stats.requests += requests
        self.stats.sentences += sentences
        self.stats.largest_batch = max(self.stats.largest_batch, sentences)
