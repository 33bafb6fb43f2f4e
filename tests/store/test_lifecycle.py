"""A memory's life in the store: idempotent saves, folded duplicates, expiry, forget reasons, against
real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from memory_mcp.store import audit, identity, memories, search
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import Conflict, ValidationError
from memory_mcp.store.models import SpaceContext
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


async def _expire(db: Database, ctx: SpaceContext, memory_id: uuid.UUID, ago: str = "1 second") -> None:
    """Move a memory's expiry into the past."""
    async with db.transaction([ctx.space.id]) as conn:
        await conn.execute(
            text(f"UPDATE memories SET expires_at = now() - interval '{ago}' WHERE id = :id"),
            {"id": memory_id},
        )


async def test_an_expired_memory_is_neither_found_listed_nor_counted(
    db: Database, db_urls: tuple[str, str]
) -> None:
    ctx = await writer(db)
    soon = datetime.now(UTC) + timedelta(hours=1)
    until_friday = await memories.save_memory(db, ctx, "The office is closed until Friday.", expires_at=soon)
    kept = await memories.save_memory(db, ctx, "The office opens at 08:00.")
    assert until_friday.memory.expires_at == soon and until_friday.memory.status == "live"
    with pytest.raises(ValidationError, match="expiresAt: must be in the future"):
        await memories.save_memory(db, ctx, "Too late.", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    await _expire(db, ctx, until_friday.memory.id)

    found = await search.search_memories(db, ctx, keyword="office")
    assert [h.memory.id for h in found.hits] == [kept.memory.id]
    assert [m.id for m in (await memories.list_memories(db, ctx)).items] == [kept.memory.id]
    everything = {m.id: m for m in (await memories.list_memories(db, ctx, status="all")).items}
    assert everything[until_friday.memory.id].status == "expired"
    (summary,) = await identity.list_spaces(db, ctx.caller)
    assert summary.memory_count == 1
    # Not counted against a quota either: two places left at maxMemories 3.
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE spaces SET max_memories = 3 WHERE id = :s"), {"s": ctx.space.id})
    await memories.save_memory(db, ctx, "The office has a new coffee machine.")
    # The same text again is a new live memory; the expired one is retired (history kept) and told.
    again = await memories.save_memory(db, await writer(db), "The office is closed until Friday.")
    assert again.created and again.memory.id != until_friday.memory.id and again.memory.expires_at is None


async def test_the_purge_retires_expired_memories_after_the_grace_once(
    db: Database, db_urls: tuple[str, str]
) -> None:
    ctx = await writer(db)
    saved = [
        (
            await memories.save_memory(
                db, ctx, f"Temporary fact {n}.", expires_at=datetime.now(UTC) + timedelta(days=1)
            )
        ).memory
        for n in range(3)
    ]
    await _expire(db, ctx, saved[0].id, "2 days")
    await _expire(db, ctx, saved[1].id, "1 minute")
    assert await memories.purge_expired(db, grace_s=3600) == 1  # only the one past the grace
    owner = Database(db_urls[1], pool_size=2)
    try:
        # Another pod holding the purge's lock: this one does nothing and returns at once.
        async with owner.transaction() as conn:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": memories.PURGE_LOCK_ID})
            assert await memories.purge_expired(db, grace_s=0) == 0
        assert await memories.purge_expired(db, grace_s=0) == 1
        assert await memories.purge_expired(db, grace_s=0) == 0
    finally:
        await owner.close()
    forgotten = {m.id for m in (await memories.list_memories(db, ctx, status="forgotten")).items}
    assert forgotten == {saved[0].id, saved[1].id}
    events = await audit.list_events(db, action="memory.expired")
    assert sorted(e.target_id for e in events) == sorted(str(m.id) for m in saved[:2])
    assert all(e.actor == "system:expiry" and e.details["chars"] == 17 for e in events)


async def test_forget_keeps_its_reason_and_a_dry_run_changes_nothing(db: Database) -> None:
    ctx = await writer(db)
    saved = (await memories.save_memory(db, ctx, "The old wiki lives at wiki.example.org.")).memory
    dry = await memories.forget_memory(db, ctx, "", memory_id=str(saved.id), dry_run=True)
    assert dry.dry_run and dry.forgotten is not None and dry.forgotten.id == saved.id
    assert [m.id for m in (await memories.list_memories(db, ctx)).items] == [saved.id]
    assert await audit.list_events(db, action="memory.forgotten") == []
    done = await memories.forget_memory(db, ctx, "", memory_id=str(saved.id), reason="the wiki moved")
    assert done.forgotten is not None and done.forgotten.status == "forgotten"
    (event,) = await audit.list_events(db, action="memory.forgotten")
    assert event.details["reason"] == "the wiki moved"
    with pytest.raises(ValidationError, match="reason"):
        await memories.forget_memory(db, ctx, "", memory_id=str(saved.id), reason="x" * 501)
