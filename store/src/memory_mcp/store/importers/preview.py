"""``--dry-run``: what an import would add to a space, read from the space and written nowhere.

An entry counts as there already by the rules the import itself applies
(:mod:`..transfer`): a document with the same text and creation time; a memory with the same text
and creation time, or, for a live memory, any live memory with the same text (a save would return
that one too), including one earlier in the same input.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import text

from ..db import Database
from ..transfer import Entry


@dataclass
class Preview:
    documents: list[tuple[Entry, int]] = field(default_factory=list)  # new, with their new memories
    memories: list[Entry] = field(default_factory=list)  # new memories of no document, or of one there
    already: int = 0

    @property
    def memory_count(self) -> int:
        return len(self.memories) + sum(n for _, n in self.documents)


async def preview(db: Database, space_id: uuid.UUID, entries: Sequence[Entry]) -> Preview:
    hashes = list({e.digest for e in entries})
    async with db.transaction([space_id]) as conn:
        docs = (
            await conn.execute(
                text(
                    "SELECT content_hash, created_at FROM documents WHERE space_id = :s AND content_hash = ANY(:h)"
                ),
                {"s": space_id, "h": hashes},
            )
        ).all()
        mems = (
            await conn.execute(
                text(
                    "SELECT content_hash, created_at, is_latest AND forgotten_at IS NULL AS live "
                    "FROM memories WHERE space_id = :s AND content_hash = ANY(:h)"
                ),
                {"s": space_id, "h": hashes},
            )
        ).all()
    doc_times = {(r.content_hash, r.created_at) for r in docs}
    doc_hashes = {r.content_hash for r in docs}
    mem_times = {(r.content_hash, r.created_at) for r in mems}
    live = {r.content_hash for r in mems if r.live}
    result = Preview()
    new_documents: dict[str, int] = {}
    for e in entries:
        if e.kind == "document":
            there = (e.digest, e.created_at) in doc_times or (e.created_at is None and e.digest in doc_hashes)
            if there:
                result.already += 1
            else:
                new_documents[e.file_id] = len(result.documents)
                result.documents.append((e, 0))
            continue
        if (e.digest, e.created_at) in mem_times or (e.status == "live" and e.digest in live):
            result.already += 1
            continue
        if e.status == "live":
            live.add(e.digest)
        index = new_documents.get(e.document or "")
        if index is None:
            result.memories.append(e)
        else:
            document, count = result.documents[index]
            result.documents[index] = (document, count + 1)
    return result
