"""Embed memories that have no vector yet: after the embedder was down, or after a model change."""

from __future__ import annotations

from collections.abc import Callable

from memory_mcp.core import metrics
from memory_mcp.embedder.client import Embedder
from memory_mcp.store import memories
from memory_mcp.store.db import Database


async def backfill(
    db: Database, embedder: Embedder, batch_size: int = 64, progress: Callable[[int], None] | None = None
) -> int:
    """Embed until nothing is missing; returns how many were embedded.

    Resumable by construction: only rows without a vector are read, and each batch is committed.
    An embedder failure propagates (nothing is marked done that was not embedded).
    """
    done = 0
    while True:
        batch = await memories.missing_embeddings(db, batch_size)
        if not batch:
            break
        vectors = await embedder.embed([content for _, _, content in batch])
        await memories.store_embeddings(
            db, [(space_id, memory_id, v) for (space_id, memory_id, _), v in zip(batch, vectors, strict=True)]
        )
        done += len(batch)
        if progress is not None:
            progress(len(batch))
    metrics.MEMORIES_PENDING_EMBEDDING.set(0)
    return done
