"""Spaces: declared by platform teams, deleted by their deletion policy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from . import validation
from .audit import record
from .db import Database
from .errors import ValidationError
from .models import Space

WRITE_POLICIES = ("Direct", "Review")


def _space(row: Any) -> Space:
    return Space(
        row.id, row.key, row.display_name, row.description, row.deletion_policy, write_policy=row.write_policy
    )


# Columns that are bookkeeping, not something a Space declares.
_NOT_DECLARED = frozenset({"id", "key", "created_at", "updated_at", "detached_at"})


def _settings(row: Any) -> dict[str, Any]:
    return {column: value for column, value in row._mapping.items() if column not in _NOT_DECLARED}


@dataclass(frozen=True)
class SpaceUpsert:
    """What :func:`upsert_space` left, and the declared settings it found under the row's lock.

    Read inside the writing transaction, so a report built from it names what this write changed,
    even when the row was edited or deleted by hand a moment before.
    """

    space: Space
    changed: bool
    before: dict[str, Any] | None  # None: the space was created, or a detached one restored
    after: dict[str, Any]


async def upsert_space(
    db: Database,
    key: str,
    display_name: str,
    description: str = "",
    deletion_policy: str = "Retain",
    max_memories: int | None = None,
    max_documents: int | None = None,
    actor: str = "system",
    write_policy: str = "Direct",
    max_bytes: int | None = None,
    managed_by: str = "manifest",
    max_pdf_pages: int | None = None,
    max_media_seconds: int | None = None,
) -> SpaceUpsert:
    """Create or update a space (re-attaching a retained one).

    ``max_pdf_pages`` and ``max_media_seconds`` are the space's own limits of one uploaded file
    (None: the server's settings apply). ``managed_by`` is recorded when the space is created
    (see :mod:`.ownership`)."""
    validation.space_key(key)
    display_name = validation.non_empty(display_name, "displayName")
    if deletion_policy not in ("Retain", "Delete"):
        raise ValidationError("deletionPolicy", "must be 'Retain' or 'Delete'")
    if write_policy not in WRITE_POLICIES:
        raise ValidationError("writePolicy", "must be 'Direct' or 'Review'")
    for field, quota, most in (
        ("quotas.maxMemories", max_memories, validation.MAX_INTEGER_COLUMN),
        ("quotas.maxDocuments", max_documents, validation.MAX_INTEGER_COLUMN),
        ("quotas.maxBytes", max_bytes, validation.MAX_BIGINT_COLUMN),
    ):
        if quota is not None and not 0 <= quota <= most:
            raise ValidationError(field, f"must be from 0 to {most}")
    validation.file_limit(max_pdf_pages, "quotas.maxPdfPages")
    validation.file_limit(max_media_seconds, "quotas.maxMediaSeconds")
    values = {
        "key": key,
        "display_name": display_name,
        "description": description or "",
        "deletion_policy": deletion_policy,
        "max_memories": max_memories,
        "max_documents": max_documents,
        "write_policy": write_policy,
        "max_bytes": max_bytes,
        "max_pdf_pages": max_pdf_pages,
        "max_media_seconds": max_media_seconds,
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
                        "max_documents, managed_by, write_policy, max_bytes, max_pdf_pages, max_media_seconds) "
                        "VALUES (:key, :display_name, :description, :deletion_policy, :max_memories, "
                        ":max_documents, :managed_by, :write_policy, :max_bytes, :max_pdf_pages, "
                        ":max_media_seconds) RETURNING *"
                    ),
                    {**values, "managed_by": managed_by},
                )
            ).one()
            await record(conn, actor, "space.created", "space", key, space_id=row.id)
            return SpaceUpsert(_space(row), True, None, _settings(row))
        settings = None if before.detached_at is not None else _settings(before)
        if settings is not None and all(getattr(before, k) == v for k, v in values.items()):
            return SpaceUpsert(_space(before), False, settings, settings)
        row = (
            await conn.execute(
                text(
                    "UPDATE spaces SET display_name = :display_name, description = :description, "
                    "deletion_policy = :deletion_policy, max_memories = :max_memories, "
                    "max_documents = :max_documents, write_policy = :write_policy, max_bytes = :max_bytes, "
                    "max_pdf_pages = :max_pdf_pages, max_media_seconds = :max_media_seconds, "
                    "detached_at = NULL, updated_at = now() "
                    "WHERE key = :key RETURNING *"
                ),
                values,
            )
        ).one()
        action = "space.restored" if before.detached_at is not None else "space.updated"
        await record(conn, actor, action, "space", key, space_id=row.id)
        return SpaceUpsert(_space(row), True, settings, _settings(row))


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
    """(live memories, documents) of an attached space, or None when it is absent. Documents are
    uploads and long texts: a memory saved on its own is not one (documents.LISTED)."""
    space = await get_space(db, key)
    if space is None:
        return None
    async with db.transaction([space.id]) as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM memories WHERE space_id = :id AND is_latest "
                    "AND forgotten_at IS NULL AND (expires_at IS NULL OR expires_at > now())) AS memories, "
                    "(SELECT count(*) FROM documents WHERE space_id = :id AND source <> 'memory') AS documents"
                ),
                {"id": space.id},
            )
        ).one()
    return int(row.memories), int(row.documents)
