"""Documents and memories: save (with duplicates and versions), forget (soft), list and read."""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from . import dates, validation
from .audit import record
from .db import Database, HalfVector
from .errors import AccessDenied, Conflict, NotFound, QuotaExceeded, SecretRefused, ValidationError
from .models import Document, ForgetResult, Memory, Page, SaveResult, SpaceContext
from .secrets import find_secret

# Live: the latest version, not forgotten, not expired. The first two are every live index's
# predicate; an expired memory is left out at once and retired by ``purge_expired`` later.
LIVE = "m.is_latest AND m.forgotten_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())"

# A memory's text as duplicates are told: runs of whitespace one space, trimmed, lower-cased, hashed
# (the expression of the index ``memories_live_folded``, migration 0012). Folded by PostgreSQL on
# both sides, so the stored and the given text are folded alike.
FOLDED = r"md5(lower(btrim(regexp_replace({}, '\s+', ' ', 'g'))))"
_FOLDED_STORED = FOLDED.format("m.content")
_FOLDED_GIVEN = FOLDED.format("CAST(:c AS text)")

# The two vectors of a memory: the model's (``embedding``) and the static model's.
VectorColumn = Literal["embedding", "static_embedding"]
VECTOR_COLUMNS: tuple[VectorColumn, ...] = ("embedding", "static_embedding")

MEMORY_SELECT = """
    SELECT m.id, s.key AS space_key, m.document_id, m.content, m.category, m.version, m.supersedes_id,
           m.is_latest, m.forgotten_at, m.created_at, m.updated_at,
           m.created_by_user_id, cu.display_name AS created_by,
           m.updated_by_user_id, uu.display_name AS updated_by,
           m.embedding IS NOT NULL AS has_embedding,
           m.char_start, m.char_end, m.page, m.start_s, m.end_s, m.expires_at
    FROM memories m
    JOIN spaces s ON s.id = m.space_id
    LEFT JOIN users cu ON cu.id = m.created_by_user_id
    LEFT JOIN users uu ON uu.id = m.updated_by_user_id
"""

# The same with the review state and its people: listings and single memories (not search, whose
# results are live memories and whose one statement stays short).
REVIEWED_SELECT = MEMORY_SELECT.replace(
    "    FROM memories m",
    "    , m.review, ru.display_name AS reviewed_by, m.reviewed_at, m.review_reason, m.forget_review,\n"
    "      fu.display_name AS forget_proposed_by\n    FROM memories m",
) + (
    "    LEFT JOIN users ru ON ru.id = m.reviewed_by_user_id\n"
    "    LEFT JOIN users fu ON fu.id = m.forget_proposed_by_user_id\n"
)

DOCUMENT_COLS = """
    d.id, s.key AS space_key, d.title, d.doc_type, d.status, d.summary, d.size_bytes, d.created_at,
    d.updated_at, d.created_by_user_id, cu.display_name AS created_by,
    d.updated_by_user_id, uu.display_name AS updated_by,
    d.source, d.media_type, d.file_name, d.category, d.progress, d.error, d.metadata, d.forgotten_at,
    greatest(jsonb_array_length(d.pages), 1) AS page_count,
    (SELECT count(*) FROM memories dm WHERE dm.document_id = d.id) AS memory_count
"""
DOCUMENT_FROM = """
    FROM documents d
    JOIN spaces s ON s.id = d.space_id
    LEFT JOIN users cu ON cu.id = d.created_by_user_id
    LEFT JOIN users uu ON uu.id = d.updated_by_user_id
"""


# The review columns only ``REVIEWED_SELECT`` reads; a row without them reviews nothing.
_REVIEW_COLUMNS = (
    "review",
    "reviewed_by",
    "reviewed_at",
    "review_reason",
    "forget_review",
    "forget_proposed_by",
)


@functools.lru_cache(maxsize=64)
def _review_columns(fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in _REVIEW_COLUMNS if name in fields)


def memory_from_row(row: Any) -> Memory:
    # Which review columns the row has is looked up once per shape of row: asking a row of SQLAlchemy
    # for a column it lacks raises inside it, and six of those a row, on a listing of plain rows,
    # cost more than the rest of the conversion.
    review = {name: getattr(row, name) for name in _review_columns(tuple(row._fields))}
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
        **review,
        char_start=row.char_start,
        char_end=row.char_end,
        page=row.page,
        start_s=row.start_s,
        end_s=row.end_s,
        expires_at=row.expires_at,
    )


# What a forgotten document shows instead of its text: its metadata stays (that it existed, who
# forgot it, when), its words do not. The memories' history keeps them (listMemories status=forgotten).
FORGOTTEN_TITLE = "(forgotten)"


def document_from_row(
    row: Any, content: str | None = None, memory_ids: Sequence[uuid.UUID] = (), page: int = 1
) -> Document:
    forgotten = row.forgotten_at is not None
    # A memory's own document is titled by its text; a file's title is its name, which stays.
    title = FORGOTTEN_TITLE if forgotten and row.source == "memory" else row.title
    return Document(
        id=row.id,
        space_key=row.space_key,
        title=title,
        doc_type=row.doc_type,
        status=row.status,
        summary="" if forgotten else row.summary,
        size_bytes=row.size_bytes,
        created_at=row.created_at,
        updated_at=row.updated_at,
        created_by_user_id=row.created_by_user_id,
        created_by=row.created_by,
        updated_by_user_id=row.updated_by_user_id,
        updated_by=row.updated_by,
        content="" if forgotten and content is not None else content,
        memory_ids=tuple(memory_ids),
        source=row.source,
        media_type=row.media_type,
        file_name=row.file_name,
        category=row.category,
        progress=float(row.progress),
        error=row.error,
        metadata=dict(row.metadata or {}),
        forgotten_at=row.forgotten_at,
        memory_count=int(row.memory_count),
        page_count=int(row.page_count),
        page=page,
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
    row = (await conn.execute(text(f"{REVIEWED_SELECT} WHERE {where}"), params)).first()
    return memory_from_row(row) if row else None


async def _fetch_memories(conn: AsyncConnection, where: str, params: dict[str, Any]) -> list[Memory]:
    return [
        memory_from_row(row) for row in await conn.execute(text(f"{REVIEWED_SELECT} WHERE {where}"), params)
    ]


def _title_of(content: str) -> str:
    first = content.strip().splitlines()[0]
    return first if len(first) <= 80 else first[:77].rstrip() + "..."


SHORT_ID_LEN = 8  # the id form the tools print: the first group of the UUID's hex digits
# Search answers print a memory by the shortest prefix of its id, from this many hex digits, that no
# other memory of the space shares (``search.search_memories``): ids are most of what an answer line
# costs beyond its text (cl100k: 2.6 tokens for 4 digits, 4.9 for 8). Every tool takes 4 to 8 digits.
MIN_SHORT_ID_LEN = 4
_SHORT_ID = re.compile(rf"[0-9a-f]{{{MIN_SHORT_ID_LEN},{SHORT_ID_LEN}}}")


def short_id(value: uuid.UUID | str) -> str:
    """The short form of an id that the tools print and accept back (unique in practice per space)."""
    return str(value)[:SHORT_ID_LEN]


def id_range(value: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The UUIDs a short id stands for, as an index-friendly range; None if ``value`` is not one."""
    value = value.strip().lower()
    if not _SHORT_ID.fullmatch(value):
        return None
    return uuid.UUID(value.ljust(32, "0")), uuid.UUID(value.ljust(32, "f"))


# A save proposed under Review and not yet decided (not live: ``is_latest`` is false until accepted).
PROPOSED = "m.review = 'proposed'"

# What a save needs to know before it writes, in one round trip: a live memory with the same text
# once folded (the exact text first; or, under Review, a pending proposal of it), the nearest live
# memory by meaning (a restatement candidate) and the space's write policy and quotas with the
# counts they limit (counted only when a quota is set). Pending proposals count against maxMemories: accepting one adds nothing.
# maxDocuments counts documents (uploads and long texts), which a save does not add to.
_BEFORE_SAVE_SQL = f"""
    SELECT
      (SELECT m.id FROM memories m WHERE m.space_id = :s AND {_FOLDED_STORED} = {_FOLDED_GIVEN} AND {LIVE}
         ORDER BY m.content_hash = :h DESC LIMIT 1) AS duplicate,
      CASE WHEN s.write_policy = 'Review' THEN
        (SELECT m.id FROM memories m WHERE m.space_id = :s AND m.content_hash = :h AND {PROPOSED}) END
        AS pending,
      near.id AS near_id, near.similarity AS near_similarity,
      s.key, s.write_policy, s.max_memories, s.max_documents, s.max_bytes,
      CASE WHEN s.max_memories IS NOT NULL THEN
        (SELECT count(*) FROM memories m WHERE m.space_id = :s AND ({LIVE} OR {PROPOSED})) END AS memories,
      CASE WHEN s.max_documents IS NOT NULL THEN
        (SELECT count(*) FROM documents d WHERE d.space_id = :s AND d.source <> 'memory') END AS documents,
      CASE WHEN s.max_bytes IS NOT NULL THEN
        (SELECT coalesce(sum(d.size_bytes), 0) FROM documents d WHERE d.space_id = :s) END AS bytes
    FROM spaces s
    LEFT JOIN LATERAL (
      SELECT m.id, 1 - (m.embedding <=> CAST(:e AS halfvec)) AS similarity FROM memories m
      WHERE m.space_id = :s AND {LIVE} AND m.embedding IS NOT NULL AND CAST(:e AS halfvec) IS NOT NULL
      ORDER BY m.embedding <=> CAST(:e AS halfvec) LIMIT 1
    ) near ON true
    WHERE s.id = :s
"""

# The document and its memory in one statement. A proposal is not latest until it is accepted.
_INSERT_SQL = """
    WITH d AS (
      INSERT INTO documents (space_id, title, doc_type, status, content, summary, size_bytes, content_hash,
                             created_by_user_id, updated_by_user_id)
      VALUES (:s, :title, 'text', 'done', :c, :summary, :size, :h, :u, :u) RETURNING id
    )
    INSERT INTO memories (space_id, document_id, content, content_hash, category, version, supersedes_id,
                          embedding, static_embedding, created_by_user_id, updated_by_user_id,
                          is_latest, review, expires_at, happened_from, happened_to)
    SELECT :s, d.id, :c, :h, :cat, :v, :sup, CAST(:e AS halfvec), CAST(:se AS halfvec), :u, :u,
           CAST(:review AS text) IS NULL, :review, :exp, :hf, :ht FROM d
    RETURNING id
"""

# How often a save looks again for what it supersedes after another save superseded it first (each
# lost race means another save committed, so this bounds the writers racing on one fact).
_SUPERSEDE_ATTEMPTS = 64


def checked_content(content: str, category: str | None) -> tuple[str, str | None]:
    """Content and category as they would be stored, or the reason they cannot be: shape, length
    and credentials (the category too). Pure and cheap: callers run it before any embedding."""
    content = validation.content(content)
    category = validation.category(category)
    refuse_secrets(content=content, category=category)
    return content, category


def refuse_secrets(**fields: str | None) -> None:
    """Refuse, naming the field, a text that holds a credential. Every text that is stored and shown
    again goes through here: content, categories, titles, summaries and file names alike."""
    for name, value in fields.items():
        secret = find_secret(value) if value else None
        if secret is not None:
            raise SecretRefused(secret.kind, secret.label, field=name)


async def save_memory(
    db: Database,
    ctx: SpaceContext,
    content: str,
    category: str | None = None,
    embedding: Sequence[float] | None = None,
    *,
    supersede_threshold: float | None = None,
    similar_threshold: float | None = None,
    supersedes_id: uuid.UUID | None = None,
    static_embedding: Sequence[float] | None = None,
    idempotency_key: str | None = None,
    expires_at: datetime | None = None,
) -> SaveResult:
    """Save one statement as a document and its memory (live until ``expires_at`` when given).

    With an ``idempotency_key``, a save that repeats one the same API key made with that key within
    ``validation.IDEMPOTENCY_WINDOW_S`` returns that save's result (``SaveResult.replayed``) and
    stores nothing, whatever it asks (a client retrying may word the fact anew); the same key in
    another space is a ``Conflict``. The key is claimed in the
    save's transaction (a primary key, not a read), so concurrent repeats wait for the first.

    ``static_embedding`` is the memory's vector in the static model's space (search's third
    signal); without it the backfill computes it later.

    Exact duplicates of a live memory return that memory. With an embedding and a
    ``supersede_threshold``, a live memory of the space whose meaning is that close is replaced by
    a new version (kept as history); ``supersedes_id`` names the memory to replace explicitly. A
    new memory that supersedes nothing names the nearest live memory when its cosine reaches
    ``similar_threshold`` (``SaveResult.similar``): a restatement or correction, perhaps, left for
    the caller to decide (``SIMILAR_NAMED`` has the measurement) The
    memory replaced is locked first, so concurrent restatements line up as one chain of versions
    instead of forking it.

    In a space whose write policy is ``Review`` the memory is saved as a proposal
    (``SaveResult.proposed``): not live, so not searched, until a curator accepts it. What it would
    restate is recorded (``supersedes_id``) and retired only when it is accepted. A pending proposal
    of the same text is returned instead of a second one.
    """
    require_write(ctx)
    content, category = checked_content(content, category)
    digest = content_hash(content)
    user_id = ctx.caller.user.id
    space_id = ctx.space.id
    vector = HalfVector(embedding) if embedding is not None else None
    expires_at = validation.expires_at(expires_at)
    claim = _Claim.of(ctx, idempotency_key)
    similar: tuple[uuid.UUID, float] | None = None
    try:
        async with db.transaction([space_id]) as conn:
            if claim is not None and (replay := await claim.take(conn)) is not None:
                return replay
            # An expired memory of the same text still holds its place in the live unique index
            # until the purge job comes: it is retired now, so the text can live again.
            await _retire_expired(
                conn, "m.space_id = :s AND m.content_hash = :h", {"s": space_id, "h": digest}
            )
            quota_locked = False
            for _ in range(_SUPERSEDE_ATTEMPTS):
                before = (
                    await conn.execute(
                        text(_BEFORE_SAVE_SQL), {"s": space_id, "h": digest, "c": content, "e": vector}
                    )
                ).one()
                if not quota_locked and any(
                    q is not None for q in (before.max_memories, before.max_documents, before.max_bytes)
                ):
                    # Then the counts are read again, after the lock.
                    await take_turn(conn, space_id)
                    quota_locked = True
                    continue
                review = before.write_policy == "Review"
                if before.duplicate is not None or before.pending is not None:
                    existing_id = before.duplicate if before.duplicate is not None else before.pending
                    existing = await _fetch_memory(conn, "m.id = :id", {"id": existing_id})
                    assert existing is not None
                    if claim is not None:
                        await claim.settle(conn, existing.id)
                    return SaveResult(existing, created=False, proposed=existing.review == "proposed")
                # A memory saved on its own is no document: maxDocuments counts uploads and long texts.
                check_quota(before, len(content.encode()), new_documents=0)
                old_id = supersedes_id
                if old_id is None and supersede_threshold is not None and before.near_id is not None:
                    old_id = before.near_id if before.near_similarity >= supersede_threshold else None
                if old_id is None:
                    old = None
                    if similar_threshold is not None and before.near_id is not None:
                        similar = (before.near_id, float(before.near_similarity))
                        similar = similar if similar[1] >= similar_threshold else None
                    break
                if review:
                    # Only recorded: the memory stays live until the proposal is accepted.
                    old = await _fetch_memory(
                        conn, f"m.id = :id AND m.space_id = :s AND {LIVE}", {"id": old_id, "s": space_id}
                    )
                    if old is None and supersedes_id is not None:
                        raise NotFound("memory", str(supersedes_id))
                    break
                # Only a save that turns the old memory from latest to history may supersede it; one
                # that finds it superseded already looks again (READ COMMITTED: the next statement
                # sees the successor, which is then the nearest restatement).
                old = await _retire(conn, space_id, old_id, user_id)
                if old is not None:
                    break
                if supersedes_id is not None:
                    raise NotFound("memory", str(supersedes_id))
            else:
                raise Conflict("the memory this restates kept changing; retry the save")
            mem_id = (
                await conn.execute(
                    text(_INSERT_SQL),
                    {
                        "s": space_id,
                        "title": _title_of(content),
                        "c": content,
                        "summary": content[:280],
                        "size": len(content.encode()),
                        "h": digest,
                        "u": user_id,
                        "cat": category or (old.category if old else None),
                        "v": old.version + 1 if old else 1,
                        "sup": old.id if old else None,
                        "e": vector,
                        "se": HalfVector(static_embedding) if static_embedding is not None else None,
                        "review": "proposed" if review else None,
                        "exp": expires_at,
                        **dates.columns(content),
                    },
                )
            ).scalar_one()
            # The event webhooks deliver (store/webhooks.py), written with the memory.
            await record(
                conn,
                f"user:{ctx.caller.user.name}",
                "memory.proposed" if review else "memory.superseded" if old else "memory.saved",
                "memory",
                str(mem_id),
                space_id=space_id,
                actor_user_id=user_id,
                details={
                    "chars": len(content),
                    "category": category or (old.category if old else None),
                    **({"supersedes": str(old.id)} if old else {}),
                },
            )
            near = [similar[0]] if similar else []
            rows = {
                m.id: m
                for m in await _fetch_memories(
                    conn, "m.id = ANY(:ids)", {"ids": [mem_id, *([old.id] if old else []), *near]}
                )
            }
            if claim is not None:
                await claim.settle(conn, mem_id, created=True, superseded_id=old.id if old else None)
            named = (rows[similar[0]], similar[1]) if similar else None
            if review:
                return SaveResult(rows[mem_id], created=True, proposed=True, similar=named)
            return SaveResult(
                rows[mem_id], created=True, superseded=rows[old.id] if old else None, similar=named
            )
    except IntegrityError:
        # A concurrent save of the same content won a unique index: return its memory.
        async with db.transaction([space_id]) as conn:
            if claim is not None and (replay := await claim.take(conn)) is not None:
                return replay
            existing = await _fetch_memory(
                conn,
                f"m.space_id = :s AND m.content_hash = :h AND ({LIVE} OR {PROPOSED})",
                {"s": space_id, "h": digest},
            )
            if existing is None:
                raise
            if claim is not None:
                await claim.settle(conn, existing.id)
        return SaveResult(existing, created=False, proposed=existing.review == "proposed")


@dataclass(frozen=True)
class _Claim:
    """One save's idempotency key, held by the API key that sent it, in the space it saves to."""

    key_id: uuid.UUID
    idempotency_key: str
    space_id: uuid.UUID

    @classmethod
    def of(cls, ctx: SpaceContext, idempotency_key: str | None) -> _Claim | None:
        idempotency_key = validation.idempotency_key(idempotency_key)
        if idempotency_key is None:
            return None
        return cls(ctx.caller.key.id, idempotency_key, ctx.space.id)

    def _params(self) -> dict[str, Any]:
        return {"k": self.key_id, "ik": self.idempotency_key}

    async def take(self, conn: AsyncConnection) -> SaveResult | None:
        """Claim the key for this save (None: go on and save), or the result of the save that holds
        it. Claiming a key another open transaction holds waits for it to commit or roll back."""
        claimed = (
            await conn.execute(
                text(_CLAIM_SQL),
                {
                    **self._params(),
                    "s": self.space_id,
                    "window": validation.IDEMPOTENCY_WINDOW_S,
                },
            )
        ).first()
        if claimed is not None:
            return None
        return await self.replay(conn)

    async def replay(self, conn: AsyncConnection) -> SaveResult:
        """The result of the save that holds the key (a Conflict if it was a different save)."""
        row = (
            await conn.execute(
                text(
                    "SELECT space_id, memory_id, superseded_id, outcome FROM save_requests "
                    "WHERE key_id = :k AND idempotency_key = :ik"
                ),
                self._params(),
            )
        ).one()
        if row.space_id != self.space_id:
            raise Conflict(
                "idempotencyKey: this key was used for a save in another space in the last "
                f"{validation.IDEMPOTENCY_WINDOW_S // 3600} hours; use a new key for a new save"
            )
        memory = await _fetch_memory(conn, "m.id = :id", {"id": row.memory_id}) if row.memory_id else None
        if memory is None:  # its space was emptied since
            raise NotFound("memory", str(row.memory_id))
        superseded = (
            await _fetch_memory(conn, "m.id = :id", {"id": row.superseded_id}) if row.superseded_id else None
        )
        return SaveResult(
            memory,
            created=row.outcome == "created",
            superseded=superseded,
            proposed=memory.review == "proposed",
            replayed=True,
        )

    async def settle(
        self,
        conn: AsyncConnection,
        memory_id: uuid.UUID,
        *,
        created: bool = False,
        superseded_id: uuid.UUID | None = None,
    ) -> None:
        """Record what the save that claimed the key made (or found), in its transaction."""
        await conn.execute(
            text(
                "UPDATE save_requests SET memory_id = :m, superseded_id = :sup, outcome = :o "
                "WHERE key_id = :k AND idempotency_key = :ik"
            ),
            {
                **self._params(),
                "m": memory_id,
                "sup": superseded_id,
                "o": "created" if created else "existing",
            },
        )


# Claims the key, or takes over a claim older than the window; no row back: a live claim holds it.
_CLAIM_SQL = """
    INSERT INTO save_requests (key_id, idempotency_key, space_id) VALUES (:k, :ik, :s)
    ON CONFLICT (key_id, idempotency_key) DO UPDATE
      SET space_id = EXCLUDED.space_id, memory_id = NULL,
          superseded_id = NULL, outcome = NULL, created_at = now()
      WHERE save_requests.created_at < now() - make_interval(secs => :window)
    RETURNING true
"""


async def replayed_save(db: Database, ctx: SpaceContext, idempotency_key: str | None) -> SaveResult | None:
    """The result of an earlier save with this idempotency key, read before any embedding is spent
    on a repeat (``save_memory`` claims the key authoritatively; this is only the fast path)."""
    claim = _Claim.of(ctx, idempotency_key)
    if claim is None:
        return None
    async with db.transaction([ctx.space.id]) as conn:
        fresh = (
            await conn.execute(
                text(
                    "SELECT 1 FROM save_requests WHERE key_id = :k AND idempotency_key = :ik "
                    "AND created_at >= now() - make_interval(secs => :window)"
                ),
                {"k": claim.key_id, "ik": claim.idempotency_key, "window": validation.IDEMPOTENCY_WINDOW_S},
            )
        ).first()
        return await claim.replay(conn) if fresh is not None else None


async def take_turn(conn: AsyncConnection, space_id: uuid.UUID) -> None:
    """Writers into a space with a quota take turns on the space row (its lock, held to commit), so
    two of them cannot both see room for one more; counts read after this see the other's rows."""
    await conn.execute(text("SELECT 1 FROM spaces WHERE id = :s FOR NO KEY UPDATE"), {"s": space_id})


def check_quota(before: Any, new_bytes: int, new_documents: int = 1, new_memories: int = 1) -> None:
    """Refuse a write that would take the space past a quota, naming the quota and its use.

    ``before`` carries the space key, the quotas (``max_memories``, ``max_documents``,
    ``max_bytes``: None when not set) and the current counts of those set (``memories``,
    ``documents``, ``bytes``); the write adds ``new_*``.
    """
    limits = (
        ("maxMemories", before.max_memories, getattr(before, "memories", None), new_memories, "memories"),
        (
            "maxDocuments",
            before.max_documents,
            getattr(before, "documents", None),
            new_documents,
            "documents",
        ),
        ("maxBytes", getattr(before, "max_bytes", None), getattr(before, "bytes", None), new_bytes, "bytes"),
    )
    for quota, limit, used, adding, unit in limits:
        if limit is not None and adding > 0 and int(used or 0) + adding > limit:
            raise QuotaExceeded(
                f"space '{before.key}' is at its quota of {limit} {unit} ({quota}): {int(used or 0)} in "
                f"use, this write needs {adding} more; nothing was saved",
                quota=quota,
                limit=int(limit),
                used=int(used or 0),
            )


async def _retire(
    conn: AsyncConnection, space_id: uuid.UUID, memory_id: uuid.UUID, user_id: uuid.UUID
) -> Memory | None:
    """Turn a live memory into history (row-locked); None if it is not live any more."""
    retired = (
        await conn.execute(
            text(
                "UPDATE memories m SET is_latest = false, updated_by_user_id = :u, updated_at = now() "
                f"WHERE m.id = :id AND m.space_id = :s AND {LIVE} RETURNING m.id"
            ),
            {"u": user_id, "id": memory_id, "s": space_id},
        )
    ).first()
    if retired is None:
        return None
    return await _fetch_memory(conn, "m.id = :id", {"id": memory_id})


async def forget_memory(
    db: Database,
    ctx: SpaceContext,
    content: str,
    embedding: Sequence[float] | None = None,
    *,
    threshold: float = 0.75,
    margin: float = 0.05,
    memory_id: str | uuid.UUID | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> ForgetResult:
    """Soft-forget exactly ``memory_id`` (an id or short id) when it is given; otherwise the memory
    ``content`` designates: its id (or short id), its exact text, or one clear match. ``reason`` is
    kept in the audit event; with ``dry_run`` the answer is the same and nothing changes.

    A clear match is a text of at least ``validation.MIN_FORGET_WORDS`` words that resembles one
    memory as a whole (meaning or trigram similarity at least ``threshold``, ``margin`` ahead of the
    next): a fragment such as one word found inside a memory is no match. Anything less forgets
    nothing and returns the candidates. History is kept; ``updatedBy`` records who. Forgetting is
    idempotent: of concurrent forgets of one memory exactly one forgets it (and writes the audit
    event); the others are told it was forgotten already.
    """
    if memory_id is None:
        content = validation.content(content)
    reason = validation.optional_text(reason, "reason", MAX_FORGET_REASON)
    refuse_secrets(reason=reason)
    require_write(ctx)
    space_id = ctx.space.id
    async with db.transaction([space_id]) as conn:
        if memory_id is not None:
            targets = await _by_id(conn, space_id, str(memory_id))
            if targets is None:
                raise ValidationError("memoryId", "must be a memory id or its short id (4 to 8 characters)")
            if not targets:
                raise NotFound("memory", str(memory_id))
        else:
            targets = await _forget_targets(conn, space_id, content)
        if len(targets) > 1:
            return ForgetResult(forgotten=None, candidates=tuple(targets[:5]))
        target = targets[0] if targets else None
        if target is None:
            candidates = await forget_candidates(conn, space_id, content, embedding)
            if not candidates:
                return ForgetResult(forgotten=None)
            best, best_score = candidates[0]
            runner_up = candidates[1][1] if len(candidates) > 1 else 0.0
            if (
                len(content.split()) < validation.MIN_FORGET_WORDS
                or best_score < threshold
                or best_score - runner_up < margin
            ):
                return ForgetResult(forgotten=None, candidates=tuple(m for m, _ in candidates[:5]))
            target = best
        if dry_run:
            return ForgetResult(forgotten=target, already=target.forgotten_at is not None, dry_run=True)
        if ctx.space.write_policy == "Review" and target.forgotten_at is None:
            return await _propose_forget(conn, ctx, target)
        # The row lock of this UPDATE orders concurrent forgets; those that come second find the
        # memory forgotten and change nothing.
        changed = (
            await conn.execute(
                text(
                    "UPDATE memories SET forgotten_at = now(), updated_by_user_id = :u, updated_at = now() "
                    "WHERE id = :id AND forgotten_at IS NULL RETURNING id"
                ),
                {"u": ctx.caller.user.id, "id": target.id},
            )
        ).first()
        if changed is None:
            forgotten = await _fetch_memory(conn, "m.id = :id", {"id": target.id})
            return ForgetResult(forgotten=forgotten, already=True)
        await touch_after_forget(conn, target.document_id, ctx.caller.user.id)
        await record(
            conn,
            f"user:{ctx.caller.user.name}",
            "memory.forgotten",
            "memory",
            str(target.id),
            space_id=space_id,
            actor_user_id=ctx.caller.user.id,
            details={"chars": len(target.content), **({"reason": reason} if reason else {})},
        )
        forgotten = await _fetch_memory(conn, "m.id = :id", {"id": target.id})
    return ForgetResult(forgotten=forgotten)


MAX_FORGET_REASON = 500  # why a memory was forgotten, kept in its audit event


async def _retire_expired(
    conn: AsyncConnection, where: str, params: dict[str, Any], limit: int = 1000
) -> int:
    """Retire (as forgotten, history kept) up to ``limit`` expired live memories matching ``where``
    (over ``memories m``), each with a ``memory.expired`` audit event; rows another transaction holds
    are skipped (it retires them). Returns how many."""
    rows = (
        await conn.execute(
            text(
                "UPDATE memories SET forgotten_at = now(), updated_at = now() WHERE id IN ("
                f"  SELECT m.id FROM memories m WHERE {where} AND m.is_latest AND m.forgotten_at IS NULL"
                "   AND m.expires_at <= now() ORDER BY m.expires_at LIMIT :lim FOR UPDATE SKIP LOCKED"
                ") RETURNING id, space_id, document_id, length(content) AS chars, expires_at, created_by_user_id"
            ),
            {**params, "lim": limit},
        )
    ).all()
    for row in rows:
        await touch_after_forget(conn, row.document_id, row.created_by_user_id)
        await record(
            conn,
            "system:expiry",
            "memory.expired",
            "memory",
            str(row.id),
            space_id=row.space_id,
            details={"chars": row.chars, "expiresAt": row.expires_at},
        )
    return len(rows)


# A save that supersedes nothing names the nearest live memory from this similarity (on the default
# model's scale) as perhaps the fact it restates or corrects. Measured on labelled pairs
# (``python -m bench.restatements``: the generated benchmark's 76 corrections against 4,112 nearest
# different facts, 2,760 of them LoCoMo dev turns): no rule merges corrections safely (cosine 0.95
# already merges 2.3% of different facts and still misses every correction; 0.85 merges 23.6% and
# misses 81.6%), so only near-verbatim repeats supersede (0.99: 0.0% false merges) and from 0.75
# the answer names the similar memory (59% of corrections named; 61% of nearest different facts
# too, which costs a line in the answer, not a memory).
SIMILAR_NAMED = 0.75


# Any fixed 64-bit number: one purge at a time across every server pod.
PURGE_LOCK_ID = 0x6D656D6578706972


async def purge_expired(db: Database, grace_s: float, limit: int = 1000) -> int:
    """Retire memories expired more than ``grace_s`` ago (each a ``memory.expired`` audit event) and
    drop idempotency keys past their window. Any pod may call it; one runs at a time (an advisory
    lock: the others return 0 at once). Returns how many memories were retired."""
    async with _every_space(db) as conn:
        if not (
            await conn.execute(text("SELECT pg_try_advisory_xact_lock(:id)"), {"id": PURGE_LOCK_ID})
        ).scalar():
            return 0
        retired = await _retire_expired(
            conn, "m.expires_at < now() - make_interval(secs => :grace)", {"grace": grace_s}, limit
        )
        await conn.execute(
            text("DELETE FROM save_requests WHERE created_at < now() - make_interval(secs => :w)"),
            {"w": validation.IDEMPOTENCY_WINDOW_S},
        )
    return retired


async def touch_after_forget(conn: AsyncConnection, document_id: uuid.UUID, user_id: uuid.UUID) -> None:
    """The source document of a memory just forgotten: updated by whoever forgot it, and forgotten
    too when it was the memory's own (``add_memory``) and nothing unforgotten is left of it, so its
    text cannot be read back through ``getDocument``."""
    await conn.execute(
        text(
            "UPDATE documents d SET updated_by_user_id = :u, updated_at = now(), "
            "forgotten_at = CASE WHEN d.source = 'memory' AND d.forgotten_at IS NULL AND NOT EXISTS "
            "(SELECT 1 FROM memories m WHERE m.document_id = d.id AND m.forgotten_at IS NULL "
            "AND (m.is_latest OR m.review = 'proposed')) THEN now() ELSE d.forgotten_at END "
            "WHERE d.id = :d"
        ),
        {"u": user_id, "d": document_id},
    )


async def _propose_forget(conn: AsyncConnection, ctx: SpaceContext, target: Memory) -> ForgetResult:
    """Under Review a forget is a proposal: the memory stays live until a curator accepts it. A
    pending forget proposal of the same memory is left as it is (``already``)."""
    changed = (
        await conn.execute(
            text(
                "UPDATE memories SET forget_review = 'proposed', forget_proposed_by_user_id = :u, "
                "forget_proposed_at = now() "
                "WHERE id = :id AND forgotten_at IS NULL AND forget_review IS DISTINCT FROM 'proposed' "
                "RETURNING id"
            ),
            {"u": ctx.caller.user.id, "id": target.id},
        )
    ).first()
    proposed = await _fetch_memory(conn, "m.id = :id", {"id": target.id})
    return ForgetResult(forgotten=proposed, already=changed is None, proposed=True)


async def _by_id(conn: AsyncConnection, space_id: uuid.UUID, value: str) -> list[Memory] | None:
    """The latest version(s) a memory id or short id names in the space (a short id may fit
    several, newest first); None when ``value`` is neither form.

    An id finds its memory whether or not it was forgotten already (so a repeated forget says so).
    """
    span = id_range(value)
    if span is None:
        try:
            memory_id = uuid.UUID(value.strip())
        except ValueError:
            return None
        span = (memory_id, memory_id)
    return await _fetch_memories(
        conn,
        "m.id BETWEEN :lo AND :hi AND m.space_id = :s AND m.is_latest ORDER BY m.created_at DESC LIMIT 6",
        {"lo": span[0], "hi": span[1], "s": space_id},
    )


async def find_memory(db: Database, ctx: SpaceContext, memory_id: str | uuid.UUID) -> Memory:
    """The one live memory ``memory_id`` (an id or its short id) names in the space: what a save
    with ``memoryId`` makes a new version of."""
    async with db.transaction([ctx.space.id]) as conn:
        found = await _by_id(conn, ctx.space.id, str(memory_id))
    if found is None:
        raise ValidationError("memoryId", "must be a memory id or its short id (4 to 8 characters)")
    live = [m for m in found if m.forgotten_at is None]
    if not live:
        raise NotFound("memory", str(memory_id))
    if len(live) > 1:
        raise ValidationError(
            "memoryId",
            f"the short id fits {len(live)} memories ({', '.join(str(m.id) for m in live)}): give the full id",
        )
    return live[0]


async def _forget_targets(conn: AsyncConnection, space_id: uuid.UUID, content: str) -> list[Memory]:
    """Unambiguous targets: a memory id or short id (one memory, or the several a short id fits), or
    the exact text of a live memory. Empty when ``content`` is none of these.

    A full id of no memory of this space is not found, like a memory of another space.
    """
    by_id = await _by_id(conn, space_id, content)
    if by_id:
        return by_id
    if by_id is not None and id_range(content) is None:
        raise NotFound("memory", content)
    exact = await _fetch_memory(
        conn,
        f"m.space_id = :s AND m.content_hash = :h AND {LIVE}",
        {"s": space_id, "h": content_hash(content)},
    )
    return [exact] if exact is not None else []


async def forget_candidates(
    conn: AsyncConnection, space_id: uuid.UUID, content: str, embedding: Sequence[float] | None
) -> list[tuple[Memory, float]]:
    """Live memories that resemble ``content``, best first, scored 0..1 (meaning and wording)."""
    params: dict[str, Any] = {"s": space_id, "c": content}
    vector_score = "0.0"
    if embedding is not None:
        params["e"] = HalfVector(embedding)
        vector_score = "COALESCE(1 - (m.embedding <=> CAST(:e AS halfvec)), 0)"
    # Scored on the whole memory (meaning, trigram similarity), not on word similarity, which rates
    # any fragment found inside a memory as a perfect match (a forget of "deploys" forgot one).
    rows = await conn.execute(
        text(
            f"""
            WITH scored AS (
              SELECT m.id, GREATEST({vector_score}, similarity(:c, m.content)) AS score
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


# What ``list_memories`` can show, by the state of a memory. ``proposed`` lists what waits for a
# curator: saves proposed under Review, and live memories with a forget proposed.
MEMORY_STATUSES = {
    "live": LIVE,
    "proposed": f"({PROPOSED} OR m.forget_review = 'proposed')",
    "forgotten": "m.forgotten_at IS NOT NULL",
    "superseded": "NOT m.is_latest AND coalesce(m.review, 'accepted') = 'accepted'",
    "rejected": "m.review = 'rejected'",
    "all": "true",
}


async def list_memories(
    db: Database, ctx: SpaceContext, page: int = 1, limit: int = 10, status: str = "live"
) -> Page[Memory]:
    """The space's memories in one state (live ones by default), newest first."""
    page, limit = validation.paging(page, limit)
    condition = MEMORY_STATUSES.get(status)
    if condition is None:
        raise ValidationError("status", f"must be one of {', '.join(MEMORY_STATUSES)}")
    async with db.transaction([ctx.space.id]) as conn:
        total = (
            await conn.execute(
                text(f"SELECT count(*) FROM memories m WHERE m.space_id = :s AND {condition}"),
                {"s": ctx.space.id},
            )
        ).scalar_one()
        rows = await conn.execute(
            text(
                f"{REVIEWED_SELECT} WHERE m.space_id = :s AND {condition} "
                "ORDER BY m.created_at DESC, m.id LIMIT :l OFFSET :o"
            ),
            {"s": ctx.space.id, "l": limit, "o": (page - 1) * limit},
        )
        return Page([memory_from_row(r) for r in rows], page, limit, int(total))


async def recent_memories(db: Database, ctx: SpaceContext, limit: int = 20) -> list[Memory]:
    """The most recently created live memories of the space."""
    async with db.transaction([ctx.space.id]) as conn:
        rows = await conn.execute(
            text(f"{MEMORY_SELECT} WHERE m.space_id = :s AND {LIVE} ORDER BY m.created_at DESC LIMIT :l"),
            {"s": ctx.space.id, "l": limit},
        )
        return [memory_from_row(r) for r in rows]


@asynccontextmanager
async def _every_space(db: Database) -> AsyncIterator[AsyncConnection]:
    """A maintenance transaction that sees the rows of every space (backfill, re-embedding, the
    document queue, webhook delivery)."""
    async with db.transaction() as conn:
        ids = list((await conn.execute(text("SELECT id FROM spaces"))).scalars())
    # With no spaces there are no rows either: an empty setting shows exactly that.
    async with db.transaction(ids) as conn:
        yield conn


async def count_missing_embeddings(db: Database, column: VectorColumn = "embedding") -> int:
    """Memories without a vector in ``column`` (embedder down, cleared for a model change, or saved
    before the static embedding existed), all spaces."""
    async with _every_space(db) as conn:
        result = await conn.execute(
            text(f"SELECT count(*) FROM memories WHERE {_vector_column(column)} IS NULL")
        )
        return int(result.scalar_one())


async def missing_embeddings(
    db: Database, limit: int = 64, column: VectorColumn = "embedding"
) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Up to ``limit`` (space id, memory id, content) without a vector in ``column``, oldest first."""
    async with _every_space(db) as conn:
        rows = await conn.execute(
            text(
                f"SELECT space_id, id, content FROM memories WHERE {_vector_column(column)} IS NULL "
                "ORDER BY created_at, id LIMIT :l"
            ),
            {"l": limit},
        )
        return [(r.space_id, r.id, r.content) for r in rows]


async def store_embeddings(
    db: Database,
    items: Sequence[tuple[uuid.UUID, uuid.UUID, Sequence[float]]],
    column: VectorColumn = "embedding",
) -> None:
    """Write vectors into ``column`` for (space id, memory id, vector) triples, in one batch."""
    if not items:
        return
    spaces = {space_id for space_id, _, _ in items}
    async with db.transaction(spaces) as conn:
        await conn.execute(
            text(
                f"UPDATE memories SET {_vector_column(column)} = CAST(:e AS halfvec) "
                "WHERE id = :id AND space_id = :s"
            ),
            [
                {"e": HalfVector(vector), "id": memory_id, "s": space_id}
                for space_id, memory_id, vector in items
            ],
        )


def _vector_column(column: VectorColumn) -> str:
    if column not in VECTOR_COLUMNS:  # the name goes into the statement: only known columns
        raise ValueError(f"not a vector column: {column!r}")
    return column


async def clear_embeddings(db: Database) -> int:
    """Drop every vector so a backfill re-embeds all memories (after a model change)."""
    async with _every_space(db) as conn:
        result = await conn.execute(text("UPDATE memories SET embedding = NULL WHERE embedding IS NOT NULL"))
        return int(result.rowcount)
