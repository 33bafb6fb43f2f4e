"""Documents: list and read them (content in pages), bring in files and long texts, forget them.

A document is a source; its memories are the searchable pieces taken from it. A memory saved on
its own keeps a record of its own here (``source = 'memory'``, memories.py), which is not listed. A long text or an uploaded file is split into many; all
of them become visible in one transaction, so a search never sees half a document.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from . import dates, jobs, validation
from .audit import record
from .chunking import Piece
from .db import Database, HalfVector
from .errors import NotFound, QuotaExceeded, SecretRefused, ValidationError
from .memories import (
    DOCUMENT_COLS,
    DOCUMENT_FROM,
    check_quota,
    content_hash,
    document_from_row,
    id_range,
    refuse_secrets,
    require_write,
    take_turn,
)
from .models import Caller, Document, Page, SpaceContext
from .secrets import find_secret

FILE_PIECE_BYTES = 1024 * 1024  # an upload is stored (and read back) this much at a time
MAX_FILE_NAME = 255


@dataclass(frozen=True)
class Stored:
    """A document written or found: ``created`` False when the same file or text was there already."""

    document: Document
    created: bool


@dataclass(frozen=True)
class Contents:
    """What extraction and chunking made of a document, ready to be written."""

    content: str
    pieces: Sequence[Piece]
    vectors: Sequence[Sequence[float] | None]
    title: str
    summary: str
    pages: Sequence[tuple[int, int]]
    metadata: dict[str, Any]
    # The pieces' static vectors (search's third signal), in order; empty: left to the backfill.
    static_vectors: Sequence[Sequence[float]] = ()


# --- reading --------------------------------------------------------------------------------------


# What lists and counts as a document: an upload or a long text. A memory saved on its own keeps
# a row of its own in ``documents`` (``source = 'memory'``: where its text came from, read back by
# getDocument with the memory's document id), but it is that memory, not a document to browse.
LISTED = "d.source <> 'memory'"


async def list_documents(db: Database, ctx: SpaceContext, page: int = 1, limit: int = 10) -> Page[Document]:
    """The space's documents (uploads and long texts), newest first (forgotten ones too, marked so)."""
    page, limit = validation.paging(page, limit)
    async with db.transaction([ctx.space.id]) as conn:
        total = (
            await conn.execute(
                text(f"SELECT count(*) FROM documents d WHERE d.space_id = :s AND {LISTED}"),
                {"s": ctx.space.id},
            )
        ).scalar_one()
        rows = await conn.execute(
            text(
                f"SELECT {DOCUMENT_COLS} {DOCUMENT_FROM} WHERE d.space_id = :s AND {LISTED} "
                "ORDER BY d.created_at DESC, d.id LIMIT :l OFFSET :o"
            ),
            {"s": ctx.space.id, "l": limit, "o": (page - 1) * limit},
        )
        return Page([document_from_row(r) for r in rows], page, limit, int(total))


# One page of the content: the page's character range from ``pages`` (the whole content when the
# document has no pages recorded: a saved memory, or a document from before pages existed).
_PAGE_CONTENT = """
    CASE WHEN jsonb_array_length(d.pages) = 0 THEN d.content
         ELSE substr(d.content, (d.pages -> (:p - 1) ->> 0)::int + 1,
                     (d.pages -> (:p - 1) ->> 1)::int - (d.pages -> (:p - 1) ->> 0)::int) END AS content,
    CASE WHEN jsonb_array_length(d.pages) = 0 THEN 0 ELSE (d.pages -> (:p - 1) ->> 0)::int END AS page_start,
    CASE WHEN jsonb_array_length(d.pages) = 0 THEN length(d.content)
         ELSE (d.pages -> (:p - 1) ->> 1)::int END AS page_end
"""


async def _find(
    conn: AsyncConnection,
    document_id: str | uuid.UUID,
    columns: str,
    params: dict[str, Any],
    *,
    by_memory: bool = False,
) -> Any:
    """The one document an id or short id names; with ``by_memory``, a memory's id (or the short id
    search and listMemories print) names the document it was taken from, too."""
    span = id_range(str(document_id))
    lo, hi = span or (validation.parse_uuid(str(document_id).strip(), "documentId"),) * 2
    rows = (
        await conn.execute(
            text(f"SELECT {columns} {DOCUMENT_FROM} WHERE d.id BETWEEN :lo AND :hi LIMIT 2"),
            {"lo": lo, "hi": hi, **params},
        )
    ).all()
    if not rows and by_memory:
        rows = (
            await conn.execute(
                text(
                    f"SELECT {columns} {DOCUMENT_FROM} WHERE d.id IN "
                    "(SELECT m.document_id FROM memories m WHERE m.id BETWEEN :lo AND :hi) LIMIT 2"
                ),
                {"lo": lo, "hi": hi, **params},
            )
        ).all()
    if len(rows) != 1:  # none, or a short id that fits two documents
        raise NotFound("document", str(document_id))
    return rows[0]


async def get_document(db: Database, caller: Caller, document_id: str | uuid.UUID, page: int = 1) -> Document:
    """One document (by id or short id, or by the id or short id of a memory taken from it) from any
    space the key can read, with one page of its content and the memories taken from that page;
    anything else is not found."""
    page = validation.page_number(page)
    async with db.transaction(caller.readable_space_ids) as conn:
        row = await _find(conn, document_id, f"{DOCUMENT_COLS}, {_PAGE_CONTENT}", {"p": page}, by_memory=True)
        if page > row.page_count:
            raise ValidationError("page", f"this document has {row.page_count} page(s)")
        memory_ids = (
            await conn.execute(
                text(
                    "SELECT id FROM memories WHERE document_id = :d "
                    "AND (char_start IS NULL OR char_start BETWEEN :s AND :e) ORDER BY char_start, created_at"
                ),
                {"d": row.id, "s": row.page_start, "e": row.page_end},
            )
        ).scalars()
        return document_from_row(row, content=row.content, memory_ids=list(memory_ids), page=page)


async def _get(conn: AsyncConnection, document_id: uuid.UUID) -> Document:
    row = await _find(conn, document_id, DOCUMENT_COLS, {})
    return document_from_row(row)


# --- writing --------------------------------------------------------------------------------------


async def _check_documents_quota(conn: AsyncConnection, ctx: SpaceContext, size: int) -> None:
    """One more document of ``size`` bytes within maxDocuments and maxBytes (its memories are
    counted when they are written, see ``_insert_memories``). Uploads take turns on the space row as
    saves do, and the counts are read after the lock, by a statement of its own."""
    await take_turn(conn, ctx.space.id)
    row = (
        await conn.execute(
            text(
                "SELECT s.key, s.max_memories, s.max_documents, s.max_bytes, "
                f"(SELECT count(*) FROM documents d WHERE d.space_id = s.id AND {LISTED}) AS documents, "
                "CASE WHEN s.max_bytes IS NOT NULL THEN "
                "(SELECT coalesce(sum(d.size_bytes), 0) FROM documents d WHERE d.space_id = s.id) END AS bytes "
                "FROM spaces s WHERE s.id = :s"
            ),
            {"s": ctx.space.id},
        )
    ).one()
    check_quota(row, size, new_memories=0)


async def _existing(conn: AsyncConnection, space_id: uuid.UUID, digest: str) -> Document | None:
    found = (
        await conn.execute(
            text(
                "SELECT id FROM documents WHERE space_id = :s AND content_hash = :h AND source <> 'memory' "
                "AND forgotten_at IS NULL AND status <> 'failed'"
            ),
            {"s": space_id, "h": digest},
        )
    ).scalar()
    return await _get(conn, found) if found is not None else None


def file_name(value: str | None) -> str | None:
    """The name of an uploaded file as stored: its last path part, fit to store, at most 255 characters."""
    if not value:
        return None
    name = value.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if validation.text_problem(name) is not None:
        name = "".join(ch for ch in name if validation.text_problem(ch) is None)
    return name[:MAX_FILE_NAME] or None


async def create_upload(
    db: Database,
    ctx: SpaceContext,
    path: Path,
    *,
    digest: str,
    size: int,
    media_type: str,
    name: str | None,
    title: str | None = None,
    category: str | None = None,
) -> Stored:
    """Queue an uploaded file (already on disk, checked for size and type) for extraction.

    The same file in the same space returns its document instead (unless that one failed or was
    forgotten). The file is kept in the database until a worker has extracted it.
    """
    require_write(ctx)
    title = validation.optional_text(title, "title", validation.MAX_NAME)
    category = validation.category(category)
    name = file_name(name)
    refuse_secrets(title=title, category=category, fileName=name)
    try:
        async with db.transaction([ctx.space.id]) as conn:
            existing = await _existing(conn, ctx.space.id, digest)
            if existing is not None:
                return Stored(existing, created=False)
            await _check_documents_quota(conn, ctx, size)
            doc_id = (
                await conn.execute(
                    text(
                        "INSERT INTO documents (space_id, title, doc_type, status, size_bytes, content_hash, "
                        "source, media_type, file_name, category, progress, metadata, created_by_user_id, "
                        "updated_by_user_id) VALUES (:s, :t, :k, 'queued', :n, :h, 'file', :m, :f, :c, 0, "
                        "CAST(:meta AS jsonb), :u, :u) RETURNING id"
                    ),
                    {
                        "s": ctx.space.id,
                        "t": title or name or "untitled",
                        "k": media_type.split("/")[-1],
                        "n": size,
                        "h": digest,
                        "m": media_type,
                        "f": name,
                        "c": category,
                        "meta": json.dumps({"titleGiven": title is not None}),
                        "u": ctx.caller.user.id,
                    },
                )
            ).scalar_one()
            with path.open("rb") as source:
                seq = 0
                while data := source.read(FILE_PIECE_BYTES):
                    await conn.execute(
                        text(
                            "INSERT INTO document_files (document_id, space_id, seq, data) VALUES (:d, :s, :q, :b)"
                        ),
                        {"d": doc_id, "s": ctx.space.id, "q": seq, "b": data},
                    )
                    seq += 1
            await jobs.enqueue(conn, doc_id, ctx.space.id)
            return Stored(await _get(conn, doc_id), created=True)
    except IntegrityError:
        # A concurrent upload of the same file won the unique index: return its document.
        async with db.transaction([ctx.space.id]) as conn:
            existing = await _existing(conn, ctx.space.id, digest)
        if existing is None:
            raise
        return Stored(existing, created=False)


async def write_file(db: Database, job: jobs.Job, target: Path) -> dict[str, Any]:
    """Copy a queued document's file to ``target``; returns the document's row as a dict."""
    async with db.transaction([job.space_id]) as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT d.media_type, d.file_name, d.title, d.category, d.created_by_user_id, d.metadata "
                    "FROM documents d WHERE d.id = :d"
                ),
                {"d": job.document_id},
            )
        ).one()
        result = await conn.stream(
            text("SELECT data FROM document_files WHERE document_id = :d ORDER BY seq"),
            {"d": job.document_id},
        )
        with target.open("wb") as out:
            async for piece in result:
                out.write(piece.data)
    return dict(row._mapping)


def find_secret_in(pieces: Sequence[Piece]) -> SecretRefused | None:
    """The first piece that looks like a credential, as the refusal to raise or record."""
    for piece in pieces:
        secret = find_secret(piece.text)
        if secret is not None:
            return SecretRefused(secret.kind, secret.label)
    return None


async def _insert_memories(
    conn: AsyncConnection,
    ctx_space: uuid.UUID,
    document_id: uuid.UUID,
    user_id: uuid.UUID | None,
    category: str | None,
    contents: Contents,
) -> int:
    """Insert the document's memories; a piece that repeats a live memory of the space is skipped
    (the one memory of that text stays where it is). Returns how many were made.

    In a space under Review they are proposals, like any save there (pending proposals count
    against maxMemories), and a piece that repeats a pending proposal is skipped too.

    Under a memory quota the count and the insert are one decision: the space row is locked first
    (`take_turn`, held to commit), and the count is read after it, by a statement of its own, so two
    workers or pods finishing documents at once cannot both see room for theirs.
    """
    policy = (
        await conn.execute(text("SELECT s.max_memories FROM spaces s WHERE s.id = :s"), {"s": ctx_space})
    ).one()
    if policy.max_memories is not None:
        await take_turn(conn, ctx_space)
    quota = (
        await conn.execute(
            text(
                "SELECT s.key, s.write_policy, s.max_memories, CASE WHEN s.max_memories IS NOT NULL THEN "
                "(SELECT count(*) FROM memories m WHERE m.space_id = s.id AND (m.is_latest AND m.forgotten_at "
                "IS NULL AND (m.expires_at IS NULL OR m.expires_at > now()) OR m.review = 'proposed')) END AS n "
                "FROM spaces s WHERE s.id = :s"
            ),
            {"s": ctx_space},
        )
    ).one()
    review = quota.write_policy == "Review"
    if quota.max_memories is not None and quota.n + len(contents.pieces) > quota.max_memories:
        raise QuotaExceeded(
            f"space '{quota.key}' holds {quota.n} of its {quota.max_memories} memories; this document "
            f"needs {len(contents.pieces)}"
        )
    statics: Sequence[Sequence[float] | None] = contents.static_vectors or [None] * len(contents.pieces)
    rows = [
        {
            "s": ctx_space,
            "d": document_id,
            "c": piece.text,
            "h": content_hash(piece.text),
            "cat": category,
            "e": HalfVector(vector) if vector is not None else None,
            "se": HalfVector(static) if static is not None else None,
            "u": user_id,
            "cs": piece.start,
            "ce": piece.end,
            "p": piece.page,
            "ss": piece.start_s,
            "es": piece.end_s,
            "review": "proposed" if review else None,
            **dates.columns(piece.text),
        }
        for piece, vector, static in zip(contents.pieces, contents.vectors, statics, strict=True)
    ]
    if rows and not review:
        await conn.execute(
            text(
                "INSERT INTO memories (space_id, document_id, content, content_hash, category, embedding, "
                "static_embedding, created_by_user_id, updated_by_user_id, char_start, char_end, page, "
                "start_s, end_s, happened_from, happened_to) VALUES (:s, :d, :c, :h, :cat, CAST(:e AS halfvec), "
                "CAST(:se AS halfvec), :u, :u, :cs, :ce, :p, :ss, :es, :hf, :ht) "
                "ON CONFLICT (space_id, content_hash) WHERE is_latest AND forgotten_at IS NULL DO NOTHING"
            ),
            rows,
        )
    elif rows:
        await conn.execute(
            text(
                "INSERT INTO memories (space_id, document_id, content, content_hash, category, embedding, "
                "static_embedding, created_by_user_id, updated_by_user_id, char_start, char_end, page, "
                "start_s, end_s, happened_from, happened_to, is_latest, review) "
                "SELECT :s, :d, :c, :h, :cat, CAST(:e AS halfvec), CAST(:se AS halfvec), :u, :u, :cs, :ce, "
                ":p, :ss, :es, :hf, :ht, false, :review "
                "WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.space_id = :s AND m.content_hash = :h "
                "AND m.is_latest AND m.forgotten_at IS NULL) "
                "ON CONFLICT (space_id, content_hash) WHERE review = 'proposed' DO NOTHING"
            ),
            rows,
        )
    made = (
        await conn.execute(text("SELECT count(*) FROM memories WHERE document_id = :d"), {"d": document_id})
    ).scalar_one()
    return int(made)


def _page_ranges(contents: Contents) -> str:
    return json.dumps([list(p) for p in contents.pages])


async def complete(db: Database, job: jobs.Job, contents: Contents) -> int | None:
    """Write an extracted document, its memories and its end as one transaction; the memory count,
    or None when the job is no longer this worker's (another worker took it over)."""
    async with db.transaction([job.space_id]) as conn:
        if not await jobs.release(conn, job):
            return None
        row = (
            await conn.execute(
                text("SELECT category, created_by_user_id FROM documents WHERE id = :d"),
                {"d": job.document_id},
            )
        ).one()
        made = await _insert_memories(
            conn, job.space_id, job.document_id, row.created_by_user_id, row.category, contents
        )
        await conn.execute(
            text(
                "UPDATE documents SET status = 'done', progress = 1, error = NULL, content = :c, summary = :sm, "
                "title = :t, pages = CAST(:p AS jsonb), metadata = metadata || CAST(:meta AS jsonb), "
                "updated_at = now() WHERE id = :d"
            ),
            {
                "c": contents.content,
                "sm": contents.summary,
                "t": contents.title,
                "p": _page_ranges(contents),
                "meta": json.dumps(contents.metadata, default=str),
                "d": job.document_id,
            },
        )
        await conn.execute(text("DELETE FROM document_files WHERE document_id = :d"), {"d": job.document_id})
        # What a space's webhooks send when an upload is ready (``jobs.fail`` writes the failure).
        await record(
            conn,
            "system",
            "document.done",
            "document",
            str(job.document_id),
            space_id=job.space_id,
            details={"memories": made, "title": contents.title},
        )
        return made


async def save_text(
    db: Database, ctx: SpaceContext, category: str | None, contents: Contents
) -> tuple[Stored, int]:
    """A long text as one document of several memories, all in one transaction; the same text again
    returns its document. Returns the document and how many memories it has."""
    require_write(ctx)
    digest = content_hash(contents.content)
    try:
        async with db.transaction([ctx.space.id]) as conn:
            existing = await _existing(conn, ctx.space.id, digest)
            if existing is not None:
                return Stored(existing, created=False), existing.memory_count
            await _check_documents_quota(conn, ctx, len(contents.content.encode()))
            doc_id = (
                await conn.execute(
                    text(
                        "INSERT INTO documents (space_id, title, doc_type, status, content, summary, size_bytes, "
                        "content_hash, source, media_type, category, progress, pages, created_by_user_id, "
                        "updated_by_user_id) VALUES (:s, :t, 'text', 'done', :c, :sm, :n, :h, 'text', "
                        "'text/plain', :cat, 1, CAST(:p AS jsonb), :u, :u) RETURNING id"
                    ),
                    {
                        "s": ctx.space.id,
                        "t": contents.title,
                        "c": contents.content,
                        "sm": contents.summary,
                        "n": len(contents.content.encode()),
                        "h": digest,
                        "cat": category,
                        "p": _page_ranges(contents),
                        "u": ctx.caller.user.id,
                    },
                )
            ).scalar_one()
            made = await _insert_memories(conn, ctx.space.id, doc_id, ctx.caller.user.id, category, contents)
            return Stored(await _get(conn, doc_id), created=True), made
    except IntegrityError:
        async with db.transaction([ctx.space.id]) as conn:
            existing = await _existing(conn, ctx.space.id, digest)
        if existing is None:
            raise
        return Stored(existing, created=False), existing.memory_count


@dataclass(frozen=True)
class ForgetDocumentResult:
    document: Document
    memories_forgotten: int
    already: bool  # the document had been forgotten before


async def forget_document(db: Database, caller: Caller, document_id: str | uuid.UUID) -> ForgetDocumentResult:
    """Forget a document and every live memory taken from it (history is kept), and stop its
    extraction if it is still waiting. Recorded in the audit log; idempotent."""
    async with db.transaction(caller.readable_space_ids) as conn:
        row = await _find(conn, document_id, "d.id, d.space_id, d.forgotten_at", {})
        grant = caller.grant_for(row.space_id)
        assert grant is not None  # row-level security showed only readable spaces
        ctx = SpaceContext(caller, grant.space, grant.effective)
        require_write(ctx)
        marked = (
            await conn.execute(
                text(
                    "UPDATE documents SET forgotten_at = now(), updated_by_user_id = :u, updated_at = now() "
                    "WHERE id = :d AND forgotten_at IS NULL RETURNING id"
                ),
                {"u": caller.user.id, "d": row.id},
            )
        ).first()
        if marked is None:
            return ForgetDocumentResult(await _get(conn, row.id), 0, already=True)
        forgotten = (
            await conn.execute(
                text(
                    "UPDATE memories SET forgotten_at = now(), updated_by_user_id = :u, updated_at = now() "
                    "WHERE document_id = :d AND forgotten_at IS NULL AND is_latest"
                ),
                {"u": caller.user.id, "d": row.id},
            )
        ).rowcount
        # A job still waiting or running is dropped: a worker that finishes it finds it gone.
        dropped = (
            await conn.execute(
                text("DELETE FROM document_jobs WHERE document_id = :d RETURNING 1"), {"d": row.id}
            )
        ).first()
        if dropped is not None:
            await conn.execute(
                text("UPDATE documents SET status = 'failed', error = :e WHERE id = :d"),
                {"e": "forgotten before it was extracted", "d": row.id},
            )
        await conn.execute(text("DELETE FROM document_files WHERE document_id = :d"), {"d": row.id})
        await record(
            conn,
            f"user:{caller.user.name}",
            "document.forgotten",
            "document",
            str(row.id),
            space_id=row.space_id,
            actor_user_id=caller.user.id,
            details={"memories": forgotten},
        )
        return ForgetDocumentResult(await _get(conn, row.id), int(forgotten), already=False)
