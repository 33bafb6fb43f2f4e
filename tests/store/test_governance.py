"""Review flow, quotas and rate limits in the store: proposals, decisions, limits at their boundary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memory_mcp.store import (
    apikeys,
    documents,
    identity,
    memories,
    pipeline,
    ratelimit,
    review,
    search,
    spaces,
)
from memory_mcp.store.access import Access, parse_grant
from memory_mcp.store.db import Database
from memory_mcp.store.errors import Conflict, QuotaExceeded, RateLimited, ValidationError
from memory_mcp.store.models import SpaceContext
from tests.factories import make_key, make_space, make_user


async def _contexts(db: Database, space: str = "team") -> tuple[SpaceContext, SpaceContext]:
    """A writer's and a curator's context on ``space``."""
    writer = await identity.authenticate(
        db, await make_key(db, await make_user(db, "wanda"), {space: "ReadWrite"})
    )
    curator = await identity.authenticate(
        db, await make_key(db, await make_user(db, "carl"), {space: "Curate"})
    )
    return identity.resolve_space(writer, space), identity.resolve_space(curator, space)


async def _audit(db: Database, action: str) -> int:
    async with db.transaction() as conn:
        return int(
            (
                await conn.execute(text("SELECT count(*) FROM audit_events WHERE action = :a"), {"a": action})
            ).scalar_one()
        )


async def _found(db: Database, ctx: SpaceContext, keyword: str) -> list[str]:
    result = await search.search_memories(db, ctx, keyword=keyword)
    return [h.memory.content for h in result.hits]


async def test_a_proposal_is_invisible_until_accepted_then_live(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer, curator = await _contexts(db)
    saved = await memories.save_memory(db, writer, "Deploys freeze on Fridays after 15:00.")
    assert saved.proposed and saved.created and saved.memory.status == "proposed"

    assert await _found(db, writer, "Fridays") == []
    assert (await memories.list_memories(db, writer)).total == 0
    proposed = await memories.list_memories(db, writer, status="proposed")
    assert [m.id for m in proposed.items] == [saved.memory.id]
    assert proposed.items[0].created_by == "Wanda"
    # Saving the same text again returns the pending proposal, not a second one.
    again = await memories.save_memory(db, writer, "Deploys freeze on Fridays after 15:00.")
    assert not again.created and again.proposed and again.memory.id == saved.memory.id

    accepted = await review.decide(db, curator, str(saved.memory.id)[:8], "accepted")
    assert accepted.memory.status == "live" and accepted.memory.reviewed_by == "Carl"
    assert not accepted.already and accepted.waited_s is not None
    assert await _found(db, writer, "Fridays") == ["Deploys freeze on Fridays after 15:00."]

    # Accepting twice is idempotent: nothing changes, one audit event in all.
    twice = await review.decide(db, curator, str(saved.memory.id), "accepted")
    assert twice.already and twice.memory.status == "live"
    assert await _audit(db, "memory.accepted") == 1
    with pytest.raises(Conflict, match="accepted already"):
        await review.decide(db, curator, str(saved.memory.id), "rejected")


async def test_concurrent_accepts_write_one_audit_event(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer, curator = await _contexts(db)
    saved = await memories.save_memory(db, writer, "The VPN gateway moved to vpn2.")
    results = await asyncio.gather(
        *(review.decide(db, curator, str(saved.memory.id), "accepted") for _ in range(4))
    )
    assert sorted(r.already for r in results) == [False, True, True, True]
    assert await _audit(db, "memory.accepted") == 1


async def test_reject_keeps_rejected_history(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer, curator = await _contexts(db)
    saved = await memories.save_memory(db, writer, "Lunch is always free on Mondays.")
    rejected = await review.decide(db, curator, str(saved.memory.id), "rejected", reason="not true")
    assert rejected.memory.status == "rejected" and rejected.memory.review_reason == "not true"
    assert await _found(db, writer, "Mondays") == []
    assert [m.id for m in (await memories.list_memories(db, writer, status="rejected")).items] == [
        saved.memory.id
    ]
    assert (await memories.list_memories(db, writer, status="proposed")).total == 0
    assert (await memories.list_memories(db, writer, status="superseded")).total == 0
    assert (await review.decide(db, curator, str(saved.memory.id), "rejected")).already
    assert await _audit(db, "memory.rejected") == 1


async def test_a_forget_proposal_keeps_the_memory_live_until_accepted(db: Database) -> None:
    await make_space(db, "team")
    writer, curator = await _contexts(db)
    live = await memories.save_memory(db, writer, "The wiki lives at wiki.example.com.")
    await spaces.upsert_space(db, "team", "Team", write_policy="Review")
    writer = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, "wanda", {"team": "ReadWrite"})), "team"
    )

    result = await memories.forget_memory(db, writer, str(live.memory.id))
    assert result.proposed and result.forgotten is not None and result.forgotten.forget_review == "proposed"
    assert await _found(db, writer, "wiki") == ["The wiki lives at wiki.example.com."]
    pending = (await memories.list_memories(db, writer, status="proposed")).items
    assert [(m.id, m.forget_proposed_by) for m in pending] == [(live.memory.id, "Wanda")]

    accepted = await review.decide(db, curator, str(live.memory.id), "accepted")
    assert accepted.proposal == "forget" and accepted.memory.status == "forgotten"
    assert accepted.memory.updated_by == "Carl"
    assert await _found(db, writer, "wiki") == []
    assert await _audit(db, "memory.forget_accepted") == 1


async def test_an_accepted_restatement_retires_what_it_restates(db: Database) -> None:
    await make_space(db, "team")
    writer, curator = await _contexts(db)
    old = await memories.save_memory(db, writer, "The office is on floor 3.")
    await spaces.upsert_space(db, "team", "Team", write_policy="Review")
    writer = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, "wanda", {"team": "ReadWrite"})), "team"
    )
    proposal = await memories.save_memory(
        db, writer, "The office is on floor 5.", supersedes_id=old.memory.id
    )
    assert proposal.proposed and proposal.memory.supersedes_id == old.memory.id
    assert await _found(db, writer, "office") == ["The office is on floor 3."]
    accepted = await review.decide(db, curator, str(proposal.memory.id), "accepted")
    assert accepted.memory.version == 2
    assert await _found(db, writer, "office") == ["The office is on floor 5."]
    assert [m.id for m in (await memories.list_memories(db, writer, status="superseded")).items] == [
        old.memory.id
    ]


async def test_review_to_direct_leaves_proposals_pending(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer, curator = await _contexts(db)
    first = await memories.save_memory(db, writer, "Backups run at 02:00.")
    await spaces.upsert_space(db, "team", "Team", write_policy="Direct")
    writer = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, "wanda", {"team": "ReadWrite"})), "team"
    )
    direct = await memories.save_memory(db, writer, "Restores are tested monthly.")
    assert not direct.proposed and direct.memory.status == "live"
    assert [m.id for m in (await memories.list_memories(db, writer, status="proposed")).items] == [
        first.memory.id
    ]
    # Bulk accepting: every pending id, oldest first.
    ids = [str(i) for i in await review.pending_ids(db, curator)]
    assert [r.decision for r in await review.decide_many(db, curator, ids, "accepted")] == ["accepted"]
    assert (await memories.list_memories(db, writer)).total == 2


async def test_curator_context_for_the_command_line(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    await make_key(db, await make_user(db, "carl"), {"team": "Curate"})
    await make_key(db, "carl", {"team": "Read"})
    ctx = await review.curator_context(db, "carl", "team")
    assert ctx.can_curate and ctx.space.write_policy == "Review"


@pytest.mark.parametrize(
    ("quota", "limit", "adds"),
    [("max_memories", 2, 2), ("max_bytes", 20, 2)],
)
async def test_quotas_hold_at_their_boundary_with_nothing_half_written(
    db: Database, quota: str, limit: int, adds: int
) -> None:
    await make_space(db, "team", **{quota: limit})
    writer, _ = await _contexts(db)
    for content in ("ten bytes.", "ten more.!")[:adds]:  # 10 bytes each: exactly at maxBytes 20
        await memories.save_memory(db, writer, content)
    with pytest.raises(QuotaExceeded) as refused:
        await memories.save_memory(db, writer, "one too many")
    name = {"max_memories": "maxMemories", "max_bytes": "maxBytes"}[quota]
    assert refused.value.quota == name and refused.value.limit == limit
    assert name in str(refused.value) and f"{refused.value.used} in use" in str(refused.value)
    async with db.transaction([writer.space.id]) as conn:
        counts = (
            await conn.execute(
                text("SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM documents)")
            )
        ).one()
    assert tuple(counts) == (adds, adds)


async def test_max_documents_counts_documents_not_memories_saved_alone(db: Database) -> None:
    await make_space(db, "team", max_documents=1)
    writer, _ = await _contexts(db)
    for content in ("First fact.", "Second fact.", "Third fact."):
        assert (await memories.save_memory(db, writer, content)).created  # no document each
    stored, _ = await documents.save_text(db, writer, None, pipeline.prepare_text(LONG_TEXT))
    assert stored.created
    with pytest.raises(QuotaExceeded) as refused:
        await documents.save_text(db, writer, None, pipeline.prepare_text(LONG_TEXT + " Again."))
    assert refused.value.quota == "maxDocuments" and refused.value.used == 1


async def test_a_spaces_file_limits_are_whole_numbers_from_one_in_the_store_and_the_table(
    db: Database,
) -> None:
    for limits, field in (
        ({"max_pdf_pages": 0}, "quotas.maxPdfPages"),
        ({"max_pdf_pages": 2**31}, "quotas.maxPdfPages"),
        ({"max_media_seconds": -5}, "quotas.maxMediaSeconds"),
    ):
        with pytest.raises(ValidationError) as refused:
            await spaces.upsert_space(db, "manuals", "Manuals", **limits)
        assert refused.value.field == field
    assert await spaces.get_space(db, "manuals") is None
    upserted = await spaces.upsert_space(db, "manuals", "Manuals", max_pdf_pages=5000, max_media_seconds=600)
    assert (upserted.after["max_pdf_pages"], upserted.after["max_media_seconds"]) == (5000, 600)
    async with db.transaction() as conn:  # the table holds the same line against a hand-made edit
        with pytest.raises(IntegrityError, match="spaces_max_pdf_pages_check"):
            await conn.execute(text("UPDATE spaces SET max_pdf_pages = 0 WHERE key = 'manuals'"))


def test_parse_grant_takes_curate() -> None:
    assert parse_grant("team=Curate") == ("team", Access.CURATE)
    with pytest.raises(ValidationError, match="Curate"):
        parse_grant("team=Admin")
    with pytest.raises(ValidationError):
        parse_grant("team")


async def test_rate_limit_bucket_is_shared_and_refills(db: Database) -> None:
    await make_space(db, "team")
    await make_user(db, "rita")
    _, plaintext = await apikeys.create_key(
        db, "limited", "rita", [apikeys.GrantSpec("team", Access.READ)], rate_limit=ratelimit.RateLimit(60, 3)
    )
    caller = await identity.authenticate(db, plaintext)
    assert (caller.key.rate_per_minute, caller.key.rate_burst) == (60, 3)
    for _ in range(3):
        await ratelimit.spend(db, caller.key)
    with pytest.raises(RateLimited) as limited:
        await ratelimit.spend(db, caller.key)
    assert limited.value.retry_after == 1  # one token a second at 60 a minute
    # Another pod (another pool) spends from the same bucket.
    other = Database(db.url, pool_size=1)
    try:
        with pytest.raises(RateLimited):
            await ratelimit.spend(other, caller.key)
    finally:
        await other.close()
    async with db.autocommit() as pg:
        await pg.execute("UPDATE key_rate_buckets SET at = at - interval '2 seconds'")
    await ratelimit.spend(db, caller.key)  # refilled while it waited
    with pytest.raises(ValidationError, match="requestsPerMinute"):
        ratelimit.RateLimit.parse(0)


LONG_TEXT = "\n\n".join(
    f"Section {n}: the travel policy says trains are booked second class for trips under {n + 3} hours. " * 3
    for n in range(12)
)


async def test_a_long_text_in_a_review_space_is_proposed_piece_by_piece(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer, curator = await _contexts(db)
    stored, made = await documents.save_text(db, writer, None, pipeline.prepare_text(LONG_TEXT))
    assert stored.created and made > 1
    assert (await memories.list_memories(db, writer)).total == 0
    pending = await memories.list_memories(db, writer, status="proposed", limit=50)
    assert pending.total == made and {m.document_id for m in pending.items} == {stored.document.id}
    assert await _found(db, writer, "travel") == []
    await review.decide_many(db, curator, [str(i) for i in await review.pending_ids(db, curator)], "accepted")
    assert (await memories.list_memories(db, writer)).total == made


async def test_a_long_text_over_max_bytes_is_refused_whole(db: Database) -> None:
    await make_space(db, "team", max_bytes=len(LONG_TEXT.encode()) - 1)
    writer, _ = await _contexts(db)
    with pytest.raises(QuotaExceeded) as refused:
        await documents.save_text(db, writer, None, pipeline.prepare_text(LONG_TEXT))
    assert refused.value.quota == "maxBytes" and refused.value.used == 0
    async with db.transaction([writer.space.id]) as conn:
        counts = (
            await conn.execute(
                text("SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM documents)")
            )
        ).one()
    assert tuple(counts) == (0, 0)


async def test_concurrent_uploads_never_pass_a_document_quota(db: Database, tmp_path: Path) -> None:
    await make_space(db, "team", max_documents=2)
    writer, _ = await _contexts(db)
    files = []
    for n in range(6):
        path = tmp_path / f"notes-{n}.md"
        path.write_text(f"# Notes {n}\n\nThe release train number {n} leaves on Thursday.\n")
        files.append(path)
    pool = Database(db.url, pool_size=6)
    try:
        results = await asyncio.gather(
            *(
                documents.create_upload(
                    pool,
                    writer,
                    path,
                    digest=memories.content_hash(path.read_text()),
                    size=path.stat().st_size,
                    media_type="text/markdown",
                    name=path.name,
                )
                for path in files
            ),
            return_exceptions=True,
        )
    finally:
        await pool.close()
    assert sum(not isinstance(r, BaseException) for r in results) == 2
    assert all(isinstance(r, QuotaExceeded) for r in results if isinstance(r, BaseException))
    async with db.transaction([writer.space.id]) as conn:
        assert (await conn.execute(text("SELECT count(*) FROM documents"))).scalar() == 2


async def test_concurrent_saves_never_pass_a_quota(db: Database) -> None:
    await make_space(db, "team", max_memories=3)
    writer, _ = await _contexts(db)
    pool = Database(db.url, pool_size=8)
    try:
        results = await asyncio.gather(
            *(memories.save_memory(pool, writer, f"Fact number {n} of the team.") for n in range(8)),
            return_exceptions=True,
        )
    finally:
        await pool.close()
    assert sum(not isinstance(r, BaseException) for r in results) == 3
    assert all(isinstance(r, QuotaExceeded) for r in results if isinstance(r, BaseException))
    assert (await memories.list_memories(db, writer)).total == 3
