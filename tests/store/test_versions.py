"""Versions and forgetting with the default thresholds and the real model: what supersedes, what is forgotten."""

from __future__ import annotations

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.store import memories, search
from memory_mcp.store.db import Database
from memory_mcp.store.models import ForgetResult, SaveResult, SpaceContext
from tests.store.test_search import FILLER, writer

DEFAULTS = Settings(embedder="local")


async def save(db: Database, ctx: SpaceContext, embedder: Embedder, content: str) -> SaveResult:
    vector = (await embedder.embed([content]))[0]
    return await memories.save_memory(
        db, ctx, content, None, vector, supersede_threshold=DEFAULTS.supersede_threshold
    )


async def forget(db: Database, ctx: SpaceContext, embedder: Embedder, content: str) -> ForgetResult:
    return await memories.forget_memory(
        db,
        ctx,
        content,
        await embedder.embed_query(content),
        threshold=DEFAULTS.forget_threshold,
        margin=DEFAULTS.forget_margin,
    )


async def test_a_close_restatement_supersedes_and_a_look_alike_fact_does_not(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    for content in FILLER:
        await save(db, ctx, embedder, content)
    first = (await save(db, ctx, embedder, "The VPN gateway for contractors is vpn2.example.com.")).memory
    restated = await save(db, ctx, embedder, "the VPN gateway for contractors is vpn2.example.com")
    assert restated.created and restated.superseded is not None and restated.superseded.id == first.id
    assert restated.memory.version == 2 and restated.memory.supersedes_id == first.id
    # Only letter case and spacing apart: the same text, so the live memory, not a version.
    same = await save(db, ctx, embedder, "The VPN gateway for contractors is  vpn2.example.com")
    assert not same.created and same.memory.id == restated.memory.id
    again = await save(db, ctx, embedder, "The VPN gateway for contractors is: vpn2.example.com")
    assert again.superseded is not None and again.superseded.id == restated.memory.id
    assert again.memory.version == 3

    look_alike = await save(db, ctx, embedder, "The VPN gateway for employees is vpn1.example.com.")
    unrelated = await save(db, ctx, embedder, "Contractors submit their invoices through the vendor portal.")
    assert look_alike.superseded is None and unrelated.superseded is None

    history = {m.id: m for m in (await memories.list_memories(db, ctx, limit=50, status="all")).items}
    assert {first.id, restated.memory.id, again.memory.id} <= set(history)
    assert not history[first.id].is_latest and not history[restated.memory.id].is_latest
    hits = (
        await search.search_memories(
            db, ctx, "How do contractors reach the VPN?", query_embedding=await embedder.embed_query("vpn")
        )
    ).hits
    vpn_versions = {first.id, restated.memory.id, again.memory.id}
    assert [h.memory.id for h in hits if h.memory.id in vpn_versions] == [again.memory.id]


async def test_forget_by_a_restatement_forgets_the_clear_winner(db: Database, embedder: Embedder) -> None:
    ctx = await writer(db)
    for content in FILLER:
        await save(db, ctx, embedder, content)
    target = (await save(db, ctx, embedder, "Priya drinks only decaf after 2 pm.")).memory
    result = await forget(db, ctx, embedder, "priya drinks only decaf after 2 pm")
    assert result.forgotten is not None and result.forgotten.id == target.id
    live = [m for m in (await memories.list_memories(db, ctx, limit=50)).items if m.forgotten_at is None]
    assert target.id not in {m.id for m in live} and len(live) == len(FILLER)


async def test_an_ambiguous_forget_forgets_nothing_and_lists_both(db: Database, embedder: Embedder) -> None:
    ctx = await writer(db)
    a = (await save(db, ctx, embedder, "The staging database runs PostgreSQL 16 on host db-stage-1.")).memory
    b = (await save(db, ctx, embedder, "The staging database runs PostgreSQL 16 on host db-stage-2.")).memory
    # Look-alikes (cosine 0.97 with this model), not versions of each other: both stay live.
    assert all(m.is_latest for m in (await memories.list_memories(db, ctx)).items)
    result = await forget(db, ctx, embedder, "the staging database runs PostgreSQL 16")
    assert result.forgotten is None
    assert {m.id for m in result.candidates} == {a.id, b.id}
    assert all(m.forgotten_at is None for m in (await memories.list_memories(db, ctx)).items)


async def test_forgetting_something_the_space_does_not_hold_forgets_nothing(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    for content in FILLER:
        await save(db, ctx, embedder, content)
    result = await forget(db, ctx, embedder, "Lukas is allergic to cats.")
    assert result.forgotten is None
    assert all(m.forgotten_at is None for m in (await memories.list_memories(db, ctx)).items)
