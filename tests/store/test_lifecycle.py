"""A memory's life in the store: idempotent saves, duplicates by folded text, against real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from memory_mcp.store import identity, memories
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import Conflict, ValidationError
from tests.factories import make_key, make_space, make_user
from tests.store.test_memories import row_counts, writer

RACERS = 8


async def test_a_repeated_idempotency_key_returns_the_first_save(db: Database) -> None:
    ctx = await writer(db)
    first = await memories.save_memory(db, ctx, "The on-call rota changes on Mondays.", idempotency_key="k-1")
    assert first.created and not first.replayed
    # A client retrying after a timeout may word the fact anew: the key decides, nothing new is stored.
    again = await memories.save_memory(db, ctx, "On-call rotates every Monday.", idempotency_key="k-1")
    assert again.replayed and again.created and again.memory.id == first.memory.id
    assert await row_counts(db, "team") == (1, 1)
    # The key is the key-holder's: another API key with the same string saves its own memory.
    other = await writer(db)
    mine = await memories.save_memory(db, other, "On-call rotates every Monday.", idempotency_key="k-1")
    assert mine.created and not mine.replayed and mine.memory.id != first.memory.id
    fast = await memories.replayed_save(db, ctx, "k-1")
    assert fast is not None and fast.memory.id == first.memory.id
    assert await memories.replayed_save(db, ctx, "k-2") is None


async def test_an_idempotency_key_expires_after_its_window(db: Database, db_urls: tuple[str, str]) -> None:
    ctx = await writer(db)
    first = await memories.save_memory(db, ctx, "Backups run at 02:00 UTC.", idempotency_key="nightly")
    owner = Database(db_urls[1], pool_size=1)
    try:
        async with owner.transaction() as conn:
            await conn.execute(text("UPDATE save_requests SET created_at = now() - interval '25 hours'"))
    finally:
        await owner.close()
    later = await memories.save_memory(db, ctx, "Backups run at 03:00 UTC.", idempotency_key="nightly")
    assert later.created and not later.replayed and later.memory.id != first.memory.id


async def test_an_idempotency_key_of_another_space_conflicts(db: Database) -> None:
    await make_space(db, "team")
    await make_space(db, "ops")
    user = await make_user(db)
    key = await make_key(db, user, {"team": Access.READ_WRITE, "ops": Access.READ_WRITE}, "team")
    caller = await identity.authenticate(db, key)
    await memories.save_memory(db, identity.resolve_space(caller, "team"), "Fact one.", idempotency_key="x")
    with pytest.raises(Conflict, match="idempotencyKey: this key was used for a save in another space"):
        await memories.save_memory(
            db, identity.resolve_space(caller, "ops"), "Fact one.", idempotency_key="x"
        )
    with pytest.raises(ValidationError, match="idempotencyKey"):
        await memories.save_memory(
            db, identity.resolve_space(caller, "ops"), "Fact.", idempotency_key="y" * 256
        )


async def test_racing_saves_with_one_key_store_one_memory(db_urls: tuple[str, str]) -> None:
    """Two pools (two server pods), eight racers, each with its own wording: one memory, one answer."""
    pods = [Database(db_urls[0], pool_size=RACERS), Database(db_urls[0], pool_size=RACERS)]
    try:
        ctx = await writer(pods[0])
        results = await asyncio.gather(
            *(
                memories.save_memory(
                    pods[n % 2],
                    ctx,
                    f"Release freeze starts on day {n} of December.",
                    idempotency_key="freeze",
                )
                for n in range(RACERS)
            )
        )
        assert len({r.memory.id for r in results}) == 1
        assert sum(not r.replayed for r in results) == 1
        assert await row_counts(pods[0], "team") == (1, 1)
    finally:
        for pod in pods:
            await pod.close()


async def test_identical_text_after_folding_returns_the_live_memory(db: Database) -> None:
    ctx = await writer(db)
    first = await memories.save_memory(db, ctx, "Deploys to production need a  green build.")
    for variant in (
        "deploys to production need a green build.",
        "DEPLOYS TO PRODUCTION\nNEED A GREEN BUILD.",
    ):
        again = await memories.save_memory(db, ctx, variant)
        assert not again.created and again.memory.id == first.memory.id
    other = await memories.save_memory(db, ctx, "Deploys to production need a green build!")
    assert other.created  # punctuation is part of the text
    assert await row_counts(db, "team") == (2, 2)
