"""Everyday administration from the command line: spaces, users and keys it creates and manages.

Thin over :mod:`.spaces`, :mod:`.users` and :mod:`.apikeys` (which write the audit events); what
this module adds is ownership: it creates objects as the command line's and refuses to change
objects a manifest declares (:class:`~.ownership.ManagedElsewhere` names their owner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from . import apikeys, documents, spaces, users, validation
from .access import Access
from .apikeys import BOOTSTRAP_KEY, GrantChange, GrantSpec
from .db import Database
from .errors import Conflict, NotFound, SpaceNotFound
from .models import Space, User
from .ownership import ManagedElsewhere, Owner, owner_of, require_owner

ACTOR = "cli"


@dataclass(frozen=True)
class SpaceRow:
    key: str
    display_name: str
    description: str
    deletion_policy: str
    managed_by: str
    detached: bool
    memories: int
    documents: int
    created_at: datetime


@dataclass(frozen=True)
class UserRow:
    name: str
    email: str
    display_name: str
    role: str
    active: bool
    managed_by: str
    keys: int


@dataclass(frozen=True)
class KeyRow:
    name: str
    user: str
    prefix: str
    grants: dict[str, str]
    default_space: str | None
    expires_at: datetime | None
    revoked_at: datetime | None
    managed_by: str
    created_at: datetime


# --- spaces -------------------------------------------------------------------------------------


async def create_space(
    db: Database,
    key: str,
    display_name: str | None,
    description: str = "",
    deletion_policy: str = "Retain",
    grant_to: Sequence[tuple[str, Access]] = (),
) -> tuple[Space, bool]:
    """A new command-line space; returns (space, restored). A retained space of the command line
    with this key is restored with its data; any other existing space is refused.

    ``grant_to`` names command-line keys (key name, access) to grant the new space to; they are
    checked before the space is made, so a mistyped key name leaves nothing behind.
    """
    validation.space_key(key)
    owner = await owner_of(db, "space", key)
    if owner is Owner.MANIFEST:
        raise ManagedElsewhere("space", key, owner)
    if owner is Owner.CLI and await spaces.get_space(db, key) is not None:
        raise Conflict(f"space '{key}' already exists")
    for name, _ in grant_to:
        await _require_cli_key(db, name)
    upserted = await spaces.upsert_space(
        db, key, display_name or key, description, deletion_policy, actor=ACTOR, managed_by=Owner.CLI
    )
    for name, access in grant_to:
        await apikeys.change_grants(db, name, add=[GrantSpec(key, access)], actor=ACTOR)
    return upserted.space, owner is not None


async def list_spaces(db: Database) -> list[SpaceRow]:
    """Every space, attached or retained, with its counts of live memories and documents."""
    async with db.transaction() as conn:
        ids = list((await conn.execute(text("SELECT id FROM spaces"))).scalars())
    async with db.transaction(ids) as conn:
        rows = await conn.execute(
            text(
                "SELECT s.*, (SELECT count(*) FROM memories m WHERE m.space_id = s.id AND m.is_latest "
                "AND m.forgotten_at IS NULL) AS memories, "
                f"(SELECT count(*) FROM documents d WHERE d.space_id = s.id AND {documents.LISTED}) AS documents "
                "FROM spaces s ORDER BY s.key"
            )
        )
        return [
            SpaceRow(
                r.key,
                r.display_name,
                r.description,
                r.deletion_policy,
                r.managed_by,
                r.detached_at is not None,
                int(r.memories),
                int(r.documents),
                r.created_at,
            )
            for r in rows
        ]


async def space_for_deletion(db: Database, key: str) -> SpaceRow:
    """The attached space ``key`` if the command line may delete it (to show before confirming)."""
    await require_owner(db, "space", key, Owner.CLI)
    found = next((s for s in await list_spaces(db) if s.key == key and not s.detached), None)
    if found is None:
        raise SpaceNotFound(key)
    return found


async def delete_space(db: Database, key: str) -> str:
    """Delete a command-line space by its deletion policy; returns the policy applied."""
    await require_owner(db, "space", key, Owner.CLI)
    applied = await spaces.delete_space(db, key, actor=ACTOR)
    if applied is None:
        raise SpaceNotFound(key)
    return applied


# --- users --------------------------------------------------------------------------------------


async def create_user(db: Database, name: str, email: str, role: str, display_name: str | None) -> User:
    validation.object_name(name)
    owner = await owner_of(db, "user", name)
    if owner is Owner.MANIFEST:
        raise ManagedElsewhere("user", name, owner)
    if owner is not None:
        raise Conflict(f"user '{name}' already exists")
    upserted = await users.upsert_user(
        db, name, email, display_name or name, role, actor=ACTOR, managed_by=Owner.CLI
    )
    return upserted.user


async def list_users(db: Database) -> list[UserRow]:
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                "SELECT u.*, (SELECT count(*) FROM api_keys k WHERE k.user_id = u.id AND k.revoked_at IS NULL) "
                "AS keys FROM users u ORDER BY u.name"
            )
        )
        return [
            UserRow(r.name, r.email, r.display_name, r.role, r.active, r.managed_by, int(r.keys))
            for r in rows
        ]


async def set_user_active(db: Database, name: str, active: bool) -> bool:
    """Activate or deactivate a command-line user; returns False when it already was so."""
    await require_owner(db, "user", name, Owner.CLI)
    user = await users.get_user(db, name)
    if user is None:
        raise NotFound("user", name)
    upserted = await users.upsert_user(
        db, name, user.email, user.display_name, user.role, active, actor=ACTOR, managed_by=Owner.CLI
    )
    return upserted.changed


# --- keys ---------------------------------------------------------------------------------------


def parse_grant(value: str, index: int = 0) -> GrantSpec:
    """``SPACE=ACCESS`` as the command line takes it, checked by the store's own grant parser."""
    space, sep, access = value.partition("=")
    if not sep:
        return GrantSpec.parse(value, "", index)
    return GrantSpec.parse(space.strip(), access.strip(), index)


async def create_key(
    db: Database,
    name: str,
    user: str,
    grants: Sequence[GrantSpec],
    default_space: str | None = None,
    expires_at: datetime | None = None,
) -> str:
    """A new command-line key for ``user`` (any user); returns its plaintext, to be shown once."""
    validation.object_name(name)
    owner = await owner_of(db, "api key", name)
    if owner is Owner.MANIFEST:
        raise ManagedElsewhere("api key", name, owner)
    _, plaintext = await apikeys.create_key(
        db, name, user, grants, default_space, expires_at, actor=ACTOR, managed_by=Owner.CLI
    )
    return plaintext


async def list_keys(db: Database) -> list[KeyRow]:
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                "SELECT k.*, u.name AS user_name, ds.key AS default_key, "
                "COALESCE((SELECT json_object_agg(s.key, g.access) FROM key_grants g "
                "JOIN spaces s ON s.id = g.space_id WHERE g.key_id = k.id), '{}') AS grants "
                "FROM api_keys k JOIN users u ON u.id = k.user_id "
                "LEFT JOIN spaces ds ON ds.id = k.default_space_id ORDER BY k.name"
            )
        )
        return [
            KeyRow(
                r.name,
                r.user_name,
                r.prefix,
                dict(sorted(r.grants.items())),
                r.default_key,
                r.expires_at,
                r.revoked_at,
                r.managed_by,
                r.created_at,
            )
            for r in rows
        ]


async def grant_key(db: Database, name: str, grants: Sequence[GrantSpec]) -> GrantChange:
    """Add grants to a command-line key (a space it holds already takes the access given); the
    key's next request sees them. A key of a manifest is refused: its manifest declares its grants."""
    await _require_cli_key(db, name)
    return await apikeys.change_grants(db, name, add=grants, actor=ACTOR)


async def ungrant_key(db: Database, name: str, space_keys: Sequence[str]) -> GrantChange:
    """Take grants away from a command-line key; its next request no longer sees those spaces."""
    checked = [validation.space_key(k, f"spaces[{i}]") for i, k in enumerate(space_keys)]
    await _require_cli_key(db, name)
    return await apikeys.change_grants(db, name, remove=checked, actor=ACTOR)


async def _require_cli_key(db: Database, name: str) -> None:
    owner = await owner_of(db, "api key", name)
    if owner is None:
        raise NotFound("api key", name)
    if owner is Owner.MANIFEST:
        raise ManagedElsewhere("api key", name, owner, field="spec.grants")


async def bootstrap_key(db: Database) -> str | None:
    """The name of the key `serve` made on first start, while it exists, works and is the command
    line's; None otherwise (a team install that turned the bootstrap off, or revoked it)."""
    async with db.transaction() as conn:
        live = (
            await conn.execute(
                text(
                    "SELECT 1 FROM api_keys WHERE name = :n AND managed_by = 'cli' AND revoked_at IS NULL "
                    "AND (expires_at IS NULL OR expires_at > now())"
                ),
                {"n": BOOTSTRAP_KEY},
            )
        ).first()
    return BOOTSTRAP_KEY if live else None


async def revoke_key(db: Database, name: str) -> tuple[bool, Owner]:
    """Revoke a key (it stops working at once): whether it was live until now, and who manages it.

    Unlike every other change, revoking works on keys of manifests too: it is what stops a leaked
    key now, and `apply` has no other way to do it. Their manifest still declares them, so the
    caller says so: the next apply or operator resync gives such a key a working secret again.
    """
    owner = await owner_of(db, "api key", name)
    if owner is None:
        raise NotFound("api key", name)
    return await apikeys.revoke_key(db, name, actor=ACTOR), owner
