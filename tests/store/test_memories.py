"""Saving, duplicates, versions, forgetting, listing and bad input, against real PostgreSQL."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from memory_mcp.store import apikeys, audit, documents, identity, memories, spaces, users
from memory_mcp.store.access import Access, Role, parse_role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database
from memory_mcp.store.errors import NotFound, QuotaExceeded, SecretRefused, ValidationError
from memory_mcp.store.models import SpaceContext
from tests.factories import make_key, make_space, make_user


async def writer(db: Database, space: str = "team", name: str | None = None) -> SpaceContext:
    if await spaces.get_space(db, space) is None:
        await make_space(db, space)
    user = await make_user(db, name=name)
    caller = await identity.authenticate(db, await make_key(db, user, {space: Access.READ_WRITE}, space))
    return identity.resolve_space(caller, None)


async def row_counts(db: Database, space: str) -> tuple[int, int]:
    found = await spaces.get_space(db, space)
    assert found is not None
    async with db.transaction([found.id]) as conn:
        docs = (await conn.execute(text("SELECT count(*) FROM documents"))).scalar_one()
        mems = (await conn.execute(text("SELECT count(*) FROM memories"))).scalar_one()
    return int(docs), int(mems)


async def test_save_creates_document_and_memory_with_attribution(db: Database) -> None:
    ctx = await writer(db, name="ada")
    result = await memories.save_memory(db, ctx, "  Release trains leave every second Tuesday.  ", "Process")
    assert result.created
    m = result.memory
    assert m.content == "Release trains leave every second Tuesday."
    assert m.category == "process" and m.version == 1 and m.is_latest and m.forgotten_at is None
    assert m.created_by == m.updated_by == "Ada" and m.created_by_user_id == ctx.caller.user.id
    doc = await documents.get_document(db, ctx.caller, m.document_id)
    assert doc.content == m.content and doc.status == "done" and doc.memory_ids == (m.id,)
    assert doc.created_by == "Ada"


async def test_exact_duplicate_returns_the_existing_memory(db: Database) -> None:
    ctx = await writer(db)
    first = await memories.save_memory(db, ctx, "The VPN gateway is vpn2.")
    again = await memories.save_memory(db, ctx, "The VPN gateway is vpn2.")
    assert not again.created and again.memory.id == first.memory.id
    assert await row_counts(db, "team") == (1, 1)


async def test_forget_keeps_history_and_names_who_forgot(db: Database) -> None:
    author = await writer(db, name="author")
    other = await writer(db, name="other-member")
    saved = (await memories.save_memory(db, author, "Lunch is at noon.")).memory
    result = await memories.forget_memory(db, other, "Lunch is at noon.")
    assert result.forgotten is not None and result.forgotten.id == saved.id
    assert result.forgotten.forgotten_at is not None
    assert result.forgotten.created_by == "Author" and result.forgotten.updated_by == "Other Member"
    assert (await memories.list_memories(db, author)).items == []  # live ones by default
    page = await memories.list_memories(db, author, status="forgotten")
    assert [m.id for m in page.items] == [saved.id]  # history stays listable
    events = await audit.list_events(db, "memory.forgotten")
    assert events and events[0].target_id == str(saved.id) and events[0].actor == "user:other-member"
    # The same text can be saved again afterwards: it is a new memory.
    again = await memories.save_memory(db, author, "Lunch is at noon.")
    assert again.created and again.memory.id != saved.id


async def test_forget_by_id_and_unknown_id(db: Database) -> None:
    ctx = await writer(db)
    saved = (await memories.save_memory(db, ctx, "Standup moved to 9:30.")).memory
    assert (await memories.forget_memory(db, ctx, str(saved.id))).forgotten is not None
    with pytest.raises(NotFound):
        await memories.forget_memory(db, ctx, str(uuid.uuid4()))


async def test_ambiguous_forget_forgets_nothing_and_lists_candidates(db: Database) -> None:
    ctx = await writer(db)
    await memories.save_memory(db, ctx, "The staging database runs PostgreSQL 16 on host db-stage-1.")
    await memories.save_memory(db, ctx, "The staging database runs PostgreSQL 16 on host db-stage-2.")
    result = await memories.forget_memory(db, ctx, "staging database PostgreSQL 16")
    assert result.forgotten is None
    assert len(result.candidates) == 2
    assert all(m.forgotten_at is None for m in (await memories.list_memories(db, ctx)).items)


async def test_new_version_supersedes_and_both_remain_listable(db: Database) -> None:
    ctx = await writer(db)
    old = (await memories.save_memory(db, ctx, "The deploy freeze starts on the 20th.", "release")).memory
    result = await memories.save_memory(
        db, ctx, "The deploy freeze starts on the 18th.", supersedes_id=old.id
    )
    new = result.memory
    assert new.version == 2 and new.supersedes_id == old.id and new.category == "release"
    assert result.superseded is not None and not result.superseded.is_latest
    listed = {m.id: m for m in (await memories.list_memories(db, ctx, status="all")).items}
    assert set(listed) == {old.id, new.id}
    assert [m.id for m in (await memories.list_memories(db, ctx, status="superseded")).items] == [old.id]
    assert listed[new.id].is_latest and not listed[old.id].is_latest


async def test_paging(db: Database) -> None:
    ctx = await writer(db)
    for i in range(23):
        await memories.save_memory(db, ctx, f"Fact number {i}.")
    first = await memories.list_memories(db, ctx, page=1, limit=10)
    last = await memories.list_memories(db, ctx, page=3, limit=10)
    assert len(first.items) == 10 and first.total == 23 and first.has_more
    assert len(last.items) == 3 and not last.has_more
    assert first.items[0].content == "Fact number 22."
    # Memories saved on their own are not documents to list (documents are uploads and long texts).
    docs = await documents.list_documents(db, ctx, page=1, limit=50)
    assert docs.total == 0 and docs.items == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda db, ctx: memories.save_memory(db, ctx, ""), "content"),
        (lambda db, ctx: memories.save_memory(db, ctx, "   \n "), "content"),
        (lambda db, ctx: memories.save_memory(db, ctx, "x" * 2001), "content"),
        (lambda db, ctx: memories.save_memory(db, ctx, "ok", category="bad\ncategory"), "category"),
        (lambda db, ctx: documents.get_document(db, ctx.caller, "not-a-uuid"), "documentId"),
        (lambda db, ctx: memories.list_memories(db, ctx, page=0), "page"),
        (lambda db, ctx: memories.list_memories(db, ctx, limit=51), "limit"),
        (lambda db, ctx: documents.list_documents(db, ctx, limit=0), "limit"),
    ],
)
async def test_bad_input_names_the_field_and_writes_nothing(db: Database, call, field: str) -> None:  # type: ignore[no-untyped-def]
    ctx = await writer(db)
    await memories.save_memory(db, ctx, "A baseline memory.")
    with pytest.raises(ValidationError) as err:
        await call(db, ctx)
    assert err.value.field == field
    assert await row_counts(db, "team") == (1, 1)


async def test_content_of_exactly_2000_characters_is_accepted(db: Database) -> None:
    ctx = await writer(db)
    assert (await memories.save_memory(db, ctx, "y" * 2000)).created


async def test_unknown_access_level_and_role_name_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        GrantSpec.parse("team", "Admin", 2)
    assert err.value.field == "grants[2].access"
    with pytest.raises(ValidationError) as err:
        parse_role("Owner")
    assert err.value.field == "role"


async def test_bad_identity_input_writes_nothing(db: Database) -> None:
    await make_space(db, "team")
    cases = [
        (spaces.upsert_space(db, "Not_A_Key", "x"), "key"),
        (spaces.upsert_space(db, "fine", "  "), "displayName"),
        (users.upsert_user(db, "bob", "not-an-email", "Bob", "Writer"), "email"),
        (users.upsert_user(db, "bob", "bob@example.com", "Bob", "Admin"), "role"),
    ]
    for coro, field in cases:
        with pytest.raises(ValidationError) as err:
            await coro
        assert err.value.field == field
    user = await make_user(db)
    with pytest.raises(ValidationError) as err:
        await apikeys.create_key(db, "k1", user, [])
    assert err.value.field == "grants"
    with pytest.raises(ValidationError) as err:
        await apikeys.create_key(db, "k1", user, [GrantSpec("team", Access.READ)], default_space="other")
    assert err.value.field == "defaultSpace"
    async with db.transaction() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM spaces"))).scalar_one() == 1
        assert (await conn.execute(text("SELECT count(*) FROM users WHERE name = 'bob'"))).scalar_one() == 0
        assert (await conn.execute(text("SELECT count(*) FROM api_keys"))).scalar_one() == 0


async def test_credentials_are_refused_and_not_stored(db: Database) -> None:
    ctx = await writer(db)
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(SecretRefused) as err:
        await memories.save_memory(db, ctx, f"The CI token is {secret}")
    assert "GitHub" in str(err.value)
    assert await row_counts(db, "team") == (0, 0)


async def test_reader_role_and_read_grant_refusals_say_why(db: Database) -> None:
    await make_space(db, "team")
    reader = await make_user(db, role=Role.READER)
    r_ctx = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, reader, {"team": "ReadWrite"})), None
    )
    with pytest.raises(Exception, match="Reader role"):
        await memories.save_memory(db, r_ctx, "x")
    writer_user = await make_user(db)
    w_ctx = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, writer_user, {"team": "Read"})), None
    )
    with pytest.raises(Exception, match="Read access to space 'team'"):
        await memories.save_memory(db, w_ctx, "x")


async def test_quota_refuses_writes_beyond_it(db: Database) -> None:
    await make_space(db, "small", max_memories=2)
    ctx = await writer(db, "small")
    await memories.save_memory(db, ctx, "First.")
    await memories.save_memory(db, ctx, "Second.")
    with pytest.raises(QuotaExceeded, match="quota of 2 memories"):
        await memories.save_memory(db, ctx, "Third.")
    assert await row_counts(db, "small") == (2, 2)
    # Forgetting frees room: the quota counts live memories.
    await memories.forget_memory(db, ctx, "First.")
    assert (await memories.save_memory(db, ctx, "Third.")).created


async def test_a_vector_is_stored_as_its_half_precision_values(db: Database) -> None:
    ctx = await writer(db)
    vector = [0.5, -0.25, 1 / 3, 1e-3] + [0.0] * 380
    saved = (await memories.save_memory(db, ctx, "Half precision keeps three digits.", None, vector)).memory
    async with db.transaction([ctx.space.id]) as conn:
        stored = (
            await conn.execute(
                text("SELECT CAST(embedding AS text) FROM memories WHERE id = :id"), {"id": saved.id}
            )
        ).scalar_one()
    values = [float(v) for v in stored.strip("[]").split(",")]
    assert len(values) == 384
    assert values[:3] == [0.5, -0.25, 0.33325195]  # 1/3 rounded to the nearest half float
    assert values[3] == pytest.approx(1e-3, rel=1e-3)
    assert values[4:] == [0.0] * 380
