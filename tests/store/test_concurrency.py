"""Races through the store against real PostgreSQL: concurrent forgets and concurrent restatements."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import audit, memories
from memory_mcp.store.db import Database
from tests.store.test_search import writer

RACERS = 16


async def test_concurrent_forgets_of_one_memory_forget_it_once(db_urls: tuple[str, str]) -> None:
    db = Database(db_urls[0], pool_size=RACERS)
    try:
        ctx = await writer(db)
        saved = (await memories.save_memory(db, ctx, "The coffee machine is on the third floor.")).memory
        results = await asyncio.gather(
            *(memories.forget_memory(db, ctx, str(saved.id)) for _ in range(RACERS))
        )
        assert all(r.forgotten is not None and r.forgotten.id == saved.id for r in results)
        assert sum(not r.already for r in results) == 1  # exactly one caller forgot it
        assert sum(r.already for r in results) == RACERS - 1  # the others are told it was already
        events = await audit.list_events(db, "memory.forgotten")
        assert [e.target_id for e in events] == [str(saved.id)]
        again = await memories.forget_memory(db, ctx, memories.short_id(saved.id))  # by short id
        assert again.already and again.forgotten is not None and again.forgotten.id == saved.id
    finally:
        await db.close()


async def test_concurrent_restatements_never_fork_a_version_chain(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    db = Database(db_urls[0], pool_size=RACERS)
    try:
        ctx = await writer(db)
        original = "The release train leaves every second Tuesday at noon."
        first = (
            await memories.save_memory(db, ctx, original, None, (await embedder.embed([original]))[0])
        ).memory
        # Near-verbatim restatements of one fact: each one is close enough to supersede any other.
        variants = [original + "!" * n for n in range(1, RACERS + 1)]
        vectors = await embedder.embed(variants)
        threshold = 0.8
        every = [*vectors, *(await embedder.embed([original]))]
        assert min(sum(a * b for a, b in zip(x, y, strict=True)) for x in every for y in every) >= threshold
        results = await asyncio.gather(
            *(
                memories.save_memory(db, ctx, v, None, e, supersede_threshold=threshold)
                for v, e in zip(variants, vectors, strict=True)
            )
        )
        created = [r for r in results if r.created]
        assert created and all(r.superseded is not None for r in created)
        async with db.transaction([ctx.space.id]) as conn:
            rows = (
                await conn.execute(
                    text("SELECT id, supersedes_id, is_latest, version FROM memories WHERE space_id = :s"),
                    {"s": ctx.space.id},
                )
            ).all()
        live = [r for r in rows if r.is_latest]
        assert len(live) == 1  # one fact, one live version
        successors = [r.supersedes_id for r in rows if r.supersedes_id is not None]
        assert len(successors) == len(set(successors))  # no memory was superseded twice
        # A single chain from the first version to the live one.
        by_predecessor = {r.supersedes_id: r for r in rows}
        node, length = first.id, 1
        while node in by_predecessor:
            node, length = by_predecessor[node].id, length + 1
        assert node == live[0].id and length == len(rows) == live[0].version
    finally:
        await db.close()
