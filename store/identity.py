"""Spaces, users, API keys and grants: who may reach which space, and how a request finds its space."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import keys, validation
from .access import Access, Role, effective_access, parse_access, parse_role
from .audit import record
from .db import Database
from .errors import AuthenticationFailed, Conflict, NotFound, SpaceNotFound, ValidationError
from .models import ApiKey, Caller, Grant, Space, SpaceContext, SpaceSummary, User

_SPACE_COLS = "s.id, s.key, s.display_name, s.description, s.deletion_policy"
_USER_COLS = "u.id, u.name, u.email, u.display_name, u.role, u.active"
_KEY_COLS = (
    "k.id, k.name, k.prefix, k.user_id, k.default_space_id, k.active_space_id, k.expires_at, k.revoked_at"
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


def _space(row: Any) -> Space:
    return Space(row.id, row.key, row.display_name, row.description, row.deletion_policy)


def _user(row: Any) -> User:
    return User(row.id, row.name, row.email, row.display_name, Role(row.role), row.active)


def _key(row: Any) -> ApiKey:
    return ApiKey(
        row.id,
        row.name,
        row.prefix,
        row.user_id,
        row.default_space_id,
        row.active_space_id,
        row.expires_at,
        row.revoked_at,
    )


# --- spaces -------------------------------------------------------------------------------------


async def upsert_space(
    db: Database,
    key: str,
    display_name: str,
    description: str = "",
    deletion_policy: str = "Retain",
    max_memories: int | None = None,
    max_documents: int | None = None,
    actor: str = "system",
) -> tuple[Space, bool]:
    """Create or update a space (re-attaching a retained one); returns (space, changed)."""
    validation.space_key(key)
    display_name = validation.non_empty(display_name, "displayName")
    if deletion_policy not in ("Retain", "Delete"):
        raise ValidationError("deletionPolicy", "must be 'Retain' or 'Delete'")
    for field, quota in (("quotas.maxMemories", max_memories), ("quotas.maxDocuments", max_documents)):
        if quota is not None and quota < 0:
            raise ValidationError(field, "must be >= 0")
    values = {
        "key": key,
        "display_name": display_name,
        "description": description or "",
        "deletion_policy": deletion_policy,
        "max_memories": max_memories,
        "max_documents": max_documents,
    }
    async with db.transaction() as conn:
        before = (
            await conn.execute(text("SELECT * FROM spaces WHERE key = :key FOR UPDATE"), values)
        ).first()
        if before is None:
            row = (
                await conn.execute(
                    text(
                        "INSERT INTO spaces (key, display_name, description, deletion_policy, max_memories, "
                        "max_documents) VALUES (:key, :display_name, :description, :deletion_policy, "
                        ":max_memories, :max_documents) RETURNING *"
                    ),
                    values,
                )
            ).one()
            await record(conn, actor, "space.created", "space", key, space_id=row.id)
            return _space(row), True
        unchanged = before.detached_at is None and all(getattr(before, k) == v for k, v in values.items())
        if unchanged:
            return _space(before), False
        row = (
            await conn.execute(
                text(
                    "UPDATE spaces SET display_name = :display_name, description = :description, "
                    "deletion_policy = :deletion_policy, max_memories = :max_memories, "
                    "max_documents = :max_documents, detached_at = NULL, updated_at = now() "
                    "WHERE key = :key RETURNING *"
                ),
                values,
            )
        ).one()
        action = "space.restored" if before.detached_at is not None else "space.updated"
        await record(conn, actor, action, "space", key, space_id=row.id)
        return _space(row), True


async def get_space(db: Database, key: str) -> Space | None:
    """An attached space by key (administrative lookup, not for request paths)."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text("SELECT * FROM spaces s WHERE key = :key AND detached_at IS NULL"), {"key": key}
            )
        ).first()
    return _space(row) if row else None


async def delete_space(db: Database, key: str, actor: str = "system") -> str | None:
    """Honour the space's deletion policy; returns the policy applied, or None if it was absent.

    ``Retain`` detaches the space: it disappears from every key but its data stays, and declaring
    the space again restores it. ``Delete`` removes the space with all its documents and memories.
    """
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("SELECT * FROM spaces WHERE key = :key FOR UPDATE"), {"key": key})
        ).first()
        if row is None or (row.detached_at is not None and row.deletion_policy == "Retain"):
            return None
        if row.deletion_policy == "Retain":
            await conn.execute(text("UPDATE spaces SET detached_at = now() WHERE id = :id"), {"id": row.id})
            await record(conn, actor, "space.detached", "space", key, space_id=row.id)
            return "Retain"
    async with db.transaction([row.id]) as conn:
        counts = (
            await conn.execute(
                text(
                    "WITH m AS (DELETE FROM memories WHERE space_id = :id RETURNING 1), "
                    "d AS (DELETE FROM documents WHERE space_id = :id RETURNING 1) "
                    "SELECT (SELECT count(*) FROM m) AS memories, (SELECT count(*) FROM d) AS documents"
                ),
                {"id": row.id},
            )
        ).one()
        await conn.execute(text("DELETE FROM spaces WHERE id = :id"), {"id": row.id})
        await record(
            conn,
            actor,
            "space.deleted",
            "space",
            key,
            space_id=row.id,
            details={"memories": counts.memories, "documents": counts.documents},
        )
    return "Delete"


async def missing_spaces(db: Database, space_keys: Sequence[str]) -> list[str]:
    """The keys among ``space_keys`` that name no attached space, in the order given."""
    async with db.transaction() as conn:
        found = set(
            (
                await conn.execute(
                    text("SELECT key FROM spaces WHERE key = ANY(:keys) AND detached_at IS NULL"),
                    {"keys": list(space_keys)},
                )
            ).scalars()
        )
    return [k for k in space_keys if k not in found]


async def space_counts(db: Database, key: str) -> tuple[int, int] | None:
    """(live memories, documents) of an attached space, or None when it is absent."""
    space = await get_space(db, key)
    if space is None:
        return None
    async with db.transaction([space.id]) as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM memories WHERE space_id = :id AND is_latest "
                    "AND forgotten_at IS NULL) AS memories, "
                    "(SELECT count(*) FROM documents WHERE space_id = :id) AS documents"
                ),
                {"id": space.id},
            )
        ).one()
    return int(row.memories), int(row.documents)


# --- users --------------------------------------------------------------------------------------


async def upsert_user(
    db: Database,
    name: str,
    email: str,
    display_name: str,
    role: str | Role,
    active: bool = True,
    actor: str = "system",
) -> tuple[User, bool]:
    """Create or update a user; returns (user, changed). Deactivation stops all their keys."""
    values = {
        "name": validation.object_name(name),
        "email": validation.email(email),
        "display_name": validation.non_empty(display_name, "displayName"),
        "role": parse_role(role.value if isinstance(role, Role) else role).value,
        "active": bool(active),
    }
    async with db.transaction() as conn:
        before = (
            await conn.execute(text("SELECT * FROM users WHERE name = :name FOR UPDATE"), values)
        ).first()
        clash = (
            await conn.execute(text("SELECT name FROM users WHERE email = :email AND name <> :name"), values)
        ).first()
        if clash is not None:
            raise Conflict(f"email '{email}' already belongs to user '{clash.name}'")
        if before is None:
            row = (
                await conn.execute(
                    text(
                        "INSERT INTO users (name, email, display_name, role, active) "
                        "VALUES (:name, :email, :display_name, :role, :active) RETURNING *"
                    ),
                    values,
                )
            ).one()
            await record(conn, actor, "user.created", "user", name, details={"role": row.role})
            return _user(row), True
        if all(getattr(before, k) == v for k, v in values.items()):
            return _user(before), False
        row = (
            await conn.execute(
                text(
                    "UPDATE users SET email = :email, display_name = :display_name, role = :role, "
                    "active = :active, updated_at = now() WHERE name = :name RETURNING *"
                ),
                values,
            )
        ).one()
        if before.active != row.active:
            await record(conn, actor, "user.activated" if row.active else "user.deactivated", "user", name)
        if before.role != row.role:
            await record(
                conn, actor, "user.role_changed", "user", name, details={"from": before.role, "to": row.role}
            )
        return _user(row), True


async def get_user(db: Database, name: str) -> User | None:
    async with db.transaction() as conn:
        row = (
            await conn.execute(text(f"SELECT {_USER_COLS} FROM users u WHERE name = :n"), {"n": name})
        ).first()
    return _user(row) if row else None


async def delete_user(db: Database, name: str, actor: str = "system") -> bool:
    """Remove a user and their keys; what they wrote stays, attributed by id."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("DELETE FROM users WHERE name = :n RETURNING id"), {"n": name})
        ).first()
        if row is not None:
            await record(conn, actor, "user.deleted", "user", name)
    return row is not None


# --- keys and grants ----------------------------------------------------------------------------


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
) -> tuple[ApiKey, str]:
    """Create a key for user ``user`` (a user name); returns the key and its plaintext, shown once.

    ``plaintext`` imports a key generated elsewhere (the operator writes a key to its Secret before
    the database sees it); only its hash is stored. ``rotation_generation`` is recorded in the audit
    trail so a later reconcile knows which declared generation the key was made for.
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
                    "INSERT INTO api_keys (user_id, name, prefix, key_hash, default_space_id, expires_at) "
                    "VALUES (:u, :n, :p, :h, :d, :e) RETURNING *"
                ),
                {
                    "u": owner.id,
                    "n": name,
                    "p": new.prefix,
                    "h": new.hash,
                    "d": ids[default_space] if default_space else None,
                    "e": expires_at,
                },
            )
        ).one()
        await _write_grants(conn, row.id, grants, ids)
        await record(conn, actor, "key.created", "api_key", name, details=details)
    return _key(row), new.plaintext


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


async def _write_grants(
    conn: AsyncConnection, key_id: uuid.UUID, grants: Sequence[GrantSpec], ids: dict[str, uuid.UUID]
) -> None:
    await conn.execute(text("DELETE FROM key_grants WHERE key_id = :k"), {"k": key_id})
    for g in grants:
        await conn.execute(
            text("INSERT INTO key_grants (key_id, space_id, access) VALUES (:k, :s, :a)"),
            {"k": key_id, "s": ids[g.space], "a": g.access.value},
        )


async def update_key(
    db: Database,
    name: str,
    grants: Sequence[GrantSpec],
    default_space: str | None = None,
    expires_at: datetime | None = None,
    actor: str = "system",
) -> bool:
    """Make a key's grants, default space and expiry exactly as given; returns True if anything changed."""
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
        changed = False
        if current != wanted:
            await _write_grants(conn, row.id, grants, ids)
            await record(
                conn, actor, "key.grants_changed", "api_key", name, details={"from": current, "to": wanted}
            )
            changed = True
        if row.default_space_id != default_id or row.expires_at != expires_at:
            await conn.execute(
                text(
                    "UPDATE api_keys SET default_space_id = :d, expires_at = :e, updated_at = now() WHERE id = :k"
                ),
                {"d": default_id, "e": expires_at, "k": row.id},
            )
            changed = True
    return changed


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
            await record(conn, actor, "key.revoked", "api_key", name)
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
            await conn.execute(text(f"SELECT {_KEY_COLS} FROM api_keys k WHERE name = :n"), {"n": name})
        ).first()
        if row is None:
            return None
        grants = await _grants_of(conn, row.id)
    return _key(row), grants


async def set_key_secret(
    db: Database,
    name: str,
    plaintext: str,
    rotation_generation: int | None = None,
    action: str = "key.rotated",
    actor: str = "system",
) -> bool:
    """Make ``plaintext`` the key's secret (only its hash is stored) and lift any revocation.

    The previous secret stops working at once. Returns False when the key already had exactly this
    secret and was not revoked. ``action`` names the audit event: ``key.rotated`` for a new secret,
    ``key.restored`` when a secret changed behind the declaring system's back is put back.
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


# --- authentication and space resolution --------------------------------------------------------

_AUTH_SQL = text(
    f"""
    SELECT {_KEY_COLS}, k.key_hash, u.name AS u_name, u.email, u.display_name, u.role, u.active,
      COALESCE((
        SELECT json_agg(json_build_array(s.id, s.key, s.display_name, s.description, s.deletion_policy,
                                         g.access) ORDER BY s.key)
        FROM key_grants g JOIN spaces s ON s.id = g.space_id
        WHERE g.key_id = k.id AND s.detached_at IS NULL), '[]') AS grants
    FROM api_keys k JOIN users u ON u.id = k.user_id
    WHERE k.prefix = :prefix
    """
)
_DUMMY_HASH = keys.hash_key("mmk_0000000000_not-a-key")


async def authenticate(db: Database, plaintext: str | None) -> Caller:
    """Verify a presented key; every failure raises the same :class:`AuthenticationFailed`."""
    prefix = keys.prefix_of(plaintext or "")
    row = None
    if prefix is not None:
        async with db.autocommit() as conn:
            row = (await conn.execute(_AUTH_SQL, {"prefix": prefix})).first()
    # Compare even when nothing was found so unknown prefixes cost the same as wrong secrets.
    ok = keys.matches(plaintext or "", row.key_hash if row else _DUMMY_HASH) and row is not None
    if not ok or row is None:
        raise AuthenticationFailed()
    now = datetime.now(UTC)
    if row.revoked_at is not None or not row.active or (row.expires_at is not None and row.expires_at <= now):
        raise AuthenticationFailed()
    user = User(row.user_id, row.u_name, row.email, row.display_name, Role(row.role), row.active)
    raw = row.grants if isinstance(row.grants, list) else json.loads(row.grants)
    grants = tuple(
        Grant(
            Space(uuid.UUID(g[0]), g[1], g[2], g[3], g[4]),
            Access(g[5]),
            effective_access(user.role, Access(g[5])),
        )
        for g in raw
    )
    return Caller(user=user, key=_key(row), grants=grants)


def current_grant(caller: Caller) -> Grant | None:
    """The grant of the key's active space, else of its default space, else its only grant."""
    for space_id in (caller.key.active_space_id, caller.key.default_space_id):
        grant = caller.grant_for(space_id) if space_id else None
        if grant is not None:
            return grant
    return caller.grants[0] if len(caller.grants) == 1 else None


def resolve_space(caller: Caller, container_tag: str | None) -> SpaceContext:
    """``containerTag`` for this request, else the key's active space, else its default space.

    A space without a grant raises exactly what a missing space raises.
    """
    if container_tag:
        grant = next((g for g in caller.grants if g.space.key == container_tag), None)
        if grant is None:
            raise SpaceNotFound(container_tag[:63])
    else:
        grant = current_grant(caller)
        if grant is None:
            raise ValidationError(
                "containerTag",
                "this key has no active or default space: pass containerTag or select a space "
                "(listSpaces shows them)",
            )
    return SpaceContext(caller, grant.space, grant.effective)


async def set_active_space(db: Database, caller: Caller, space_key: str) -> SpaceContext:
    """Make ``space_key`` the key's active space for future requests (stored in the database)."""
    ctx = resolve_space(caller, space_key)
    async with db.transaction() as conn:
        await conn.execute(
            text("UPDATE api_keys SET active_space_id = :s, updated_at = now() WHERE id = :k"),
            {"s": ctx.space.id, "k": caller.key.id},
        )
    return ctx


async def list_spaces(db: Database, caller: Caller) -> list[SpaceSummary]:
    """Every space the key can read, with effective access, counts and last activity."""
    if not caller.grants:
        return []
    current = current_grant(caller)
    active = current.space.id if current else None
    ids = list(caller.readable_space_ids)
    async with db.transaction(ids) as conn:
        rows = {
            r.id: r
            for r in await conn.execute(
                text(
                    """
                    SELECT s.id,
                      (SELECT count(*) FROM documents d WHERE d.space_id = s.id) AS documents,
                      (SELECT count(*) FROM memories m
                        WHERE m.space_id = s.id AND m.is_latest AND m.forgotten_at IS NULL) AS memories,
                      GREATEST((SELECT max(updated_at) FROM documents d WHERE d.space_id = s.id),
                               (SELECT max(updated_at) FROM memories m WHERE m.space_id = s.id)) AS last_activity
                    FROM unnest(CAST(:ids AS uuid[])) AS s(id)
                    """
                ),
                {"ids": ids},
            )
        }
    return [
        SpaceSummary(
            space=g.space,
            access=g.effective,
            document_count=rows[g.space.id].documents,
            memory_count=rows[g.space.id].memories,
            last_activity=rows[g.space.id].last_activity,
            active=g.space.id == active,
        )
        for g in caller.grants
    ]


# --- first start --------------------------------------------------------------------------------


async def bootstrap(db: Database) -> str | None:
    """On an empty database: an admin Writer, a ``default`` space and a key; returns the key once."""
    async with db.transaction() as conn:
        if (await conn.execute(text("SELECT 1 FROM users LIMIT 1"))).first() is not None:
            return None
    await upsert_user(
        db, "admin", "admin@localhost.localdomain", "Administrator", Role.WRITER, actor="bootstrap"
    )
    await upsert_space(db, "default", "Default", "Created on first start", actor="bootstrap")
    try:
        _, plaintext = await create_key(
            db,
            "admin-bootstrap",
            "admin",
            [GrantSpec("default", Access.READ_WRITE)],
            "default",
            actor="bootstrap",
        )
    except Conflict:  # another process bootstrapped the same database a moment ago
        return None
    return plaintext
