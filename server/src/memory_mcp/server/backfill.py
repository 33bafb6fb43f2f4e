"""Fill in the vectors memories lack: the model's (after the embedder was down, or after a model
change) and the static model's (rows saved before it existed, or while it was being distilled)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from memory_mcp.core import metrics
from memory_mcp.embedder.client import BulkPolicy, Embedder, embed_bulk
from memory_mcp.embedder.static import StaticModel
from memory_mcp.store import memories
from memory_mcp.store.db import Database

# Static vectors cost ~0.1 ms a text: a large batch keeps the database round trips the main cost.
STATIC_BATCH = 512


async def backfill(
    db: Database,
    embedder: Embedder,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
    policy: BulkPolicy | None = None,
) -> int:
    """Embed until nothing is missing; returns how many were embedded.

    Resumable by construction: only rows without a vector are read, and each batch is committed.
    Each batch waits and retries as ``policy`` says (bulk work); an embedder failure that outlasts
    it propagates (nothing is marked done that was not embedded).
    """
    policy = policy or BulkPolicy()
    done = 0
    while True:
        batch = await memories.missing_embeddings(db, batch_size)
        if not batch:
            break
        vectors = await embed_bulk(embedder, [content for _, _, content in batch], policy)
        await memories.store_embeddings(
            db, [(space_id, memory_id, v) for (space_id, memory_id, _), v in zip(batch, vectors, strict=True)]
        )
        done += len(batch)
        if progress is not None:
            progress(len(batch))
    metrics.MEMORIES_PENDING_EMBEDDING.set(0)
    return done


async def backfill_static(
    db: Database,
    model: StaticModel,
    batch_size: int = STATIC_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Give every memory without one its static vector; returns how many were written.

    Resumable the same way as :func:`backfill`: it reads only rows still lacking the vector and
    commits each batch, so a stopped run is finished by the next.
    """
    done = 0
    while True:
        batch = await memories.missing_embeddings(db, batch_size, column="static_embedding")
        if not batch:
            break
        vectors = await asyncio.to_thread(model.vectors, [content for _, _, content in batch])
        await memories.store_embeddings(
            db,
            [(space_id, memory_id, v) for (space_id, memory_id, _), v in zip(batch, vectors, strict=True)],
            column="static_embedding",
        )
        done += len(batch)
        if progress is not None:
            progress(len(batch))
    return done
