"""Audit events: who changed access, keys, users, spaces, and who forgot what."""

from __future__ import annotations

import json
import uuid
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
