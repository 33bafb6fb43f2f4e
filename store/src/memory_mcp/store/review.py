"""Curating a space under Review: accepting and rejecting proposed saves and forgets.

Only people curate: these functions back REST and the command line, never a model-visible tool.
Curating needs the Curate grant and the Writer role (the lower of the two, as everywhere). Every
decision is one audit event; deciding the same way again changes nothing and writes none.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from psycopg.rows import namedtuple_row
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import validation
from .access import Access, Role, effective_access
from .audit import record
from .db import Database
from .errors import AccessDenied, Conflict, NotFound, SpaceNotFound
from .memories import LIVE, REVIEWED_SELECT, id_range, memory_from_row, touch_after_forget
from .models import ApiKey, Caller, Grant, Memory, Space, SpaceContext, User

Decision = Literal["accepted", "rejected"]
MAX_REASON = 500  # the column's CHECK says the same


@dataclass(frozen=True)
class ReviewResult:
    memory: Memory
    proposal: Literal["save", "forget"]  # what was decided: a proposed save or a proposed forget
    decision: Decision
    already: bool = False  # decided so before: nothing changed, no audit event
    waited_s: float | None = None  # from the proposal to this decision (None when ``already``)


def require_curate(ctx: SpaceContext) -> None:
    """Curators (Writer role and a Curate grant) may accept and reject; say why anyone else may not."""
    if ctx.can_curate:
        return
    if ctx.caller.user.role.value == "Reader":
        raise AccessDenied(
            f"cannot curate: user '{ctx.caller.user.name}' has the Reader role; curating needs the Writer "
            "role and a Curate grant"
        )
    raise AccessDenied(
        f"cannot curate: this key has {ctx.access.value} access to space '{ctx.space.key}'; curating "
        "needs a Curate grant"
    )


def reason_text(reason: str | None) -> str | None:
    return validation.optional_text(reason, "reason", MAX_REASON)


async def _memory(conn: AsyncConnection, memory_id: uuid.UUID) -> Memory:
    row = (await conn.execute(text(f"{REVIEWED_SELECT} WHERE m.id = :id"), {"id": memory_id})).one()
    return memory_from_row(row)


async def _locked(conn: AsyncConnection, ctx: SpaceContext, memory_id: str) -> Memory:
    """The memory ``memory_id`` (an id or a short id) names in the space, row-locked."""
    span = id_range(memory_id)
    lo, hi = span or (validation.parse_uuid(memory_id, "id"),) * 2
    ids = list(
        (
            await conn.execute(
                text(
                    "SELECT id FROM memories WHERE space_id = :s AND id BETWEEN :lo AND :hi "
                    "ORDER BY id LIMIT 2 FOR UPDATE"
                ),
                {"s": ctx.space.id, "lo": lo, "hi": hi},
            )
        ).scalars()
    )
    if len(ids) != 1:  # none, or a short id that fits two memories
        raise NotFound("memory", memory_id)
    return await _memory(conn, ids[0])


async def decide(
    db: Database, ctx: SpaceContext, memory_id: str, decision: Decision, reason: str | None = None
) -> ReviewResult:
    """Accept or reject the proposal on one memory: its proposed save, else its proposed forget.

    Accepting a save makes the memory live (retiring what it restates, when that is still live);
    rejecting it keeps it as rejected history. Accepting a forget forgets the memory; rejecting
    it leaves the memory live. A memory decided the same way already is returned as it is
    (``already``); one decided the other way is a conflict.
    """
    require_curate(ctx)
    reason = reason_text(reason)
    user_id = ctx.caller.user.id
    async with db.transaction([ctx.space.id]) as conn:
        memory = await _locked(conn, ctx, memory_id)
        if memory.review == "proposed":
            proposal: Literal["save", "forget"] = "save"
            if decision == "accepted":
                await _accept_save(conn, ctx, memory)
            else:
                await conn.execute(
                    text(
                        "UPDATE memories SET review = 'rejected', reviewed_by_user_id = :u, reviewed_at = now(), "
                        "review_reason = :r, updated_at = now() WHERE id = :id"
                    ),
                    {"u": user_id, "r": reason, "id": memory.id},
                )
        elif memory.forget_review == "proposed":
            proposal = "forget"
            forgotten = "forgotten_at = now(), updated_by_user_id = :u, " if decision == "accepted" else ""
            await conn.execute(
                text(
                    f"UPDATE memories SET {forgotten}forget_review = :d, reviewed_by_user_id = :u, "
                    "reviewed_at = now(), review_reason = :r, updated_at = now() WHERE id = :id"
                ),
                {"u": user_id, "d": decision, "r": reason, "id": memory.id},
            )
            if decision == "accepted":
                await touch_after_forget(conn, memory.document_id, user_id)
        else:
            return _decided_before(memory, decision)
        await record(
            conn,
            f"user:{ctx.caller.user.name}",
            f"memory.{'forget_' if proposal == 'forget' else ''}{decision}",
            "memory",
            str(memory.id),
            space_id=ctx.space.id,
            actor_user_id=user_id,
            details={"reason": reason} if reason else {},
        )
        decided = await _memory(conn, memory.id)
        assert decided.reviewed_at is not None
        proposed_at = await conn.execute(
            text(
                "SELECT CASE WHEN :p = 'forget' THEN forget_proposed_at ELSE created_at END FROM memories WHERE id = :id"
            ),
            {"p": proposal, "id": memory.id},
        )
        started = proposed_at.scalar_one()
    return ReviewResult(decided, proposal, decision, waited_s=(decided.reviewed_at - started).total_seconds())


async def _accept_save(conn: AsyncConnection, ctx: SpaceContext, memory: Memory) -> None:
    """Make a proposed save live, retiring the memory it restates if that one is still live."""
    duplicate = (
        await conn.execute(
            text(
                f"SELECT m.id FROM memories m WHERE m.space_id = :s AND m.content_hash = "
                f"(SELECT content_hash FROM memories WHERE id = :id) AND {LIVE}"
            ),
            {"s": ctx.space.id, "id": memory.id},
        )
    ).scalar()
    if duplicate is not None:
        raise Conflict(
            f"the same text is live already in space '{ctx.space.key}' (memory {duplicate}); reject this "
            "proposal instead"
        )
    supersedes = memory.supersedes_id
    if supersedes is not None:
        retired = (
            await conn.execute(
                text(
                    "UPDATE memories m SET is_latest = false, updated_by_user_id = :u, updated_at = now() "
                    f"WHERE m.id = :old AND m.space_id = :s AND {LIVE} RETURNING m.id"
                ),
                {"u": ctx.caller.user.id, "old": supersedes, "s": ctx.space.id},
            )
        ).first()
        if retired is None:
            # What it restated changed since (forgotten or restated again): it stands on its own.
            supersedes = None
    await conn.execute(
        text(
            "UPDATE memories SET is_latest = true, review = 'accepted', reviewed_by_user_id = :u, "
            "reviewed_at = now(), supersedes_id = :sup, "
            "version = CASE WHEN CAST(:sup AS uuid) IS NULL THEN 1 ELSE version END, updated_at = now() "
            "WHERE id = :id"
        ),
        {"u": ctx.caller.user.id, "sup": supersedes, "id": memory.id},
    )


def _decided_before(memory: Memory, decision: Decision) -> ReviewResult:
    """The answer for a memory with nothing pending: the same decision again, or a conflict."""
    proposal: Literal["save", "forget"] = "forget" if memory.forget_review is not None else "save"
    previous = memory.forget_review if proposal == "forget" else memory.review
    if previous is None:
        raise Conflict(f"memory {memory.id} has no proposal to accept or reject")
    if previous != decision:
        raise Conflict(
            f"memory {memory.id}: the proposed {proposal} was {previous} already"
            + (f" by {memory.reviewed_by}" if memory.reviewed_by else "")
        )
    return ReviewResult(memory, proposal, decision, already=True)


async def decide_many(
    db: Database, ctx: SpaceContext, memory_ids: Sequence[str], decision: Decision, reason: str | None = None
) -> list[ReviewResult]:
    """:func:`decide` for each id in turn (each its own transaction and audit event)."""
    return [await decide(db, ctx, memory_id, decision, reason) for memory_id in memory_ids]


async def pending_ids(db: Database, ctx: SpaceContext) -> list[uuid.UUID]:
    """Every memory of the space with a pending proposal, oldest first (bulk accepting)."""
    require_curate(ctx)
    async with db.transaction([ctx.space.id]) as conn:
        rows = await conn.execute(
            text(
                "SELECT id FROM memories WHERE space_id = :s AND (review = 'proposed' OR forget_review = 'proposed') "
                "ORDER BY created_at, id"
            ),
            {"s": ctx.space.id},
        )
        return list(rows.scalars())


async def curator_context(db: Database, user_name: str, space_key: str) -> SpaceContext:
    """A person's curating context on a space, for the command line (which holds no key): the user
    by name, with the strongest grant any of their usable keys holds on the space.

    The same rules as over REST: an inactive user, or one whose keys hold no grant on the space,
    is refused; the role ceiling applies (a Reader with a Curate grant cannot curate).
    """
    validation.space_key(space_key, "space")
    async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
        await cur.execute(_CURATOR_SQL, {"user": user_name, "space": space_key})
        row: Any = await cur.fetchone()
    if row is None:
        raise NotFound("user", user_name)
    if not row.active:
        raise AccessDenied(f"user '{user_name}' is deactivated")
    if row.key_id is None:
        raise SpaceNotFound(space_key)
    user = User(row.user_id, row.name, row.email, row.display_name, Role(row.role), row.active)
    space = Space(
        row.space_id, space_key, row.space_name, row.description, row.deletion_policy, row.write_policy
    )
    granted = Access(row.access)
    key = ApiKey(row.key_id, row.key_name, row.prefix, row.user_id, None, None, None, None)
    caller = Caller(user=user, key=key, grants=(Grant(space, granted, effective_access(user.role, granted)),))
    return SpaceContext(caller, space, effective_access(user.role, granted))


# The user, and their strongest grant on the space over their keys that still work.
_CURATOR_SQL = """
    SELECT u.id AS user_id, u.name, u.email, u.display_name, u.role, u.active,
           g.key_id, g.key_name, g.prefix, g.access,
           g.space_id, g.space_name, g.description, g.deletion_policy, g.write_policy
    FROM users u
    LEFT JOIN LATERAL (
      SELECT k.id AS key_id, k.name AS key_name, k.prefix, kg.access, s.id AS space_id,
             s.display_name AS space_name, s.description, s.deletion_policy, s.write_policy
      FROM api_keys k
      JOIN key_grants kg ON kg.key_id = k.id
      JOIN spaces s ON s.id = kg.space_id AND s.key = %(space)s AND s.detached_at IS NULL
      WHERE k.user_id = u.id AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
      ORDER BY array_position(ARRAY['Read', 'ReadWrite', 'Curate'], kg.access) DESC, k.name
      LIMIT 1
    ) g ON true
    WHERE u.name = %(user)s
"""
