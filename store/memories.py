"""Documents and memories: save (with duplicates and versions), forget (soft), list and read."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from . import validation
from .audit import record
from .db import Database, HalfVector
from .errors import AccessDenied, NotFound, QuotaExceeded, SecretRefused
from .models import Caller, Document, ForgetResult, Memory, Page, SaveResult, SpaceContext
from .secrets import find_secret

LIVE = "m.is_latest AND m.forgotten_at IS NULL"

MEMORY_SELECT = """
    SELECT m.id, s.key AS space_key, m.document_id, m.content, m.category, m.version, m.supersedes_id,
           m.is_latest, m.forgotten_at, m.created_at, m.updated_at,
           m.created_by_user_id, cu.display_name AS created_by,
           m.updated_by_user_id, uu.display_name AS updated_by,
           m.embedding IS NOT NULL AS has_embedding
    FROM memories m
    JOIN spaces s ON s.id = m.space_id
    LEFT JOIN users cu ON cu.id = m.created_by_user_id
    LEFT JOIN users uu ON uu.id = m.updated_by_user_id
"""

DOCUMENT_COLS = """
    d.id, s.key AS space_key, d.title, d.doc_type, d.status, d.summary, d.size_bytes, d.created_at,
    d.updated_at, d.created_by_user_id, cu.display_name AS created_by,
    d.updated_by_user_id, uu.display_name AS updated_by
"""
DOCUMENT_FROM = """
    FROM documents d
    JOIN spaces s ON s.id = d.space_id
    LEFT JOIN users cu ON cu.id = d.created_by_user_id
    LEFT JOIN users uu ON uu.id = d.updated_by_user_id
"""


def memory_from_row(row: Any) -> Memory:
    return Memory(
        id=row.id,
        space_key=row.space_key,
        document_id=row.document_id,
        content=row.content,
        category=row.category,
        version=row.version,
        supersedes_id=row.supersedes_id,
        is_latest=row.is_latest,
        forgotten_at=row.forgotten_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        created_by_user_id=row.created_by_user_id,
        created_by=row.created_by,
        updated_by_user_id=row.updated_by_user_id,
        updated_by=row.updated_by,
        has_embedding=row.has_embedding,
    )


def _document(row: Any, content: str | None = None, memory_ids: Sequence[uuid.UUID] = ()) -> Document:
    return Document(
        id=row.id,
        space_key=row.space_key,
        title=row.title,
        doc_type=row.doc_type,
        status=row.status,
        summary=row.summary,
        size_bytes=row.size_bytes,
        created_at=row.created_at,
        updated_at=row.updated_at,
        created_by_user_id=row.created_by_user_id,
        created_by=row.created_by,
        updated_by_user_id=row.updated_by_user_id,
        updated_by=row.updated_by,
        content=content,
        memory_ids=tuple(memory_ids),
    )


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def require_write(ctx: SpaceContext) -> None:
    """Writers with a ReadWrite grant may write; say precisely why anyone else may not."""
    if ctx.can_write:
        return
    if ctx.caller.user.role.value == "Reader":
        raise AccessDenied(f"read-only: user '{ctx.caller.user.name}' has the Reader role and cannot write")
    raise AccessDenied(f"read-only: this key has Read access to space '{ctx.space.key}'")


async def _fetch_memory(conn: AsyncConnection, where: str, params: dict[str, Any]) -> Memory | None:
    row = (await conn.execute(text(f"{MEMORY_SELECT} WHERE {where}"), params)).first()
    return memory_from_row(row) if row else None


def _title_of(content: str) -> str:
    first = content.strip().splitlines()[0]
    return first if len(first) <= 80 else first[:77].rstrip() + "..."


async def save_memory(
    db: Database,
    ctx: SpaceContext,
    content: str,
    category: str | None = None,
    embedding: Sequence[float] | None = None,
    *,
    supersede_threshold: float | None = None,
    supersedes_id: uuid.UUID | None = None,
) -> SaveResult:
    """Save one statement as a document and its memory.

    Exact duplicates of a live memory return that memory. With an embedding and a
    ``supersede_threshold``, a live memory of the space whose meaning is that close is replaced by
    a new version (kept as history); ``supersedes_id`` names the memory to replace explicitly.
    """
    content = validation.content(content)
    category = validation.category(category)
    require_write(ctx)
    secret = find_secret(content)
    if secret is not None:
        raise SecretRefused(secret.kind, secret.label)
    digest = content_hash(content)
    user_id = ctx.caller.user.id
    space_id = ctx.space.id
    try:
        async with db.transaction([space_id]) as conn:
            existing = await _fetch_memory(
                conn, f"m.space_id = :s AND m.content_hash = :h AND {LIVE}", {"s": space_id, "h": digest}
            )
            if existing is not None:
                return SaveResult(existing, created=False)
            await _check_quota(conn, space_id)
            old = await _superseded(conn, space_id, embedding, supersede_threshold, supersedes_id)
            if old is not None:
                await conn.execute(
                    text(
                        "UPDATE memories SET is_latest = false, updated_by_user_id = :u, updated_at = now() "
                        "WHERE id = :id"
                    ),
                    {"u": user_id, "id": old.id},
                )
                category = category or old.category
            doc_id = (
                await conn.execute(
                    text(
                        "INSERT INTO documents (space_id, title, doc_type, status, content, summary, size_bytes, "
                        "content_hash, created_by_user_id, updated_by_user_id) "
                        "VALUES (:s, :title, 'text', 'done', :c, :summary, :size, :h, :u, :u) RETURNING id"
                    ),
                    {
                        "s": space_id,
                        "title": _title_of(content),
                        "c": content,
                        "summary": content[:280],
                        "size": len(content.encode()),
                        "h": digest,
                        "u": user_id,
                    },
                )
            ).scalar_one()
            mem_id = (
                await conn.execute(
                    text(
                        "INSERT INTO memories (space_id, document_id, content, content_hash, category, version, "
                        "supersedes_id, embedding, created_by_user_id, updated_by_user_id) "
                        "VALUES (:s, :d, :c, :h, :cat, :v, :sup, CAST(:e AS halfvec), :u, :u) RETURNING id"
                    ),
                    {
                        "s": space_id,
                        "d": doc_id,
                        "c": content,
                        "h": digest,
                        "cat": category,
                        "v": old.version + 1 if old else 1,
                        "sup": old.id if old else None,
                        "e": HalfVector(embedding) if embedding is not None else None,
                        "u": user_id,
                    },
                )
            ).scalar_one()
            memory = await _fetch_memory(conn, "m.id = :id", {"id": mem_id})
            assert memory is not None
            superseded = await _fetch_memory(conn, "m.id = :id", {"id": old.id}) if old else None
            return SaveResult(memory, created=True, superseded=superseded)
    except IntegrityError:
        # A concurrent save of the same content won the unique index: return its memory.
        async with db.transaction([space_id]) as conn:
            existing = await _fetch_memory(
                conn, f"m.space_id = :s AND m.content_hash = :h AND {LIVE}", {"s": space_id, "h": digest}
            )
        if existing is None:
            raise
        return SaveResult(existing, created=False)


async def _check_quota(conn: AsyncConnection, space_id: uuid.UUID) -> None:
    quota = (
        await conn.execute(
            text("SELECT key, max_memories, max_documents FROM spaces WHERE id = :s"), {"s": space_id}
        )
    ).one()
    if quota.max_memories is None and quota.max_documents is None:
        return  # the common case: no counting on the write path
    counts = (
        await conn.execute(
            text(
                "SELECT (SELECT count(*) FROM memories m WHERE m.space_id = :s AND m.is_latest "
                " AND m.forgotten_at IS NULL) AS memories, "
                "(SELECT count(*) FROM documents d WHERE d.space_id = :s) AS documents"
            ),
            {"s": space_id},
        )
    ).one()
    if quota.max_memories is not None and counts.memories >= quota.max_memories:
        raise QuotaExceeded(f"space '{quota.key}' holds its quota of {quota.max_memories} memories")
    if quota.max_documents is not None and counts.documents >= quota.max_documents:
        raise QuotaExceeded(f"space '{quota.key}' holds its quota of {quota.max_documents} documents")


async def _superseded(
    conn: AsyncConnection,
    space_id: uuid.UUID,
    embedding: Sequence[float] | None,
    threshold: float | None,
    supersedes_id: uuid.UUID | None,
) -> Memory | None:
    if supersedes_id is not None:
        old = await _fetch_memory(
            conn, f"m.id = :id AND m.space_id = :s AND {LIVE}", {"id": supersedes_id, "s": space_id}
        )
        if old is None:
            raise NotFound("memory", str(supersedes_id))
        return old
    if embedding is None or threshold is None:
        return None
    row = (
        await conn.execute(
            text(
                "SELECT m.id, 1 - (m.embedding <=> CAST(:e AS halfvec)) AS similarity FROM memories m "
                f"WHERE m.space_id = :s AND {LIVE} AND m.embedding IS NOT NULL "
                "ORDER BY m.embedding <=> CAST(:e AS halfvec) LIMIT 1"
            ),
            {"e": HalfVector(embedding), "s": space_id},
        )
    ).first()
    if row is None or row.similarity < threshold:
        return None
    return await _fetch_memory(conn, "m.id = :id", {"id": row.id})


async def forget_memory(
    db: Database,
    ctx: SpaceContext,
    content: str,
    embedding: Sequence[float] | None = None,
    *,
    threshold: float = 0.75,
    margin: float = 0.05,
) -> ForgetResult:
    """Soft-forget the memory ``content`` designates: its id, its exact text, or a clear best match.

    Ambiguity forgets nothing and returns the candidates. History is kept; ``updatedBy`` records who.
    """
    content = validation.content(content)
    require_write(ctx)
    space_id = ctx.space.id
    async with db.transaction([space_id]) as conn:
        target = await _forget_target(conn, space_id, content)
        if target is None:
            candidates = await forget_candidates(conn, space_id, content, embedding)
            if not candidates:
                return ForgetResult(forgotten=None)
            best, best_score = candidates[0]
            runner_up = candidates[1][1] if len(candidates) > 1 else 0.0
            if best_score < threshold or best_score - runner_up < margin:
                return ForgetResult(forgotten=None, candidates=tuple(m for m, _ in candidates[:5]))
            target = best
        await conn.execute(
            text(
                "UPDATE memories SET forgotten_at = now(), updated_by_user_id = :u, updated_at = now() "
                "WHERE id = :id"
            ),
            {"u": ctx.caller.user.id, "id": target.id},
        )
        await conn.execute(
            text("UPDATE documents SET updated_by_user_id = :u, updated_at = now() WHERE id = :d"),
            {"u": ctx.caller.user.id, "d": target.document_id},
        )
        await record(
            conn,
            f"user:{ctx.caller.user.name}",
            "memory.forgotten",
            "memory",
            str(target.id),
            space_id=space_id,
            actor_user_id=ctx.caller.user.id,
            details={"content": target.content[:200]},
        )
        forgotten = await _fetch_memory(conn, "m.id = :id", {"id": target.id})
    return ForgetResult(forgotten=forgotten)


async def _forget_target(conn: AsyncConnection, space_id: uuid.UUID, content: str) -> Memory | None:
    """An unambiguous target: a memory id, or the exact text of a live memory."""
    try:
        memory_id = uuid.UUID(content)
    except ValueError:
        return await _fetch_memory(
            conn,
            f"m.space_id = :s AND m.content_hash = :h AND {LIVE}",
            {"s": space_id, "h": content_hash(content)},
        )
    found = await _fetch_memory(
        conn, f"m.id = :id AND m.space_id = :s AND {LIVE}", {"id": memory_id, "s": space_id}
    )
    if found is None:
        raise NotFound("memory", content)
    return found


async def forget_candidates(
    conn: AsyncConnection, space_id: uuid.UUID, content: str, embedding: Sequence[float] | None
) -> list[tuple[Memory, float]]:
    """Live memories that resemble ``content``, best first, scored 0..1 (meaning and wording)."""
    params: dict[str, Any] = {"s": space_id, "c": content}
    vector_score = "0.0"
    if embedding is not None:
        params["e"] = HalfVector(embedding)
        vector_score = "COALESCE(1 - (m.embedding <=> CAST(:e AS halfvec)), 0)"
    rows = await conn.execute(
        text(
            f"""
            WITH scored AS (
              SELECT m.id, GREATEST({vector_score}, word_similarity(:c, m.content),
                                    similarity(:c, m.content)) AS score
              FROM memories m
              WHERE m.space_id = :s AND {LIVE}
                AND (m.content % :c OR :c <% m.content
                     {"OR m.embedding <=> CAST(:e AS halfvec) < 0.6" if embedding is not None else ""})
            )
            SELECT id, score FROM scored ORDER BY score DESC LIMIT 6
            """
        ),
        params,
    )
    scores = [(r.id, float(r.score)) for r in rows]
    out = []
    for memory_id, score in scores:
        memory = await _fetch_memory(conn, "m.id = :id", {"id": memory_id})
        if memory is not None:
            out.append((memory, score))
    return out


async def list_memories(db: Database, ctx: SpaceContext, page: int = 1, limit: int = 10) -> Page[Memory]:
    """All memories of the space, newest first, old versions and forgotten ones included."""
    page, limit = validation.paging(page, limit)
    async with db.transaction([ctx.space.id]) as conn:
        total = (
            await conn.execute(text("SELECT count(*) FROM memories WHERE space_id = :s"), {"s": ctx.space.id})
        ).scalar_one()
        rows = await conn.execute(
            text(
                f"{MEMORY_SELECT} WHERE m.space_id = :s ORDER BY m.created_at DESC, m.id LIMIT :l OFFSET :o"
            ),
            {"s": ctx.space.id, "l": limit, "o": (page - 1) * limit},
        )
        return Page([memory_from_row(r) for r in rows], page, limit, int(total))


async def list_documents(db: Database, ctx: SpaceContext, page: int = 1, limit: int = 10) -> Page[Document]:
    page, limit = validation.paging(page, limit)
    async with db.transaction([ctx.space.id]) as conn:
        total = (
            await conn.execute(
                text("SELECT count(*) FROM documents WHERE space_id = :s"), {"s": ctx.space.id}
            )
        ).scalar_one()
        rows = await conn.execute(
            text(
                f"SELECT {DOCUMENT_COLS} {DOCUMENT_FROM} WHERE d.space_id = :s "
                "ORDER BY d.created_at DESC, d.id LIMIT :l OFFSET :o"
            ),
            {"s": ctx.space.id, "l": limit, "o": (page - 1) * limit},
        )
        return Page([_document(r) for r in rows], page, limit, int(total))


async def get_document(db: Database, caller: Caller, document_id: str | uuid.UUID) -> Document:
    """One document from any space the key can read; anything else is simply not found."""
    doc_id = validation.parse_uuid(document_id, "documentId")
    async with db.transaction(caller.readable_space_ids) as conn:
        row = (
            await conn.execute(
                text(f"SELECT {DOCUMENT_COLS}, d.content {DOCUMENT_FROM} WHERE d.id = :id"), {"id": doc_id}
            )
        ).first()
        if row is None:
            raise NotFound("document", str(doc_id))
        memory_ids = (
            await conn.execute(
                text("SELECT id FROM memories WHERE document_id = :d ORDER BY created_at"), {"d": doc_id}
            )
        ).scalars()
        return _document(row, content=row.content, memory_ids=list(memory_ids))


async def recent_memories(db: Database, ctx: SpaceContext, limit: int = 20) -> list[Memory]:
    """Most recently created memories of the space, in any state."""
    async with db.transaction([ctx.space.id]) as conn:
        rows = await conn.execute(
            text(f"{MEMORY_SELECT} WHERE m.space_id = :s ORDER BY m.created_at DESC LIMIT :l"),
            {"s": ctx.space.id, "l": limit},
        )
        return [memory_from_row(r) for r in rows]


@asynccontextmanager
async def _every_space(db: Database) -> AsyncIterator[AsyncConnection]:
    """A maintenance transaction that sees the rows of every space (backfill, re-embedding)."""
    async with db.transaction() as conn:
        ids = list((await conn.execute(text("SELECT id FROM spaces"))).scalars())
    # With no spaces there are no rows either: an empty setting shows exactly that.
    async with db.transaction(ids) as conn:
        yield conn


async def count_missing_embeddings(db: Database) -> int:
    """Memories saved without a vector (embedder down, or cleared for a model change), all spaces."""
    async with _every_space(db) as conn:
        result = await conn.execute(text("SELECT count(*) FROM memories WHERE embedding IS NULL"))
        return int(result.scalar_one())


async def missing_embeddings(db: Database, limit: int = 64) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Up to ``limit`` (space id, memory id, content) without a vector, oldest first."""
    async with _every_space(db) as conn:
        rows = await conn.execute(
            text(
                "SELECT space_id, id, content FROM memories WHERE embedding IS NULL "
                "ORDER BY created_at, id LIMIT :l"
            ),
            {"l": limit},
        )
        return [(r.space_id, r.id, r.content) for r in rows]


async def store_embeddings(
    db: Database, items: Sequence[tuple[uuid.UUID, uuid.UUID, Sequence[float]]]
) -> None:
    """Write vectors for (space id, memory id, vector) triples."""
    spaces = {space_id for space_id, _, _ in items}
    async with db.transaction(spaces) as conn:
        for space_id, memory_id, vector in items:
            await conn.execute(
                text("UPDATE memories SET embedding = CAST(:e AS halfvec) WHERE id = :id AND space_id = :s"),
                {"e": HalfVector(vector), "id": memory_id, "s": space_id},
            )


async def clear_embeddings(db: Database) -> int:
    """Drop every vector so a backfill re-embeds all memories (after a model change)."""
    async with _every_space(db) as conn:
        result = await conn.execute(text("UPDATE memories SET embedding = NULL WHERE embedding IS NOT NULL"))
        return int(result.rowcount)
