"""API keys and their grants: created once, shown once, rotated, revoked."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import keys, validation
from .access import Access, parse_access
from .audit import record
from .db import Database
from .errors import Conflict, NotFound, SpaceNotFound, ValidationError
from .models import ApiKey
from .ratelimit import RateLimit

# The key `memory-mcp serve` makes on a new database, for its `admin` user.
BOOTSTRAP_KEY = "admin-bootstrap"

KEY_COLUMNS = (
    "k.id, k.name, k.prefix, k.user_id, k.default_space_id, k.active_space_id, k.expires_at, k.revoked_at, "
    "k.rate_per_minute, k.rate_burst"
)


@dataclass(frozen=True)
class GrantSpec:
    """A grant as declared: a space key and an access level."""

    space: str
    access: Access

    @classmethod
    def parse(cls, space: str, access: str, index: int = 0) -> GrantSpec:
        return cls(
            validation.space_key(space, f"grants[{index}].space"),
            parse_access(access, f"grants[{index}].access"),
        )


def key_from_row(row: Any) -> ApiKey:
    return ApiKey(
        row.id,
        row.name,
        row.prefix,
        row.user_id,
        row.default_space_id,
        row.active_space_id,
        row.expires_at,
        row.revoked_at,
        row.rate_per_minute,
        row.rate_burst,
    )


async def _space_ids(conn: AsyncConnection, grants: Sequence[GrantSpec]) -> dict[str, uuid.UUID]:
    found = {
        r.key: r.id
        for r in await conn.execute(
            text("SELECT id, key FROM spaces WHERE key = ANY(:keys) AND detached_at IS NULL"),
            {"keys": [g.space for g in grants]},
        )
    }
    for g in grants:
        if g.space not in found:
            raise SpaceNotFound(g.space)
    return found


def _check_grants(grants: Sequence[GrantSpec], default_space: str | None) -> None:
    if not grants:
        raise ValidationError("grants", "at least one grant is required")
    seen = [g.space for g in grants]
    if len(set(seen)) != len(seen):
        raise ValidationError("grants", "each space may be granted once")
    if default_space is not None and default_space not in seen:
        raise ValidationError("defaultSpace", f"'{default_space}' is not one of the granted spaces")


async def create_key(
    db: Database,
    name: str,
    user: str,
    grants: Sequence[GrantSpec],
    default_space: str | None = None,
    expires_at: datetime | None = None,
    actor: str = "system",
    plaintext: str | None = None,
    rotation_generation: int | None = None,
    managed_by: str = "manifest",
    rate_limit: RateLimit | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for user ``user`` (a user name); returns the key and its plaintext, shown once.

    ``plaintext`` imports a key generated elsewhere (the operator writes a key to its Secret before
    the database sees it); only its hash is stored. ``rotation_generation`` is recorded in the audit
    trail so a later reconcile knows which declared generation the key was made for. ``managed_by``
    names the tool that manages the key (see :mod:`.ownership`).
    """
    validation.object_name(name)
    _check_grants(grants, default_space)
    new = keys.generate_key() if plaintext is None else _known_key(plaintext)
    details: dict[str, Any] = {"user": user, "grants": {g.space: g.access.value for g in grants}}
    if rotation_generation is not None:
        details["rotationGeneration"] = rotation_generation
    async with db.transaction() as conn:
        owner = (await conn.execute(text("SELECT id FROM users WHERE name = :n"), {"n": user})).first()
        if owner is None:
            raise NotFound("user", user)
        if (await conn.execute(text("SELECT 1 FROM api_keys WHERE name = :n"), {"n": name})).first():
            raise Conflict(f"an API key named '{name}' already exists")
        ids = await _space_ids(conn, grants)
        row = (
            await conn.execute(
                text(
                    "INSERT INTO api_keys (user_id, name, prefix, key_hash, default_space_id, expires_at, "
                    "managed_by, rate_per_minute, rate_burst) VALUES (:u, :n, :p, :h, :d, :e, :m, :rate, :burst) "
                    "RETURNING *"
                ),
                {
                    "u": owner.id,
                    "n": name,
                    "p": new.prefix,
                    "h": new.hash,
                    "d": ids[default_space] if default_space else None,
                    "e": expires_at,
                    "m": managed_by,
                    "rate": rate_limit.requests_per_minute if rate_limit else None,
                    "burst": rate_limit.burst if rate_limit else None,
                },
            )
        ).one()
        await _write_grants(conn, row.id, grants, ids)
        await record(conn, actor, "key.created", "api_key", name, details=details)
    return key_from_row(row), new.plaintext


def _known_key(plaintext: str) -> keys.NewKey:
    prefix = keys.prefix_of(plaintext)
    if prefix is None:
        raise ValidationError("key", "is not a Memory-MCP API key (expected mmk_<prefix>_<secret>)")
    return keys.NewKey(plaintext=plaintext, prefix=prefix, hash=keys.hash_key(plaintext))


async def _grants_of(conn: AsyncConnection, key_id: uuid.UUID) -> dict[str, str]:
    """A key's grants as ``{space key: access}``."""
    rows = await conn.execute(
        text(
            "SELECT s.key, g.access FROM key_grants g JOIN spaces s ON s.id = g.space_id WHERE g.key_id = :k"
        ),
        {"k": key_id},
    )
    return {r.key: r.access for r in rows}


async def _settings_of(conn: AsyncConnection, key_id: uuid.UUID) -> dict[str, str | None]:
    """What a manifest declares of a key besides its grants, as it is stored (to report changes)."""
    row = (
        await conn.execute(
            text(
                "SELECT s.key AS default_space, k.expires_at, k.rate_per_minute, k.rate_burst "
                "FROM api_keys k LEFT JOIN spaces s ON s.id = k.default_space_id WHERE k.id = :k"
            ),
            {"k": key_id},
        )
    ).one()
    return {
        "defaultSpace": row.default_space,
        "expiresAt": row.expires_at.isoformat() if row.expires_at else None,
        "rateLimit": f"{row.rate_per_minute}/min, burst {row.rate_burst}" if row.rate_per_minute else None,
    }


async def _write_grants(
    conn: AsyncConnection, key_id: uuid.UUID, grants: Sequence[GrantSpec], ids: dict[str, uuid.UUID]
) -> None:
    await conn.execute(text("DELETE FROM key_grants WHERE key_id = :k"), {"k": key_id})
    for g in grants:
        await conn.execute(
            text("INSERT INTO key_grants (key_id, space_id, access) VALUES (:k, :s, :a)"),
            {"k": key_id, "s": ids[g.space], "a": g.access.value},
        )


@dataclass(frozen=True)
class KeyUpdate:
    """What :func:`update_key` found under the key row's lock, and what it left there.

    Read inside the writing transaction, so a report built from it names what this write
    changed, even when the row was edited by hand a moment before.
    """

    grants_before: dict[str, str] | None  # the grants it replaced; None when they were as wanted
    settings_before: dict[str, str | None]
    settings_after: dict[str, str | None]


async def update_key(
    db: Database,
    name: str,
    grants: Sequence[GrantSpec],
    default_space: str | None = None,
    expires_at: datetime | None = None,
    actor: str = "system",
    rate_limit: RateLimit | None = None,
) -> KeyUpdate:
    """Make a key's grants, default space, expiry and rate limit exactly as given."""
    _check_grants(grants, default_space)
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("SELECT * FROM api_keys WHERE name = :n FOR UPDATE"), {"n": name})
        ).first()
        if row is None:
            raise NotFound("api key", name)
        ids = await _space_ids(conn, grants)
        current = await _grants_of(conn, row.id)
        wanted = {g.space: g.access.value for g in grants}
        default_id = ids[default_space] if default_space else None
        settings_before = settings_after = await _settings_of(conn, row.id)
        if current != wanted:
            await _write_grants(conn, row.id, grants, ids)
            await record(
                conn, actor, "key.grants_changed", "api_key", name, details={"from": current, "to": wanted}
            )
        rate = rate_limit.requests_per_minute if rate_limit else None
        burst = rate_limit.burst if rate_limit else None
        if (
            row.default_space_id != default_id
            or row.expires_at != expires_at
            or (row.rate_per_minute, row.rate_burst) != (rate, burst)
        ):
            await conn.execute(
                text(
                    "UPDATE api_keys SET default_space_id = :d, expires_at = :e, rate_per_minute = :rate, "
                    "rate_burst = :burst, updated_at = now() WHERE id = :k"
                ),
                {"d": default_id, "e": expires_at, "rate": rate, "burst": burst, "k": row.id},
            )
            settings_after = await _settings_of(conn, row.id)
    return KeyUpdate(current if current != wanted else None, settings_before, settings_after)


@dataclass(frozen=True)
class GrantChange:
    """A key's grants ``{space key: access}`` before and after :func:`change_grants`."""

    before: dict[str, str]
    after: dict[str, str]

    @property
    def changed(self) -> bool:
        return self.before != self.after


async def change_grants(
    db: Database,
    name: str,
    add: Sequence[GrantSpec] = (),
    remove: Sequence[str] = (),
    actor: str = "system",
) -> GrantChange:
    """Give the key ``name`` the grants ``add`` (an access already held on one of their spaces is
    replaced) and take away its grants on the spaces ``remove``; its other grants stay as they are.

    Read under the key row's lock and audited as ``key.grants_changed`` when anything changed.
    Requests authenticate against the stored grants, so the next request of the key sees the
    change. A key left without any grant is refused (revoking says that more plainly). Its active or
    default space is cleared when its grant goes, rather than left pointing at a space it cannot use.
    """
    if not add and not remove:
        raise ValidationError("grants", "name at least one space")
    named = [g.space for g in add] + list(remove)
    if len(set(named)) != len(named):
        raise ValidationError("grants", "each space may be named once")
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("SELECT * FROM api_keys WHERE name = :n FOR UPDATE"), {"n": name})
        ).first()
        if row is None:
            raise NotFound("api key", name)
        ids = await _space_ids(conn, add)
        removed = await _existing_spaces(conn, remove)
        before = await _grants_of(conn, row.id)
        after = {s: a for s, a in before.items() if s not in remove} | {g.space: g.access.value for g in add}
        if after == before:
            return GrantChange(before, after)
        if not after:
            raise ValidationError(
                "grants",
                f"key '{name}' would hold no grant; revoke it instead (memory-mcp key revoke {name})",
            )
        if remove:
            await conn.execute(
                text("DELETE FROM key_grants WHERE key_id = :k AND space_id = ANY(:s)"),
                {"k": row.id, "s": list(removed.values())},
            )
            await conn.execute(
                text(
                    "UPDATE api_keys SET "
                    "default_space_id = CASE WHEN default_space_id = ANY(:s) THEN NULL ELSE default_space_id END, "
                    "active_space_id = CASE WHEN active_space_id = ANY(:s) THEN NULL ELSE active_space_id END, "
                    "updated_at = now() WHERE id = :k AND (default_space_id = ANY(:s) OR active_space_id = ANY(:s))"
                ),
                {"k": row.id, "s": list(removed.values())},
            )
        for g in add:
            await conn.execute(
                text(
                    "INSERT INTO key_grants (key_id, space_id, access) VALUES (:k, :s, :a) "
                    "ON CONFLICT (key_id, space_id) DO UPDATE SET access = EXCLUDED.access"
                ),
                {"k": row.id, "s": ids[g.space], "a": g.access.value},
            )
        await record(
            conn, actor, "key.grants_changed", "api_key", name, details={"from": before, "to": after}
        )
    return GrantChange(before, after)


async def _existing_spaces(conn: AsyncConnection, keys: Sequence[str]) -> dict[str, uuid.UUID]:
    """The ids of the spaces ``keys``, detached ones included (a grant on one can still be taken away)."""
    found = {
        r.key: r.id
        for r in await conn.execute(
            text("SELECT id, key FROM spaces WHERE key = ANY(:keys)"), {"keys": list(keys)}
        )
    }
    for key in keys:
        if key not in found:
            raise SpaceNotFound(key)
    return found


async def rotate_key(db: Database, name: str, actor: str = "system") -> str:
    """Replace a key's secret (the old one stops working at once); returns the new plaintext."""
    new = keys.generate_key()
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE api_keys SET prefix = :p, key_hash = :h, revoked_at = NULL, updated_at = now() "
                    "WHERE name = :n RETURNING id"
                ),
                {"p": new.prefix, "h": new.hash, "n": name},
            )
        ).first()
        if row is None:
            raise NotFound("api key", name)
        await record(conn, actor, "key.rotated", "api_key", name)
    return new.plaintext


async def revoke_key(db: Database, name: str, actor: str = "system") -> bool:
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE api_keys SET revoked_at = now(), updated_at = now() "
                    "WHERE name = :n AND revoked_at IS NULL RETURNING id"
                ),
                {"n": name},
            )
        ).first()
        if row is not None:
            # Its OAuth grants go with it: refresh tokens are refused, access tokens stop at once.
            await conn.execute(
                text(
                    "UPDATE oauth_families SET revoked_at = now(), revoked_reason = 'key revoked' "
                    "WHERE key_id = :k AND revoked_at IS NULL"
                ),
                {"k": row.id},
            )
            await record(conn, actor, "key.revoked", "api_key", name)
            # And once in every space it was granted, so that those spaces' webhooks tell it.
            granted = await conn.execute(
                text("SELECT space_id FROM key_grants WHERE key_id = :k"), {"k": row.id}
            )
            for (space_id,) in granted.all():
                await record(conn, actor, "key.revoked", "api_key", name, space_id=space_id)
    return row is not None


async def delete_key(db: Database, name: str, actor: str = "system") -> bool:
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("DELETE FROM api_keys WHERE name = :n RETURNING id"), {"n": name})
        ).first()
        if row is not None:
            await record(conn, actor, "key.deleted", "api_key", name)
    return row is not None


async def get_key(db: Database, name: str) -> tuple[ApiKey, dict[str, str]] | None:
    """A key by name with its grants ``{space key: access}`` (administrative lookup)."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(text(f"SELECT {KEY_COLUMNS} FROM api_keys k WHERE name = :n"), {"n": name})
        ).first()
        if row is None:
            return None
        grants = await _grants_of(conn, row.id)
    return key_from_row(row), grants


async def set_key_secret(
    db: Database,
    name: str,
    plaintext: str,
    rotation_generation: int | None = None,
    action: Literal["key.rotated", "key.restored"] = "key.rotated",
    actor: str = "system",
) -> bool:
    """Make ``plaintext`` the key's secret (only its hash is stored).

    The previous secret stops working at once. ``action`` names the audit event: ``key.rotated`` for
    a new secret, which lifts a revocation; ``key.restored`` when a secret changed behind the
    declaring system's back is put back, which never does: a revocation is a deliberate stop (of a
    leaked key, say), and bringing the same secret back would undo it. Returns False when nothing
    changed: the key already had exactly this secret and was not revoked, or it is revoked and this
    is a restore.
    """
    new = _known_key(plaintext)
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text("SELECT id, prefix, key_hash, revoked_at FROM api_keys WHERE name = :n FOR UPDATE"),
                {"n": name},
            )
        ).first()
        if row is None:
            raise NotFound("api key", name)
        if action == "key.restored" and row.revoked_at is not None:
            return False
        if row.prefix == new.prefix and keys.matches(plaintext, row.key_hash) and row.revoked_at is None:
            return False
        await conn.execute(
            text(
                "UPDATE api_keys SET prefix = :p, key_hash = :h, revoked_at = NULL, updated_at = now() "
                "WHERE id = :k"
            ),
            {"p": new.prefix, "h": new.hash, "k": row.id},
        )
        details = {} if rotation_generation is None else {"rotationGeneration": rotation_generation}
        await record(conn, actor, action, "api_key", name, details=details)
    return True


async def key_rotation_generation(db: Database, name: str) -> int:
    """The declared rotation generation the key's current secret was made for (0 when none was given).

    Read from the audit trail, which records it with every secret a key receives; used where no
    other copy of the key exists (``memory-mcp apply``), so that re-applying does not rotate again.
    """
    async with db.transaction() as conn:
        value = (
            await conn.execute(
                text(
                    "SELECT details->>'rotationGeneration' FROM audit_events "
                    "WHERE target_type = 'api_key' AND target_id = :n "
                    "AND action IN ('key.created', 'key.rotated', 'key.restored') "
                    "ORDER BY id DESC LIMIT 1"
                ),
                {"n": name},
            )
        ).scalar()
    return int(value) if value is not None else 0
