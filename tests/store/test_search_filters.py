"""Filters apply inside search's candidate statements, before the top k are cut: a rare category or
keyword among 10,000 closer memories is still found, and an expired memory never is."""

from __future__ import annotations

import time

from sqlalchemy import text

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import memories, search
from memory_mcp.store.db import Database, HalfVector
from memory_mcp.store.models import SpaceContext
from tests.store.test_memories import writer

CROWD = 10_000
QUESTION = "How do production deploys work?"

# Ten thousand memories, each carrying the question's own vector (the closest there can be), written
# in two statements instead of ten thousand saves.
_CROWD_SQL = """
    WITH d AS (
      INSERT INTO documents (space_id, title, doc_type, status, content, summary, size_bytes, content_hash,
                             created_by_user_id, updated_by_user_id)
      SELECT :s, 'note ' || g, 'text', 'done', 'Production deploy note ' || g, '', 30, md5('note ' || g), :u, :u
      FROM generate_series(1, :n) g RETURNING id, content, content_hash
    )
    INSERT INTO memories (space_id, document_id, content, content_hash, category, embedding,
                          created_by_user_id, updated_by_user_id)
    SELECT :s, d.id, d.content, d.content_hash, 'deploys', CAST(:e AS halfvec), :u, :u FROM d
"""


async def _crowd(db: Database, ctx: SpaceContext, vector: list[float]) -> None:
    async with db.transaction([ctx.space.id]) as conn:
        await conn.execute(
            text(_CROWD_SQL),
            {"s": ctx.space.id, "u": ctx.caller.user.id, "n": CROWD, "e": HalfVector(vector)},
        )


async def test_a_rare_category_among_ten_thousand_closer_memories_is_found(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    question = await embedder.embed_query(QUESTION)
    started = time.monotonic()
    await _crowd(db, ctx, question)
    rare_text = "Contract renewals need a sign-off from the legal team."
    rare = (
        await memories.save_memory(db, ctx, rare_text, "legal", (await embedder.embed([rare_text]))[0])
    ).memory
    # An expired memory of the same category, as close to the question as the crowd: never a result.
    stale = await memories.save_memory(db, ctx, "Legal reviews every production deploy.", "legal", question)
    async with db.transaction([ctx.space.id]) as conn:
        await conn.execute(
            text("UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = :id"),
            {"id": stale.memory.id},
        )
    assert time.monotonic() - started < 120  # the crowd is written in bulk, not saved one by one

    unfiltered = await search.search_memories(db, ctx, QUESTION, query_embedding=question, limit=10)
    assert rare.id not in {h.memory.id for h in unfiltered.hits}  # the crowd fills any top 10
    by_category = await search.search_memories(
        db, ctx, QUESTION, category="legal", query_embedding=question, limit=10
    )
    assert [h.memory.id for h in by_category.hits] == [rare.id]
    by_keyword = await search.search_memories(db, ctx, QUESTION, keyword="sign-off", query_embedding=question)
    assert [h.memory.id for h in by_keyword.hits] == [rare.id]
    category_only = await search.search_memories(db, ctx, category="legal")
    assert [h.memory.id for h in category_only.hits] == [rare.id]
