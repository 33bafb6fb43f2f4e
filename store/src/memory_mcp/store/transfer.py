"""Export a space as JSON lines (or Markdown for people) and import such a file into a space.

One JSON object a line. ``{"type": "document", ...}`` lines (``--history`` only: documents made
from a text or a file, not the one-memory documents every saved statement gets) come before the
``{"type": "memory", ...}`` lines that point at them, and every memory comes after the version it
supersedes, so a file can be imported in one pass from top to bottom.

An import checks every line before it writes anything, runs each memory through the checks a save
runs (:func:`~.memories.checked_content`: length, shape, credentials), and recognises what it
imported before by content hash and creation time, so a second run adds nothing. Ids are new in
the target space; version links and document links are kept by mapping the file's ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from . import dates, validation
from .audit import record
from .db import Database, HalfVector
from .errors import Conflict, QuotaExceeded, SecretRefused, StoreError, ValidationError
from .memories import checked_content, content_hash, refuse_secrets, take_turn

FORMAT_VERSION = 1
# What a memory can be in a file. ``proposed`` and ``rejected`` exist where the review flow does.
STATUSES = ("live", "superseded", "forgotten", "proposed", "rejected")
MAX_TITLE = 500
MAX_DOCUMENT = 10_000_000  # characters of one document's text
IMPORT_BATCH = 64  # memories embedded and written together
# Where in its document a memory comes from (columns of documents' memories): column, JSON field,
# and whether it is a whole number (character offsets, pages) or seconds (audio and video).
POSITION = (
    ("char_start", "charStart", int),
    ("char_end", "charEnd", int),
    ("page", "page", int),
    ("start_s", "startS", float),
    ("end_s", "endS", float),
)


# --- export -------------------------------------------------------------------------------------


async def _columns(conn: AsyncConnection) -> set[str]:
    """``table.column`` names of the optional columns later migrations add (review flow, documents,
    the static embedding)."""
    rows = await conn.execute(
        text(
            "SELECT table_name || '.' || column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name IN ('memories', 'documents') "
            "AND column_name IN ('review', 'source', 'category', 'file_name', 'forgotten_at', "
            "'char_start', 'char_end', 'page', 'start_s', 'end_s', 'static_embedding', 'expires_at')"
        )
    )
    return set(rows.scalars())


def _person(name: str | None, email: str | None, display: str | None) -> dict[str, str] | None:
    return None if name is None else {"name": name, "email": email or "", "displayName": display or ""}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


_PEOPLE = """
    cu.name AS c_name, cu.email AS c_email, cu.display_name AS c_display,
    uu.name AS u_name, uu.email AS u_email, uu.display_name AS u_display
"""


def _status(row: Any) -> str:
    if row.forgotten_at is not None:
        return "forgotten"
    if row.review in ("proposed", "rejected"):
        return str(row.review)
    return "live" if row.is_latest else "superseded"


async def export_records(
    db: Database, space_id: uuid.UUID, history: bool = False
) -> AsyncIterator[dict[str, Any]]:
    """The space's records in file order: live memories, or with ``history`` everything it holds."""
    async with db.transaction([space_id]) as conn:
        cols = await _columns(conn)
        real_doc = "d.source <> 'memory'" if "documents.source" in cols else "false"
        if history:
            extra = ", ".join(
                f"d.{c}" if f"documents.{c}" in cols else f"NULL AS {c}"
                for c in ("source", "category", "file_name", "forgotten_at")
            )
            documents = await conn.stream(
                text(
                    f"SELECT d.id, d.title, d.doc_type, d.status, d.content, d.summary, d.created_at, "
                    f"d.updated_at, {extra}, {_PEOPLE} FROM documents d "
                    "LEFT JOIN users cu ON cu.id = d.created_by_user_id "
                    "LEFT JOIN users uu ON uu.id = d.updated_by_user_id "
                    f"WHERE d.space_id = :s AND {real_doc} ORDER BY d.created_at, d.id"
                ),
                {"s": space_id},
            )
            async for d in documents:
                yield {
                    "type": "document",
                    "id": str(d.id),
                    "title": d.title,
                    "docType": d.doc_type,
                    "source": d.source,
                    "category": d.category,
                    "fileName": d.file_name,
                    "content": d.content,
                    "summary": d.summary,
                    "forgotten": d.forgotten_at is not None,
                    "createdAt": _iso(d.created_at),
                    "updatedAt": _iso(d.updated_at),
                    "createdBy": _person(d.c_name, d.c_email, d.c_display),
                    "updatedBy": _person(d.u_name, d.u_email, d.u_display),
                }
        review = "m.review" if "memories.review" in cols else "NULL AS review"
        position = [(column, name) for column, name, _ in POSITION if f"memories.{column}" in cols]
        where = "".join(f", m.{column}" for column, _ in position)
        expiry = "m.expires_at" if "memories.expires_at" in cols else "NULL AS expires_at"
        which = "true" if history else "m.is_latest AND m.forgotten_at IS NULL"
        if not history and "memories.expires_at" in cols:
            which += " AND (m.expires_at IS NULL OR m.expires_at > now())"  # live: not expired
        rows = await conn.stream(
            text(
                "SELECT m.id, m.content, m.category, m.version, m.supersedes_id, m.is_latest, m.forgotten_at, "
                f"m.created_at, m.updated_at, {review}{where}, {expiry}, d.id AS doc_id, d.title AS doc_title, "
                f"{real_doc} AS real_doc, {_PEOPLE} FROM memories m JOIN documents d ON d.id = m.document_id "
                "LEFT JOIN users cu ON cu.id = m.created_by_user_id "
                "LEFT JOIN users uu ON uu.id = m.updated_by_user_id "
                f"WHERE m.space_id = :s AND {which} ORDER BY m.created_at, m.id"
            ),
            {"s": space_id},
        )
        async for m in rows:
            yield {
                "type": "memory",
                "id": str(m.id),
                "content": m.content,
                "category": m.category,
                "status": _status(m),
                "version": m.version,
                "supersedes": str(m.supersedes_id) if m.supersedes_id else None,
                "document": str(m.doc_id) if m.real_doc else None,
                "documentTitle": m.doc_title if m.real_doc else None,
                "createdAt": _iso(m.created_at),
                "updatedAt": _iso(m.updated_at),
                "forgottenAt": _iso(m.forgotten_at),
                **({"expiresAt": _iso(m.expires_at)} if m.expires_at is not None else {}),
                **{name: getattr(m, column) for column, name in position},
                "createdBy": _person(m.c_name, m.c_email, m.c_display),
                "updatedBy": _person(m.u_name, m.u_email, m.u_display),
            }


def jsonl_line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


# Each memory of the Markdown export ends with a comment that renders as nothing and holds what the
# note for people rounds off (exact times, the category): ``import --from markdown`` reads it back.
MARKDOWN_NOTE = "<!-- memory-mcp "


def markdown(space_key: str, records: Iterable[Mapping[str, Any]]) -> str:
    """The records for people: by category, then by document, each memory with who and when."""
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in records:
        if r["type"] != "memory":
            continue
        category = r["category"] or "uncategorised"
        groups.setdefault(category, {}).setdefault(r["documentTitle"] or "", []).append(r)
    out = [f"# Space {space_key}", ""]
    for category in sorted(groups):
        out += [f"## {category}", ""]
        for title in sorted(groups[category]):
            if title:
                out += [f"### {title}", ""]
            for r in groups[category][title]:
                by = (r["createdBy"] or {}).get("displayName") or (r["createdBy"] or {}).get("name")
                note = [f"{(r['createdAt'] or '')[:10]}"]
                if by:
                    note.append(f"by {by}")
                if r["version"] > 1:
                    note.append(f"version {r['version']}")
                if r["status"] != "live":
                    note.append(r["status"])
                body = r["content"].replace("\n", "\n  ")
                exact = {k: r[k] for k in ("category", "version", "status", "createdAt", "updatedAt")}
                out.append(f"- {body}  \n  _{', '.join(note)}_")
                out.append(f"  {MARKDOWN_NOTE}{json.dumps(exact, ensure_ascii=False)} -->")
            out.append("")
    return "\n".join(out)


# --- import: checking the file ------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class ImportRefused(StoreError):
    """The file has bad lines; nothing was imported. ``problems`` names each line and what is wrong."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__(f"{len(problems)} bad line(s); nothing imported")
        self.problems = list(problems)


@dataclass
class Entry:
    """One checked line, as it will be written."""

    line: int
    kind: str  # "memory" or "document"
    file_id: str
    content: str
    digest: str
    created_at: datetime | None
    updated_at: datetime | None
    created_by: Mapping[str, Any] | None
    updated_by: Mapping[str, Any] | None
    category: str | None = None
    status: str = "live"
    version: int = 1
    supersedes: str | None = None
    position: dict[str, int | float] = field(default_factory=dict)  # column -> value, as POSITION
    document: str | None = None
    forgotten_at: datetime | None = None
    expires_at: datetime | None = None
    title: str = ""
    doc_type: str = "text"
    source: str | None = None
    summary: str = ""
    file_name: str | None = None


def _timestamp(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(name, "must be an ISO 8601 timestamp")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(name, "must be an ISO 8601 timestamp") from None
    if parsed.tzinfo is None:
        raise ValidationError(name, "must name its time zone (e.g. +00:00)")
    return parsed


def _person_field(value: object, name: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("name", ""), str):
        raise ValidationError(name, "must be an object with name and email, or null")
    return value


def _identifier(value: object, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 100:
        raise ValidationError(name, "must be a non-empty string of at most 100 characters")
    return value


def _position(raw: Mapping[str, Any]) -> dict[str, int | float]:
    found: dict[str, int | float] = {}
    for column, name, kind in POSITION:
        value = raw.get(name)
        if value is None:
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not (whole or (kind is float and isinstance(value, float))) or value < 0:
            unit = "a whole number" if kind is int else "a number of seconds"
            raise ValidationError(name, f"must be {unit} >= 0, or null")
        found[column] = value
    return found


def _entry(number: int, raw: object) -> Entry:
    if not isinstance(raw, Mapping):
        raise ValidationError("line", "must be a JSON object")
    kind = raw.get("type")
    common: dict[str, Any] = {
        "line": number,
        "kind": kind,
        "file_id": _identifier(raw.get("id"), "id"),
        "created_at": _timestamp(raw.get("createdAt"), "createdAt"),
        "updated_at": _timestamp(raw.get("updatedAt"), "updatedAt"),
        "created_by": _person_field(raw.get("createdBy"), "createdBy"),
        "updated_by": _person_field(raw.get("updatedBy"), "updatedBy"),
    }
    if kind == "memory":
        content, category = checked_content(raw.get("content"), raw.get("category"))  # type: ignore[arg-type]
        status = raw.get("status", "live")
        if status not in STATUSES:
            raise ValidationError("status", f"must be one of {', '.join(STATUSES)}")
        version = raw.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValidationError("version", "must be an integer >= 1")
        supersedes = raw.get("supersedes")
        document = raw.get("document")
        title = str(raw.get("documentTitle") or "")
        refuse_secrets(documentTitle=title)
        return Entry(
            **common,
            content=content,
            digest=content_hash(content),
            category=category,
            status=status,
            version=version,
            supersedes=None if supersedes is None else _identifier(supersedes, "supersedes"),
            document=None if document is None else _identifier(document, "document"),
            forgotten_at=_timestamp(raw.get("forgottenAt"), "forgottenAt"),
            expires_at=_timestamp(raw.get("expiresAt"), "expiresAt"),
            title=title,
            position=_position(raw),
        )
    if kind == "document":
        body = validation.text_field(raw.get("content", ""), "content", MAX_DOCUMENT)
        title = validation.non_empty(raw.get("title", ""), "title", MAX_TITLE)
        source = raw.get("source")
        category = validation.category(raw.get("category"))
        summary = validation.text_field(raw.get("summary") or "", "summary", MAX_DOCUMENT)
        name = validation.optional_text(raw.get("fileName"), "fileName", 255)
        # A document line is shown again (getDocument, listDocuments) like a memory: same check.
        refuse_secrets(title=title, category=category, fileName=name, summary=summary, content=body)
        return Entry(
            **common,
            content=body,
            digest=content_hash(body),
            title=title,
            doc_type=validation.non_empty(raw.get("docType") or "text", "docType", 64),
            source=source if source in ("text", "file") else "text",
            category=category,
            summary=summary,
            file_name=name,
            forgotten_at=_timestamp(raw.get("updatedAt"), "updatedAt") if raw.get("forgotten") else None,
        )
    raise ValidationError("type", "must be 'memory' or 'document'")


def check_lines(lines: Iterable[str]) -> tuple[list[Entry], list[Problem]]:
    """Every line checked, none written: the entries that can be imported and the problems of the rest.

    Blank lines are ignored. Links are checked against earlier lines: a memory may supersede only a
    memory above it, and at most one live memory may supersede the same one.
    """
    entries: list[Entry] = []
    problems: list[Problem] = []
    seen: dict[str, Entry] = {}
    live_successor: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            problems.append(Problem(number, f"not valid JSON ({getattr(exc, 'msg', 'too deeply nested')})"))
            continue
        try:
            entry = _entry(number, raw)
        except SecretRefused as exc:
            problems.append(Problem(number, f"{exc.field}: looks like {exc.label}; not imported"))
            continue
        except ValidationError as exc:
            problems.append(Problem(number, str(exc)))
            continue
        key = f"{entry.kind}:{entry.file_id}"
        if key in seen:
            problems.append(Problem(number, f"id: repeats the {entry.kind} of line {seen[key].line}"))
            continue
        if entry.supersedes is not None and f"memory:{entry.supersedes}" not in seen:
            entry.supersedes = None  # its earlier version is not in the file (no --history)
        if entry.status == "live" and entry.supersedes is not None:
            first = live_successor.setdefault(entry.supersedes, number)
            if first != number:
                problems.append(Problem(number, f"supersedes: line {first} is already the live successor"))
                continue
        if entry.document is not None and f"document:{entry.document}" not in seen:
            entry.document = None  # its document was not exported (no --history): a memory of its own
        seen[key] = entry
        entries.append(entry)
    return entries, problems


# --- import: writing ----------------------------------------------------------------------------


@dataclass
class ImportReport:
    imported: int = 0
    documents: int = 0
    already: int = 0  # there from an earlier run (or a live duplicate): not added again
    skipped: list[Problem] = field(default_factory=list)
    unattributed: int = 0  # lines whose people are not users of this database

    def as_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "documents": self.documents,
            "already": self.already,
            "skipped": [str(p) for p in self.skipped],
            "unattributed": self.unattributed,
        }


Embed = Callable[[list[str]], Awaitable[list[list[float]]]]
# The static model's vectors (search's third signal): cheap and local, so a plain call.
StaticEmbed = Callable[[list[str]], list[list[float]]]


@dataclass(frozen=True)
class _Batch:
    """New entries of one batch with their vectors (None: the embedder gave none), ready to write."""

    entries: list[Entry]
    vectors: list[list[float] | None]
    statics: list[list[float] | None]


class _Importer:
    def __init__(
        self,
        db: Database,
        space_id: uuid.UUID,
        embed: Embed | None,
        report: ImportReport,
        static: StaticEmbed | None = None,
    ) -> None:
        self.db, self.space_id, self.embed, self.report = db, space_id, embed, report
        self.static = static
        self.live_hashes: dict[str, uuid.UUID] = {}  # live texts this import adds -> their memory
        self.ids: dict[str, uuid.UUID] = {}  # "kind:file id" -> id in this space
        self.users: dict[str, uuid.UUID] = {}  # email or name -> user id
        self.cols: set[str] = set()

    async def prepare(self, entries: Sequence[Entry]) -> None:
        people = [p for e in entries for p in (e.created_by, e.updated_by) if p]
        emails = sorted({str(p.get("email")) for p in people if p.get("email")})
        names = sorted({str(p.get("name")) for p in people if p.get("name")})
        async with self.db.transaction() as conn:
            self.cols = await _columns(conn)
            for r in await conn.execute(
                text("SELECT id, name, email FROM users WHERE email = ANY(:e) OR name = ANY(:n)"),
                {"e": emails, "n": names},
            ):
                self.users[f"email:{r.email}"] = r.id
                self.users[f"name:{r.name}"] = r.id

    def user(self, person: Mapping[str, Any] | None) -> uuid.UUID | None:
        if not person:
            return None
        return self.users.get(f"email:{person.get('email')}") or self.users.get(f"name:{person.get('name')}")

    async def documents(self, entries: Sequence[Entry]) -> None:
        optional = [
            c for c in ("source", "category", "file_name", "forgotten_at") if f"documents.{c}" in self.cols
        ]
        columns = "".join(f", {c}" for c in optional)
        values = "".join(f", :{c}" for c in optional)
        insert = text(
            "INSERT INTO documents (id, space_id, title, doc_type, status, content, summary, size_bytes, "
            f"content_hash, created_by_user_id, updated_by_user_id, created_at, updated_at{columns}) "
            "VALUES (:id, :s, :title, :t, 'done', :c, :sum, :size, :h, :cu, :uu, "
            f"COALESCE(CAST(:at AS timestamptz), now()), COALESCE(CAST(:up AS timestamptz), now()){values})"
        )
        async with self.db.transaction([self.space_id]) as conn:
            for e in entries:
                found = (
                    await conn.execute(
                        text(
                            "SELECT id FROM documents WHERE space_id = :s AND content_hash = :h "
                            "AND created_at = COALESCE(CAST(:at AS timestamptz), created_at)"
                        ),
                        {"s": self.space_id, "h": e.digest, "at": e.created_at},
                    )
                ).scalar()
                if found is not None:
                    self.ids[f"document:{e.file_id}"] = found
                    self.report.already += 1
                    continue
                new_id = uuid.uuid4()
                await conn.execute(
                    insert,
                    {
                        "id": new_id,
                        "s": self.space_id,
                        "title": e.title,
                        "t": e.doc_type,
                        "c": e.content,
                        "sum": e.summary,
                        "size": len(e.content.encode()),
                        "h": e.digest,
                        "cu": self.user(e.created_by),
                        "uu": self.user(e.updated_by) or self.user(e.created_by),
                        "at": e.created_at,
                        "up": e.updated_at or e.created_at,
                        "source": e.source,
                        "category": e.category,
                        "file_name": e.file_name,
                        "forgotten_at": e.forgotten_at,
                    },
                )
                self.ids[f"document:{e.file_id}"] = new_id
                self.report.documents += 1

    async def _existing(self, conn: AsyncConnection, batch: Sequence[Entry]) -> dict[str, uuid.UUID]:
        """For entries already in the space: file id -> its memory (same text and creation time, or
        the live memory with this text when the entry is live)."""
        rows = (
            await conn.execute(
                text(
                    "SELECT id, content_hash, created_at, is_latest AND forgotten_at IS NULL AS live "
                    "FROM memories WHERE space_id = :s AND content_hash = ANY(:h)"
                ),
                {"s": self.space_id, "h": list({e.digest for e in batch})},
            )
        ).all()
        found: dict[str, uuid.UUID] = {}
        for e in batch:
            same = next(
                (r.id for r in rows if r.content_hash == e.digest and r.created_at == e.created_at), None
            )
            if same is None and e.status == "live":
                same = next((r.id for r in rows if r.content_hash == e.digest and r.live), None)
            if same is not None:
                found[e.file_id] = same
        return found

    async def prepare_memories(self, batch: Sequence[Entry]) -> _Batch | None:
        """What of ``batch`` is new, with its vectors: the part of a batch that can run while the
        previous batch is being written (see :func:`import_entries`)."""
        async with self.db.transaction([self.space_id]) as conn:
            existing = await self._existing(conn, batch)
        todo: list[Entry] = []
        for e in batch:
            if e.file_id in existing:
                self.ids[f"memory:{e.file_id}"] = existing[e.file_id]
                self.report.already += 1
            elif e.status == "live" and e.digest in self.live_hashes:
                # The same text twice in this import: a duplicate, as a save sees it. The earlier
                # one may still be on its way in, so the database would not show it yet.
                self.ids[f"memory:{e.file_id}"] = self.live_hashes[e.digest]
                self.report.already += 1
            else:
                todo.append(e)
                mem_id = uuid.uuid4()
                self.ids[f"memory:{e.file_id}"] = mem_id
                if e.status == "live":
                    self.live_hashes[e.digest] = mem_id
        if not todo:
            return None
        vectors: list[list[float] | None] = [None] * len(todo)
        if self.embed is not None:
            vectors = list(await self.embed([e.content for e in todo]))
        statics: list[list[float] | None] = [None] * len(todo)
        if self.static is not None and "memories.static_embedding" in self.cols:
            statics = list(await asyncio.to_thread(self.static, [e.content for e in todo]))
        return _Batch(todo, vectors, statics)

    async def write_memories(self, batch: _Batch) -> None:
        """Write a prepared batch (its documents and memories) in one transaction."""
        todo, vectors, statics = batch.entries, batch.vectors, batch.statics
        static_column = "memories.static_embedding" in self.cols and any(v is not None for v in statics)
        review = "memories.review" in self.cols
        position = [column for column, _, _ in POSITION if f"memories.{column}" in self.cols]
        if "memories.expires_at" in self.cols:
            position.append("expires_at")  # written as given, like a position
        async with self.db.transaction([self.space_id]) as conn:
            await self._check_quota(conn, sum(e.status == "live" for e in todo))
            docs, mems = [], []
            for e, vector, static in zip(todo, vectors, statics, strict=True):
                mem_id = self.ids[f"memory:{e.file_id}"]
                doc_id = self.ids.get(f"document:{e.document}") if e.document else None
                author = self.user(e.created_by)
                editor = self.user(e.updated_by) or author
                if author is None and e.created_by:
                    self.report.unattributed += 1
                if doc_id is None:
                    doc_id = uuid.uuid4()
                    docs.append(
                        {
                            "id": doc_id,
                            "s": self.space_id,
                            "title": _title_of(e.content),
                            "c": e.content,
                            "sum": e.content[:280],
                            "size": len(e.content.encode()),
                            "h": e.digest,
                            "cu": author,
                            "uu": editor,
                            "at": e.created_at,
                            "up": e.updated_at or e.created_at,
                        }
                    )
                sup = self.ids.get(f"memory:{e.supersedes}") if e.supersedes else None
                mems.append(
                    {
                        "id": mem_id,
                        "s": self.space_id,
                        "d": doc_id,
                        "c": e.content,
                        "h": e.digest,
                        "cat": e.category,
                        "v": e.version,
                        "sup": sup,
                        # A forgotten memory stays the latest version of its fact.
                        "latest": e.status in ("live", "forgotten"),
                        "fa": e.forgotten_at if e.status == "forgotten" else None,
                        "e": HalfVector(vector) if vector is not None else None,
                        "se": HalfVector(static) if static is not None else None,
                        "cu": author,
                        "uu": editor,
                        "at": e.created_at,
                        "up": e.updated_at or e.created_at,
                        "r": e.status if e.status in ("proposed", "rejected") else None,
                        **{column: e.position.get(column) for column in position},
                        **({"expires_at": e.expires_at} if "expires_at" in position else {}),
                        **dates.columns(e.content, e.created_at.date() if e.created_at else None),
                    }
                )
            if docs:
                await conn.execute(
                    text(
                        "INSERT INTO documents (id, space_id, title, doc_type, status, content, summary, size_bytes, "
                        "content_hash, created_by_user_id, updated_by_user_id, created_at, updated_at) VALUES "
                        "(:id, :s, :title, 'text', 'done', :c, :sum, :size, :h, :cu, :uu, "
                        "COALESCE(CAST(:at AS timestamptz), now()), COALESCE(CAST(:up AS timestamptz), now()))"
                    ),
                    docs,
                )
            await conn.execute(
                text(
                    "INSERT INTO memories (id, space_id, document_id, content, content_hash, category, version, "
                    "supersedes_id, is_latest, forgotten_at, embedding, created_by_user_id, updated_by_user_id, "
                    f"happened_from, happened_to, created_at, updated_at{', review' if review else ''}{''.join(', ' + c for c in position)}"
                    f"{', static_embedding' if static_column else ''}) "
                    "VALUES (:id, :s, :d, :c, :h, :cat, :v, :sup, :latest, CAST(:fa AS timestamptz), "
                    "CAST(:e AS halfvec), :cu, :uu, :hf, :ht, COALESCE(CAST(:at AS timestamptz), now()), "
                    "COALESCE(CAST(:up AS timestamptz), now())"
                    f"{', :r' if review else ''}{''.join(', :' + c for c in position)}"
                    f"{', CAST(:se AS halfvec)' if static_column else ''})"
                ),
                mems,
            )
        self.report.imported += len(todo)

    async def _check_quota(self, conn: AsyncConnection, adding: int) -> None:
        # The space row is locked before the count (see `memories.take_turn`), so an import and a
        # save or a finishing document cannot both take the last places.
        await take_turn(conn, self.space_id)
        row = (
            await conn.execute(
                text(
                    "SELECT s.key, s.max_memories, (SELECT count(*) FROM memories m WHERE m.space_id = s.id "
                    "AND m.is_latest AND m.forgotten_at IS NULL) AS live FROM spaces s WHERE s.id = :s"
                ),
                {"s": self.space_id},
            )
        ).one()
        if row.max_memories is not None and row.live + adding > row.max_memories:
            raise QuotaExceeded(
                f"space '{row.key}' holds {row.live} of its quota of {row.max_memories} memories; "
                f"this import would add {adding} more"
            )


def _title_of(content: str) -> str:
    first = content.strip().splitlines()[0]
    return first if len(first) <= 80 else first[:77].rstrip() + "..."


async def import_entries(
    db: Database,
    space_id: uuid.UUID,
    space_key: str,
    entries: Sequence[Entry],
    embed: Embed | None,
    *,
    actor: str = "cli",
    batch_size: int = IMPORT_BATCH,
    progress: Callable[[int], None] = lambda n: None,
    report: ImportReport | None = None,
    static: StaticEmbed | None = None,
) -> ImportReport:
    """Write checked entries into the space: documents first, then memories in batches (embedded
    together with ``embed``, and given their static vectors by ``static``); entries already there
    are recognised and not added again."""
    report = report or ImportReport()
    try:
        await _write_entries(db, space_id, entries, embed, batch_size, progress, report, static)
    except IntegrityError:
        # Another import wrote the same records between this one's look for them and its write:
        # the unique indexes kept one copy, and the batch that met them was rolled back whole.
        raise Conflict(
            f"another import into space '{space_key}' wrote the same memories or documents at the same "
            "time; nothing was stored twice. Run this import again once the other one is done: it adds "
            "only what is still missing"
        ) from None
    async with db.transaction() as conn:
        await record(
            conn,
            actor,
            "space.imported",
            "space",
            space_key,
            space_id=space_id,
            details={k: v for k, v in report.as_dict().items() if k != "skipped"}
            | {"skipped": len(report.skipped)},
        )
    return report


async def _write_entries(
    db: Database,
    space_id: uuid.UUID,
    entries: Sequence[Entry],
    embed: Embed | None,
    batch_size: int,
    progress: Callable[[int], None],
    report: ImportReport,
    static: StaticEmbed | None,
) -> None:
    importer = _Importer(db, space_id, embed, report, static)
    await importer.prepare(entries)
    await importer.documents([e for e in entries if e.kind == "document"])
    memories = [e for e in entries if e.kind == "memory"]
    # A pipeline of two: batch k+1 is looked up and embedded while batch k is written, so the
    # model does not wait for PostgreSQL (writes run one at a time, in order, so quotas and links
    # see every earlier batch).
    writing: asyncio.Task[None] | None = None
    in_flight = 0
    try:
        for start in range(0, len(memories), batch_size):
            batch = memories[start : start + batch_size]
            prepared = await importer.prepare_memories(batch)
            if writing is not None:
                await writing
                writing = None
                progress(in_flight)
            if prepared is not None:
                writing = asyncio.create_task(importer.write_memories(prepared))
                in_flight = len(batch)
            else:
                progress(len(batch))
        if writing is not None:
            await writing
            progress(in_flight)
    finally:
        if writing is not None and not writing.done():
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writing
