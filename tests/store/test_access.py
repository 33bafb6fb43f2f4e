"""The access contract: role x grant x operation, and what a key without a grant can learn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_mcp.store import apikeys, identity, memories, review, spaces, users
from memory_mcp.store.access import Access, Role, effective_access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AccessDenied, AuthenticationFailed, SpaceNotFound
from tests.factories import make_key, make_space, make_user

GRANTS = (None, Access.READ, Access.READ_WRITE, Access.CURATE)
OPERATIONS = ("read", "write", "forget", "curate")


def expected(role: Role, grant: Access | None, operation: str) -> type[Exception] | None:
    if grant is None:
        return SpaceNotFound
    if operation == "read":
        return None
    effective = effective_access(role, grant)
    if operation == "curate":
        return None if effective is Access.CURATE else AccessDenied
    return None if effective in (Access.READ_WRITE, Access.CURATE) else AccessDenied


async def run(db: Database, ctx_tag: str, caller: identity.Caller, operation: str, seeded: str) -> None:
    ctx = identity.resolve_space(caller, ctx_tag)
    if operation == "read":
        await memories.list_memories(db, ctx)
    elif operation == "write":
        await memories.save_memory(db, ctx, "The build server lives in rack 7.")
    elif operation == "forget":
        await memories.forget_memory(db, ctx, "The office plant is a ficus.")
    else:
        result = await review.decide(db, ctx, seeded, "accepted")
        assert result.memory.status == "live" and result.memory.reviewed_by is not None


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("grant", GRANTS, ids=lambda g: g.value if g else "none")
@pytest.mark.parametrize("operation", OPERATIONS)
async def test_access_matrix(db: Database, role: Role, grant: Access | None, operation: str) -> None:
    await make_space(db, "home")
    # Curating needs something to curate: a proposal, in a space under Review.
    await make_space(db, "target", write_policy="Review" if operation == "curate" else "Direct")
    # Seed the target space with a memory to forget (or accept), written by an unrelated Writer.
    seeder = await make_user(db)
    seed_key = await make_key(db, seeder, {"target": Access.READ_WRITE})
    seed_caller = await identity.authenticate(db, seed_key)
    seeded = await memories.save_memory(
        db, identity.resolve_space(seed_caller, "target"), "The office plant is a ficus."
    )
    assert seeded.proposed is (operation == "curate")

    user = await make_user(db, role=role)
    grants: dict[str, Access | str] = {"home": Access.READ_WRITE}
    if grant is not None:
        grants["target"] = grant
    caller = await identity.authenticate(db, await make_key(db, user, grants, default="home"))

    error = expected(role, grant, operation)
    if error is None:
        await run(db, "target", caller, operation, str(seeded.memory.id))
    else:
        with pytest.raises(error):
            await run(db, "target", caller, operation, str(seeded.memory.id))


def test_effective_access_is_the_lower_of_role_and_grant() -> None:
    assert effective_access(Role.READER, Access.READ_WRITE) is Access.READ
    assert effective_access(Role.READER, Access.READ) is Access.READ
    assert effective_access(Role.WRITER, Access.READ) is Access.READ
    assert effective_access(Role.WRITER, Access.READ_WRITE) is Access.READ_WRITE
    # Curate is effective only with the Writer role.
    assert effective_access(Role.WRITER, Access.CURATE) is Access.CURATE
    assert effective_access(Role.READER, Access.CURATE) is Access.READ


async def test_a_reader_with_a_curate_grant_is_refused_and_told_why(db: Database) -> None:
    await make_space(db, "team", write_policy="Review")
    writer = await identity.authenticate(db, await make_key(db, await make_user(db), {"team": "ReadWrite"}))
    proposal = await memories.save_memory(db, identity.resolve_space(writer, "team"), "Stand-up is at 9:30.")
    reader = await make_user(db, role=Role.READER)
    caller = await identity.authenticate(db, await make_key(db, reader, {"team": "Curate"}))
    ctx = identity.resolve_space(caller, "team")
    assert ctx.access is Access.READ
    with pytest.raises(AccessDenied, match="Reader role"):
        await review.decide(db, ctx, str(proposal.memory.id), "accepted")
    grants = {s.space.key: s.access for s in await identity.list_spaces(db, caller)}
    assert grants == {"team": Access.READ}
    assert caller.grants[0].access is Access.CURATE  # as granted; effective is Read


async def test_ungranted_space_looks_exactly_like_a_missing_one(db: Database) -> None:
    await make_space(db, "home")
    await make_space(db, "finance", deletion_policy="Delete")
    user = await make_user(db)
    caller = await identity.authenticate(db, await make_key(db, user, {"home": "ReadWrite"}))

    with pytest.raises(SpaceNotFound) as exists_without_grant:
        identity.resolve_space(caller, "finance")
    assert await spaces.delete_space(db, "finance") == "Delete"
    with pytest.raises(SpaceNotFound) as missing:
        identity.resolve_space(caller, "finance")
    assert type(exists_without_grant.value) is type(missing.value)
    assert str(exists_without_grant.value) == str(missing.value) == "space 'finance' not found"
    assert [s.space.key for s in await identity.list_spaces(db, caller)] == ["home"]


async def test_refused_keys(db: Database) -> None:
    await make_space(db, "home")
    user = await make_user(db)
    good = await make_key(db, user, {"home": "Read"})
    assert (await identity.authenticate(db, good)).user.name == user

    expired = await make_key(db, user, {"home": "Read"}, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    revoked_name = "to-revoke"
    revoked = await make_key(db, user, {"home": "Read"}, name=revoked_name)
    assert await apikeys.revoke_key(db, revoked_name)
    for bad in (expired, revoked, good[:-1] + ("A" if good[-1] != "A" else "B"), "mmk_short", "", "nonsense"):
        with pytest.raises(AuthenticationFailed) as err:
            await identity.authenticate(db, bad)
        assert str(err.value) == "invalid, expired or revoked API key"

    # Deactivating the user stops every one of their keys at once.
    other = await make_key(db, user, {"home": "ReadWrite"})
    await users.upsert_user(db, user, f"{user}@example.com", "Someone", Role.WRITER, active=False)
    for key in (good, other):
        with pytest.raises(AuthenticationFailed):
            await identity.authenticate(db, key)


async def test_rotation_replaces_the_secret(db: Database) -> None:
    await make_space(db, "home")
    user = await make_user(db)
    old = await make_key(db, user, {"home": "Read"}, name="laptop")
    new = await apikeys.rotate_key(db, "laptop")
    assert new != old
    assert (await identity.authenticate(db, new)).key.name == "laptop"
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, old)


async def test_space_resolution_order(db: Database) -> None:
    for key in ("alpha", "beta", "gamma"):
        await make_space(db, key)
    user = await make_user(db)
    plaintext = await make_key(
        db, user, {"alpha": "ReadWrite", "beta": "Read", "gamma": "Read"}, default="alpha"
    )
    caller = await identity.authenticate(db, plaintext)
    assert identity.resolve_space(caller, None).space.key == "alpha"  # default
    assert identity.resolve_space(caller, "gamma").space.key == "gamma"  # one-off tag

    await identity.set_active_space(db, caller, "beta")
    caller = await identity.authenticate(db, plaintext)
    assert identity.resolve_space(caller, None).space.key == "beta"  # active beats default
    assert identity.resolve_space(caller, None).access is Access.READ
    assert identity.resolve_space(caller, "gamma").space.key == "gamma"
    # A one-off tag never moved the active space.
    caller = await identity.authenticate(db, plaintext)
    assert identity.resolve_space(caller, None).space.key == "beta"
    with pytest.raises(SpaceNotFound):
        await identity.set_active_space(db, caller, "delta")


async def test_list_spaces_reports_effective_access_and_counts(db: Database) -> None:
    await make_space(db, "alpha")
    await make_space(db, "beta")
    user = await make_user(db, role=Role.WRITER)
    caller = await identity.authenticate(
        db, await make_key(db, user, {"alpha": "ReadWrite", "beta": "Read"}, "alpha")
    )
    ctx = identity.resolve_space(caller, "alpha")
    await memories.save_memory(db, ctx, "Alpha ships on Fridays.")
    await memories.save_memory(db, ctx, "Alpha's on-call rotation is weekly.")
    summaries = {s.space.key: s for s in await identity.list_spaces(db, caller)}
    assert summaries["alpha"].access is Access.READ_WRITE and summaries["alpha"].active
    # Memories saved on their own are not documents (documents are uploads and long texts).
    assert summaries["alpha"].memory_count == 2 and summaries["alpha"].document_count == 0
    assert summaries["alpha"].last_activity is not None
    assert summaries["beta"].access is Access.READ and not summaries["beta"].active
    assert summaries["beta"].memory_count == 0 and summaries["beta"].last_activity is None
