"""What every format's parser shares: the records it makes and the pieces it leaves out.

A parser turns another tool's export into the :class:`~..transfer.Entry` records that
:func:`~..transfer.import_entries` writes, so every format meets in one entry point (batched
embedding, recognising an earlier run, quotas, the audit event). Nothing here touches the database.

Every text is checked as a save checks it before it becomes a record: a part that looks like it
holds a credential is left out whole (of its document too), and the report names the part and the
kind of secret, never the value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from .. import validation
from ..chunking import chunk
from ..errors import SecretRefused, ValidationError
from ..extractors import Section
from ..memories import checked_content, content_hash
from ..secrets import find_secret
from ..summary import summarize, title_for
from ..transfer import Entry, Problem
from .budget import RECORD_BYTES, Cost, Meter

# A user's turn of fewer words than this ("thanks", "go on", "yes please") says nothing worth
# recalling: it stays in its conversation's document but makes no memory.
MIN_STATEMENT_WORDS = 3
SEPARATOR = "\n\n"  # between the parts of a document, as between the sections of an upload


@dataclass(frozen=True)
class Skipped(Problem):
    """A part of the input that was not imported: where it is (in the input's own terms) and why."""

    where: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else super().__str__()


@dataclass(frozen=True)
class Part:
    """A stretch of a document: a turn of a conversation, an observation, a note's body.

    ``memories``: its text is cut into memories (else it is only read as part of the document).
    ``heading``: a line shown above it in the document (the speaker of a turn).
    """

    text: str
    where: str
    memories: bool = True
    heading: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    category: str | None = None
    min_words: int = 0


@dataclass
class Parsed:
    """A parser's result: the records to write, what was left out, and what reading cost."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    cost: Cost | None = None


class Builder:
    """Collects one import's records; every format's parser writes through it. What the records
    hold is counted against the import's budget as each is made."""

    def __init__(self, source: str, author: Mapping[str, Any] | None, meter: Meter | None = None) -> None:
        self.source = source
        self.author = author
        self.meter = meter or Meter()
        self.parsed = Parsed()
        self.short = 0  # user turns too short to be memories
        self._ids: set[str] = set()

    # --- what was left out ----------------------------------------------------------------------

    def skip(self, where: str, message: str) -> None:
        # Names in ``where`` are quoted with :func:`quoted`; this catches what reaches it otherwise
        # (an id, a file name): a report never carries the credential it refused.
        if (found := find_secret(where)) is not None:
            where = f"an item whose name looks like {found.label} (name withheld)"
        self.parsed.skipped.append(Skipped(len(self.parsed.skipped) + 1, message, where))
        self.meter.hold(RECORD_BYTES + len(where) + len(message))

    def has_secret(self, where: str, value: str | None) -> bool:
        """Whether ``value`` looks like it holds a credential; if so the skip is recorded."""
        found = find_secret(value) if value else None
        if found is not None:
            self.skip(where, f"looks like {found.label}; not imported")
        return found is not None

    def finish(self) -> Parsed:
        if self.short:
            self.skip(
                self.source,
                f"{self.short} turn(s) of fewer than {MIN_STATEMENT_WORDS} words kept in their "
                "conversations only, not as memories",
            )
        self.parsed.cost = self.meter.cost()
        return self.parsed

    # --- records --------------------------------------------------------------------------------

    def _file_id(self, *parts: str) -> str:
        raw = ":".join(parts)
        # Ids are the input's own where they are short enough, else a digest of them; unique either way.
        file_id = raw if len(raw) <= 100 else hashlib.sha256(raw.encode()).hexdigest()
        while file_id in self._ids:
            file_id = hashlib.sha256(file_id.encode()).hexdigest()[:40]
        self._ids.add(file_id)
        return file_id

    def _entry(self, kind: str, file_id: str, content: str, **fields: Any) -> Entry:
        held = len(content) + len(fields.get("summary", "")) + len(fields.get("title") or "")
        self.meter.hold(RECORD_BYTES + held)
        return Entry(
            line=len(self.parsed.entries) + 1,
            kind=kind,
            file_id=file_id,
            content=content,
            digest=content_hash(content),
            created_by=self.author,
            updated_by=self.author,
            **fields,
        )

    def category(self, value: object, where: str) -> str | None:
        """A category as the store takes it, or None (the reason recorded) when it cannot be one."""
        if value is None or value == "":
            return None
        try:
            category = validation.category(str(value))
        except ValidationError as exc:
            self.skip(where, f"category left out: {exc.message}")
            return None
        return None if self.has_secret(f"{where} (category)", category) else category

    def memory(
        self,
        key: Sequence[str],
        content: str,
        where: str,
        *,
        category: str | None = None,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        version: int = 1,
    ) -> bool:
        """One memory of its own (no document); False when it was left out (the reason recorded)."""
        try:
            content, category = checked_content(content, category)
        except SecretRefused as exc:
            self.skip(where, f"looks like {exc.label}; not imported")
            return False
        except ValidationError as exc:
            self.skip(where, f"not imported: {exc}")
            return False
        self.parsed.entries.append(
            self._entry(
                "memory",
                self._file_id(self.source, *key),
                content,
                category=category,
                created_at=created_at,
                updated_at=updated_at,
                version=version,
            )
        )
        return True

    def document(
        self,
        key: Sequence[str],
        title: str | None,
        parts: Sequence[Part],
        where: str,
        *,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        category: str | None = None,
        file_name: str | None = None,
    ) -> None:
        """One document of ``parts``, and the memories cut from those parts that take them.

        A part holding a credential is left out of both; a document left with no text is not made.
        ``category`` and the parts' categories come from :meth:`category` (or are constants).
        Memories are the part's text cut as uploads are cut (paragraphs, then sentences, at most
        one memory's length), each pointing at its place in the document.
        """
        kept: list[tuple[Part, list[tuple[int, int, str]]]] = []
        refused = 0
        # Measured before any part is scanned for credentials: a document that cannot be stored costs
        # no scan of its text (100 MB of it once took half a minute).
        if sum(len(part.text) for part in parts) > validation.MAX_EXTRACTED_TEXT + len(SEPARATOR) * len(
            parts
        ):
            self.skip(where, f"not imported: its text is over {validation.MAX_EXTRACTED_TEXT:,} characters")
            return
        for part in parts:
            text = part.text.strip()
            if not text:
                continue
            if self.has_secret(part.where, text):
                refused += 1
                continue
            pieces: list[tuple[int, int, str]] = []
            if part.memories and len(text.split()) < part.min_words:
                self.short += 1
            elif part.memories:
                pieces = [(p.start, p.end, p.text) for p in chunk([Section(text)])[1]]
            kept.append((part, pieces))
        if not kept:
            if not refused:  # else the refusals already say why
                self.skip(where, "no text to import")
            return
        if title is not None and self.has_secret(f"{where} (title)", title):
            title = "Untitled"
        content, memories = self._layout(kept)
        try:
            content = validation.text_field(content, "content", validation.MAX_EXTRACTED_TEXT)
        except ValidationError as exc:
            self.skip(where, f"not imported: {exc}")
            return
        doc_id = self._file_id(self.source, *key)
        self.parsed.entries.append(
            self._entry(
                "document",
                doc_id,
                content,
                title=title_for(content, given=title, heading=None, file_name=file_name),
                doc_type="text",
                source="text",
                category=category,
                summary=summarize(content),
                file_name=file_name,
                created_at=created_at,
                updated_at=updated_at or created_at,
            )
        )
        for number, (part, start, end, text) in enumerate(memories, start=1):
            # Its part was checked for credentials whole (a piece is a stretch of it), and categories
            # come checked from :meth:`category`: only the piece's shape is left to check.
            try:
                text = validation.content(text)
            except ValidationError as exc:
                self.skip(part.where, f"piece {number} not imported: {exc}")
                continue
            self.parsed.entries.append(
                self._entry(
                    "memory",
                    self._file_id(doc_id, str(number)),
                    text,
                    category=part.category or category,
                    document=doc_id,
                    position={"char_start": start, "char_end": end},
                    created_at=part.created_at or created_at,
                    updated_at=part.updated_at or part.created_at or updated_at or created_at,
                    title=title or "",
                )
            )

    @staticmethod
    def _layout(
        kept: Sequence[tuple[Part, list[tuple[int, int, str]]]],
    ) -> tuple[str, list[tuple[Part, int, int, str]]]:
        """The document's text and each memory's place in it."""
        out: list[str] = []
        offset = 0
        memories: list[tuple[Part, int, int, str]] = []
        for part, pieces in kept:
            block = f"{part.heading}{SEPARATOR}" if part.heading else ""
            if out:
                offset += len(SEPARATOR)
            start = offset + len(block)
            text = part.text.strip()
            memories += [(part, start + s, start + e, piece) for s, e, piece in pieces]
            out.append(block + text)
            offset += len(block) + len(text)
        return SEPARATOR.join(out), memories


# --- values as the formats write them ---------------------------------------------------------------


def from_epoch(value: object) -> datetime | None:
    """Seconds since 1970 (ChatGPT's ``create_time``), or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def from_iso(value: object) -> datetime | None:
    """An ISO 8601 time (a date alone is midnight UTC; no zone means UTC), or None."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def short(value: str, limit: int = 60) -> str:
    """A title or name as a report quotes it: one line, at most ``limit`` characters."""
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 3] + "..."


def quoted(value: str, limit: int = 60) -> str:
    """A title or name as a report quotes it (``short``), or a stand-in when it holds a credential:
    checked whole, since a cut one may no longer look like what it still leaks most of."""
    found = find_secret(value) if value else None
    return f"[withheld: looks like {found.label}]" if found is not None else short(value, limit)
