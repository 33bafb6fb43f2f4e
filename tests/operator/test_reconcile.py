"""The reconcilers on their own, against the real database: idempotence, errors, deletion policies.

The secret store here is the one ``memory-mcp apply`` uses (keys in memory); the Kubernetes
Secret store is exercised through the real operator in test_operator_*.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text

from memory_mcp.apply import MemoryKeyStore
from memory_mcp.operator.outcome import Outcome
from memory_mcp.operator.reconcile import (
    reconcile_apikey,
    reconcile_space,
    reconcile_user,
    remove_apikey,
    remove_space,
    remove_user,
)
from memory_mcp.operator.secrets import SecretRef
from memory_mcp.store import apikeys, identity, memories, spaces, users
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AuthenticationFailed, ValidationError
from tests.operator.support import USER, eventually, key_spec

SPACE = {"displayName": "Team Alpha", "description": "What team alpha knows", "deletionPolicy": "Retain"}


async def declare_basics(db: Database) -> None:
    assert (await reconcile_space(db, "alpha", SPACE)).ready
    assert (await reconcile_user(db, "ada", USER)).ready


async def test_space_twice_changes_nothing_the_second_time(db: Database) -> None:
    first = await reconcile_space(db, "alpha", SPACE)
    assert (first.ready, first.reason, first.changes) == (True, "Reconciled", ("created space 'alpha'",))
    assert first.status == {"memoryCount": 0, "documentCount": 0}
    second = await reconcile_space(db, "alpha", SPACE)
    assert second.ready and not second.changed
    updated = await reconcile_space(db, "alpha", {**SPACE, "displayName": "Team A"})
    assert updated.changes == ("updated space 'alpha': displayName 'Team Alpha' -> 'Team A'",)
    space = await spaces.get_space(db, "alpha")
    assert space is not None and space.display_name == "Team A"


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("alpha", {**SPACE, "deletionPolicy": "Keep"}, "spec.deletionPolicy"),
        ("alpha", {"description": "no display name"}, "spec.displayName"),
        ("alpha", {**SPACE, "quotas": {}}, "spec.quotas"),
        ("Alpha_Team", SPACE, "metadata.name"),
    ],
)
async def test_invalid_space_names_the_field(
    db: Database, name: str, spec: dict[str, Any], field: str
) -> None:
    outcome = await reconcile_space(db, name, spec)
    assert (outcome.ready, outcome.reason) == (False, "InvalidSpec")
    assert outcome.message.startswith(f"{field}: ")
    assert await spaces.get_space(db, name) is None


async def test_key_is_issued_once_and_grants_follow_the_spec(db: Database) -> None:
    await declare_basics(db)
    await reconcile_space(db, "handbook", {"displayName": "Handbook"})
    store = MemoryKeyStore()
    first = await reconcile_apikey(db, "ada-laptop", key_spec(), store)
    assert first.ready and first.new_key is not None
    assert first.changes == ("issued a new key for user 'ada'",)
    assert first.status["keyPrefix"] == first.new_key.split("_")[1]
    assert store.keys[SecretRef("agents", "ada-key")].plaintext == first.new_key
    caller = await identity.authenticate(db, first.new_key)
    assert {g.space.key: g.access.value for g in caller.grants} == {"alpha": "ReadWrite"}

    again = await reconcile_apikey(db, "ada-laptop", key_spec(), store)
    assert again.ready and again.new_key is None and not again.changed

    grants = [{"space": "alpha", "access": "Read"}, {"space": "handbook", "access": "Read"}]
    changed = await reconcile_apikey(db, "ada-laptop", key_spec(grants=grants), store)
    assert changed.new_key is None
    assert changed.changes == ("set grants to alpha=Read, handbook=Read (were alpha=ReadWrite)",)
    caller = await identity.authenticate(db, first.new_key)
    assert {g.space.key: g.access.value for g in caller.grants} == {"alpha": "Read", "handbook": "Read"}


async def test_key_status_names_the_space_a_request_without_one_uses(db: Database) -> None:
    await declare_basics(db)
    await reconcile_space(db, "handbook", {"displayName": "Handbook"})
    store = MemoryKeyStore()
    spec = {field: value for field, value in key_spec().items() if field != "defaultSpace"}
    only = await reconcile_apikey(db, "k", spec, store)
    assert only.status["defaultSpace"] == "alpha"
    assert only.new_key is not None
    both = [{"space": "alpha", "access": "ReadWrite"}, {"space": "handbook", "access": "Read"}]
    several = await reconcile_apikey(db, "k", {**spec, "grants": both}, store)
    assert several.status["defaultSpace"] is None
    with pytest.raises(ValidationError):
        identity.resolve_space(await identity.authenticate(db, only.new_key), None)
    declared = await reconcile_apikey(db, "k", {**spec, "grants": both, "defaultSpace": "handbook"}, store)
    assert declared.status["defaultSpace"] == "handbook"
    # The status says what the server does.
    context = identity.resolve_space(await identity.authenticate(db, only.new_key), None)
    assert context.space.key == "handbook"


async def test_rotation_without_a_key_store_happens_once_per_generation(db: Database) -> None:
    await declare_basics(db)
    old = (await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())).new_key
    assert old is not None
    rotated = await reconcile_apikey(db, "k", key_spec(rotationGeneration=1), MemoryKeyStore())
    assert rotated.new_key not in (None, old)
    assert rotated.changes == ("rotated the key (rotationGeneration 0 -> 1)",)
    assert rotated.status["rotationGeneration"] == 1
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, old)
    assert rotated.new_key is not None
    await identity.authenticate(db, rotated.new_key)
    # A fresh store knows nothing, as in a second `apply`: the database remembers the generation.
    again = await reconcile_apikey(db, "k", key_spec(rotationGeneration=1), MemoryKeyStore())
    assert again.new_key is None and not again.changed


async def test_a_lost_row_is_restored_from_the_stored_key(db: Database) -> None:
    await declare_basics(db)
    store = MemoryKeyStore()
    key = (await reconcile_apikey(db, "k", key_spec(), store)).new_key
    assert key is not None
    assert await apikeys.delete_key(db, "k")
    repaired = await reconcile_apikey(db, "k", key_spec(), store)
    assert repaired.new_key is None
    assert repaired.changes == ("restored the key from Secret agents/ada-key; the database had lost it",)
    assert (await identity.authenticate(db, key)).key.name == "k"


async def _someone_waits_for_a_lock(db: Database) -> bool:
    async with db.transaction() as conn:
        return bool((await conn.execute(text("SELECT count(*) FROM pg_locks WHERE NOT granted"))).scalar())


async def _edit_while_a_reconcile_waits(
    db: Database, row: str, reconcile: Callable[[], Awaitable[Outcome]], edit: str
) -> Outcome:
    """Run ``reconcile`` while a hand-made transaction holds ``row`` (a ``SELECT ... FOR UPDATE``):
    the reconcile reads, then waits for the row; the transaction runs ``edit`` and commits, and the
    reconcile goes on."""
    async with db.transaction() as conn:
        await conn.execute(text(row))
        task = asyncio.create_task(reconcile())
        await eventually(lambda: _someone_waits_for_a_lock(db), what="the reconcile waiting for the row")
        await conn.execute(text(edit))
    return await task


async def test_a_user_edited_by_hand_as_a_reconcile_reads_is_named_in_its_report(db: Database) -> None:
    deactivated = {**USER, "active": False}
    assert (await reconcile_user(db, "ada", deactivated)).ready
    outcome = await _edit_while_a_reconcile_waits(
        db,
        "SELECT 1 FROM users WHERE name = 'ada' FOR UPDATE",
        lambda: reconcile_user(db, "ada", deactivated),
        "UPDATE users SET active = true WHERE name = 'ada'",
    )
    assert outcome.changes == ("deactivated user 'ada': none of their keys work any more",)
    user = await users.get_user(db, "ada")
    assert user is not None and not user.active


async def test_a_space_edited_by_hand_as_a_reconcile_reads_is_named_in_its_report(db: Database) -> None:
    await declare_basics(db)
    outcome = await _edit_while_a_reconcile_waits(
        db,
        "SELECT 1 FROM spaces WHERE key = 'alpha' FOR UPDATE",
        lambda: reconcile_space(db, "alpha", SPACE),
        "UPDATE spaces SET display_name = 'Hijacked' WHERE key = 'alpha'",
    )
    assert outcome.changes == ("updated space 'alpha': displayName 'Hijacked' -> 'Team Alpha'",)


def _key_race(db: Database, store: MemoryKeyStore, edit: str) -> Awaitable[Outcome]:
    return _edit_while_a_reconcile_waits(
        db,
        "SELECT 1 FROM api_keys WHERE name = 'k' FOR UPDATE",
        lambda: reconcile_apikey(db, "k", key_spec(), store),
        edit,
    )


async def test_grants_added_by_hand_as_a_reconcile_reads_are_named_in_its_report(db: Database) -> None:
    await declare_basics(db)
    await reconcile_space(db, "secret-plans", {"displayName": "Secret plans"})
    store = MemoryKeyStore()
    key = (await reconcile_apikey(db, "k", key_spec(), store)).new_key
    assert key is not None
    outcome = await _key_race(
        db,
        store,
        "INSERT INTO key_grants (key_id, space_id, access) SELECT k.id, s.id, 'ReadWrite' "
        "FROM api_keys k, spaces s WHERE k.name = 'k' AND s.key = 'secret-plans'",
    )
    assert outcome.ready
    assert outcome.changes == (
        "set grants to alpha=ReadWrite (were alpha=ReadWrite, secret-plans=ReadWrite)",
    )
    caller = await identity.authenticate(db, key)
    assert {g.space.key: g.access.value for g in caller.grants} == {"alpha": "ReadWrite"}


async def test_a_row_deleted_as_a_reconcile_reads_it_is_restored_in_that_reconcile(db: Database) -> None:
    await declare_basics(db)
    store = MemoryKeyStore()
    key = (await reconcile_apikey(db, "k", key_spec(), store)).new_key
    assert key is not None
    outcome = await _key_race(db, store, "DELETE FROM api_keys WHERE name = 'k'")
    assert (outcome.ready, outcome.reason) == (True, "Reconciled")
    assert outcome.changes == ("restored the key from Secret agents/ada-key; the database had lost it",)
    assert (await identity.authenticate(db, key)).key.name == "k"


@pytest.mark.parametrize(
    ("spec", "reason", "message"),
    [
        (key_spec(user="grace"), "UserNotFound", "User 'grace' does not exist"),
        (
            key_spec(grants=[{"space": "alpha", "access": "Read"}, {"space": "beta", "access": "Read"}]),
            "SpaceNotFound",
            "Granted space 'beta' does not exist",
        ),
        (
            key_spec(defaultSpace="beta"),
            "InvalidSpec",
            "spec.defaultSpace: 'beta' must be one of the granted",
        ),
        (
            key_spec(grants=[{"space": "alpha", "access": "Write"}]),
            "InvalidSpec",
            "spec.grants[0].access: must be",
        ),
        (key_spec(grants=[]), "InvalidSpec", "spec.grants: must list at least one"),
        (key_spec(expiresAt="next tuesday"), "InvalidSpec", "spec.expiresAt: must be an RFC 3339"),
        (key_spec(secretRef={"namespace": "agents"}), "InvalidSpec", "spec.secretRef.name"),
    ],
)
async def test_apikey_refusals_are_clear(
    db: Database, spec: dict[str, Any], reason: str, message: str
) -> None:
    await declare_basics(db)
    store = MemoryKeyStore()
    outcome = await reconcile_apikey(db, "k", spec, store)
    assert (outcome.ready, outcome.reason) == (False, reason)
    assert outcome.message.startswith(message)
    assert outcome.retry == (reason in ("UserNotFound", "SpaceNotFound"))
    assert outcome.new_key is None and not store.keys
    assert await apikeys.get_key(db, "k") is None


async def test_a_missing_space_is_waited_for(db: Database) -> None:
    await reconcile_user(db, "ada", USER)
    waiting = await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())
    assert (waiting.reason, waiting.retry) == ("SpaceNotFound", True)
    await reconcile_space(db, "alpha", SPACE)
    ready = await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())
    assert ready.ready and ready.new_key is not None


async def test_user_deactivation_stops_keys_and_is_idempotent(db: Database) -> None:
    await declare_basics(db)
    key = (await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())).new_key
    assert key is not None
    off = await reconcile_user(db, "ada", {**USER, "active": False})
    assert off.changes == ("deactivated user 'ada': none of their keys work any more",)
    assert off.message == "User 'ada' is deactivated: none of their keys work."
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    assert not (await reconcile_user(db, "ada", {**USER, "active": False})).changed
    key_status = await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())
    assert key_status.ready and "deactivated" in key_status.message
    demoted = await reconcile_user(db, "ada", {**USER, "role": "Reader"})
    assert demoted.changes == (
        "activated user 'ada'",
        "changed the role of 'ada' from Writer to Reader",
    )
    caller = await identity.authenticate(db, key)
    assert caller.grants[0].effective.value == "Read"


async def test_user_defaults_and_email_conflict(db: Database) -> None:
    created = await reconcile_user(db, "ada", {"email": "ada@example.com", "displayName": "Ada"})
    assert created.changes == ("created user 'ada' (Reader)",)
    clash = await reconcile_user(db, "grace", {"email": "ada@example.com", "displayName": "Grace"})
    assert (clash.ready, clash.reason) == (False, "Conflict")
    assert "already belongs to user 'ada'" in clash.message
    removed = await remove_user(db, "ada")
    assert removed.changed and await users.get_user(db, "ada") is None
    assert not (await remove_user(db, "ada")).changed


async def seed_memory(db: Database) -> None:
    await reconcile_user(db, "ada", USER)
    key = (await reconcile_apikey(db, "k", key_spec(), MemoryKeyStore())).new_key
    assert key is not None
    caller = await identity.authenticate(db, key)
    await memories.save_memory(
        db, identity.resolve_space(caller, "alpha"), "The build runs nightly at 02:00."
    )


async def test_retain_detaches_and_redeclaring_restores(db: Database) -> None:
    await reconcile_space(db, "alpha", SPACE)
    await seed_memory(db)
    gone = await remove_space(db, "alpha", SPACE)
    assert (gone.reason, gone.changed) == ("Retained", True)
    assert await spaces.get_space(db, "alpha") is None
    back = await reconcile_space(db, "alpha", SPACE)
    assert back.changes == ("restored retained space 'alpha' with 1 memory and 0 documents",)
    assert back.status == {"memoryCount": 1, "documentCount": 0}  # a memory saved alone is no document


async def test_delete_policy_removes_the_data(db: Database) -> None:
    await reconcile_space(db, "alpha", SPACE)
    await seed_memory(db)
    # The policy declared last applies even if the change was never reconciled.
    gone = await remove_space(db, "alpha", {**SPACE, "deletionPolicy": "Delete"})
    assert (gone.reason, gone.changed) == ("Deleted", True)
    back = await reconcile_space(db, "alpha", SPACE)
    assert back.changes == ("created space 'alpha'",)
    assert back.status == {"memoryCount": 0, "documentCount": 0}
    assert not (await remove_space(db, "missing", SPACE)).changed


async def test_removing_a_key_stops_it_and_drops_the_stored_copy(db: Database) -> None:
    await declare_basics(db)
    store = MemoryKeyStore()
    key = (await reconcile_apikey(db, "k", key_spec(), store)).new_key
    assert key is not None
    removed = await remove_apikey(db, "k", key_spec(), store)
    assert removed.changes == ("deleted key 'k'", "deleted Secret agents/ada-key")
    assert not store.keys
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    assert not (await remove_apikey(db, "k", key_spec(), store)).changed
