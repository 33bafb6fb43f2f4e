"""Audit events: who changed access, keys, users, spaces, and who forgot what."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .db import Database


@dataclass(frozen=True)
class AuditEvent:
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    space_id: uuid.UUID | None
    details: dict[str, Any]


async def record(
    conn: AsyncConnection,
    actor: str,
    action: str,
    target_type: str,
    target_id: str,
    *,
    space_id: uuid.UUID | None = None,
    actor_user_id: uuid.UUID | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Write one event in the caller's transaction, so it lands exactly when the change does."""
    await conn.execute(
        text(
            "INSERT INTO audit_events (actor, actor_user_id, action, space_id, target_type, target_id, details) "
            "VALUES (:actor, :uid, :action, :space, :tt, :tid, CAST(:details AS jsonb))"
        ),
        {
            "actor": actor,
            "uid": actor_user_id,
            "action": action,
            "space": space_id,
            "tt": target_type,
            "tid": target_id,
            "details": json.dumps(details or {}, default=str),
        },
    )


async def list_events(db: Database, action: str | None = None, limit: int = 100) -> list[AuditEvent]:
    """Most recent first; ``action`` filters to one kind (e.g. ``memory.forgotten``)."""
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                "SELECT * FROM audit_events WHERE (CAST(:a AS text) IS NULL OR action = :a) "
                "ORDER BY id DESC LIMIT :l"
            ),
            {"a": action, "l": limit},
        )
        return [
            AuditEvent(r.at, r.actor, r.action, r.target_type, r.target_id, r.space_id, dict(r.details))
            for r in rows
        ]


async def export_events(
    db: Database, since: datetime | None = None, until: datetime | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Every event from ``since`` (inclusive) to ``until`` (exclusive), oldest first, as records
    (``id``, ``at``, ``actor``, ``action``, ``space`` key, ``targetType``, ``targetId``, ``details``)."""
    async with db.transaction() as conn:
        rows = await conn.stream(
            text(
                "SELECT e.id, e.at, e.actor, e.action, s.key AS space, e.target_type, e.target_id, e.details "
                "FROM audit_events e LEFT JOIN spaces s ON s.id = e.space_id "
                "WHERE (CAST(:since AS timestamptz) IS NULL OR e.at >= :since) "
                "AND (CAST(:until AS timestamptz) IS NULL OR e.at < :until) ORDER BY e.id"
            ),
            {"since": since, "until": until},
        )
        async for r in rows:
            yield {
                "id": r.id,
                "at": r.at.isoformat(),
                "actor": r.actor,
                "action": r.action,
                "space": r.space,
                "targetType": r.target_type,
                "targetId": r.target_id,
                "details": dict(r.details),
            }
