"""One space's documents and memories as a graph: nodes, and the links between them, a page at a time.

A page holds up to ``limit`` memories (newest first, live and superseded; forgotten ones are left
out) and the documents they come from. Links: each memory to its document, each version to the
one it supersedes, and "related" links between memories of the page whose embeddings are close.
Related links are bounded per memory, so a page never carries more than ``limit * per_node`` of them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import text

from . import validation
from .db import Database
from .models import SpaceContext

# Cosine similarity above which two memories count as related. With the default MiniLM model,
# paraphrases of one fact score 0.7-0.9 and unrelated sentences of one topic 0.3-0.5.
RELATED_THRESHOLD = 0.6
RELATED_PER_NODE = 3  # at most this many related links leave one memory

EdgeKind = Literal["source", "version", "related"]


@dataclass(frozen=True)
class GraphDocument:
    id: uuid.UUID
    title: str
    doc_type: str
    status: str
    summary: str
    created_at: datetime


@dataclass(frozen=True)
class GraphMemory:
    id: uuid.UUID
    document_id: uuid.UUID
    content: str
    category: str | None
    version: int
    is_latest: bool
    supersedes_id: uuid.UUID | None
    created_at: datetime


@dataclass(frozen=True)
class GraphEdge:
    source: uuid.UUID
    target: uuid.UUID
    kind: EdgeKind
    weight: float = 1.0


@dataclass(frozen=True)
class Graph:
    space_key: str
    documents: list[GraphDocument]
    memories: list[GraphMemory]
    edges: list[GraphEdge]
    page: int
    limit: int
    total_memories: int

    @property
    def has_more(self) -> bool:
        return self.page * self.limit < self.total_memories


_MEMORIES = """
    SELECT m.id, m.document_id, m.content, m.category, m.version, m.is_latest, m.supersedes_id, m.created_at
    FROM memories m
    WHERE m.space_id = :s AND m.forgotten_at IS NULL
    ORDER BY m.created_at DESC, m.id
    LIMIT :l OFFSET :o
"""

# Documents of the page's memories; the first page also shows the documents still being read (an
# upload has no memories until it is done), so that a new upload is on the graph at once. A memory
# saved on its own is no document (documents.LISTED): it is drawn alone.
_DOCUMENTS = """
    (SELECT d.id, d.title, d.doc_type, d.status, d.summary, d.created_at
     FROM documents d WHERE d.space_id = :s AND d.id = ANY(:docs) AND d.source <> 'memory')
    UNION
    (SELECT d.id, d.title, d.doc_type, d.status, d.summary, d.created_at
     FROM documents d WHERE :first AND d.space_id = :s AND d.status <> 'done'
     ORDER BY d.created_at DESC LIMIT :dl)
    ORDER BY created_at DESC, id
"""

# For each memory of the page, its nearest neighbours among the page's memories above the threshold:
# every pair of the page compared directly, never through the HNSW index (which a filter on ids
# would make walk the whole space). The distances are materialized as bare numbers before they are
# ranked: ranking rows that still carried both vectors spilled to disk (200 memories: 720 ms, now 30).
_RELATED = """
    WITH page AS MATERIALIZED (
        SELECT id, embedding FROM memories WHERE id = ANY(:ids) AND embedding IS NOT NULL
    ), close AS MATERIALIZED (
        SELECT a.id AS source, b.id AS target, a.embedding <=> b.embedding AS distance
        FROM page a JOIN page b ON a.id <> b.id
        WHERE a.embedding <=> b.embedding <= 1 - :t
    ), ranked AS (
        SELECT source, target, distance,
               row_number() OVER (PARTITION BY source ORDER BY distance, target) AS rank
        FROM close
    )
    SELECT source, target, 1 - distance AS similarity FROM ranked WHERE rank <= :k
"""


async def space_graph(
    db: Database,
    ctx: SpaceContext,
    page: int = 1,
    limit: int = validation.DEFAULT_GRAPH_LIMIT,
    threshold: float = RELATED_THRESHOLD,
    per_node: int = RELATED_PER_NODE,
) -> Graph:
    """One page of the space's graph (see the module docstring)."""
    page, limit = validation.page_number(page), validation.graph_limit(limit)
    space = ctx.space.id
    async with db.transaction([space]) as conn:
        total = (
            await conn.execute(
                text("SELECT count(*) FROM memories WHERE space_id = :s AND forgotten_at IS NULL"),
                {"s": space},
            )
        ).scalar_one()
        rows = await conn.execute(text(_MEMORIES), {"s": space, "l": limit, "o": (page - 1) * limit})
        memories = [GraphMemory(*row) for row in rows]
        ids = [m.id for m in memories]
        doc_ids = list({m.document_id for m in memories})
        doc_rows = await conn.execute(
            text(_DOCUMENTS), {"s": space, "docs": doc_ids, "first": page == 1, "dl": limit}
        )
        documents = [GraphDocument(*row) for row in doc_rows]
        related_pairs: list[tuple[uuid.UUID, uuid.UUID, float]] = []
        if ids:
            rows = await conn.execute(text(_RELATED), {"ids": ids, "k": per_node, "t": threshold})
            related_pairs = [(r.source, r.target, float(r.similarity)) for r in rows]
    return Graph(
        space_key=ctx.space.key,
        documents=documents,
        memories=memories,
        edges=_edges(memories, related_pairs, {d.id for d in documents}),
        page=page,
        limit=limit,
        total_memories=int(total),
    )


def _edges(
    memories: list[GraphMemory],
    related: list[tuple[uuid.UUID, uuid.UUID, float]],
    drawn_documents: set[uuid.UUID],
) -> list[GraphEdge]:
    on_page = {m.id for m in memories}
    edges = [GraphEdge(m.id, m.document_id, "source") for m in memories if m.document_id in drawn_documents]
    edges += [
        GraphEdge(m.supersedes_id, m.id, "version")
        for m in memories
        if m.supersedes_id is not None and m.supersedes_id in on_page
    ]
    # A pair related both ways is one link; a version pair is linked as a version already.
    linked = {frozenset((e.source, e.target)) for e in edges if e.kind == "version"}
    for source, target, similarity in related:
        pair = frozenset((source, target))
        if pair not in linked:
            linked.add(pair)
            edges.append(GraphEdge(source, target, "related", round(similarity, 3)))
    return edges
