"""Hybrid recall inside one space: semantic (HNSW) + full text, fused by reciprocal rank, plus filters.

``keyword`` is a literal substring filter (trigram index: codes, partial words) and ``category`` an
exact tag filter; both restrict every mode. Only latest, unforgotten memories are searched.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import validation
from .db import Database
from .errors import ValidationError
from .memories import LIVE, MEMORY_SELECT, memory_from_row, vector_literal
from .models import Memory, SpaceContext

# Words that carry no meaning for full-text ranking in English, German and Italian questions. The
# 'simple' configuration keeps every word (no stemming, so all languages behave alike), so without
# this list "what is the ..." would match half the space.
STOPWORDS = frozenset(
    ["a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "from", "by", "with", "about", "as", "is", "are", "was", "were", "be", "been", "being", "do", "does", "did", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "that", "this", "these", "those", "it", "its", "i", "you", "he", "she", "we", "they", "me", "my", "your", "our", "their", "his", "her", "them", "us", "there", "here", "have", "has", "had", "not", "no", "can", "could", "should", "would", "will", "shall", "may", "might", "must", "any", "some", "all", "into", "than", "then", "so", "if", "but", "just", "also", "very", "too", "please", "tell", "know", "der", "die", "das", "ein", "eine", "einer", "eines", "einem", "einen", "und", "oder", "von", "zu", "im", "in", "am", "an", "auf", "für", "mit", "über", "ist", "sind", "war", "waren", "wird", "werden", "wer", "was", "wann", "wo", "warum", "wie", "welche", "welcher", "welches", "den", "dem", "des", "nicht", "kein", "keine", "es", "ich", "du", "er", "sie", "wir", "ihr", "mir", "mich", "uns", "euch", "sein", "seine", "ihre", "bei", "nach", "aus", "il", "lo", "la", "i", "gli", "le", "un", "uno", "una", "e", "o", "di", "da", "in", "con", "su", "per", "tra", "fra", "che", "chi", "cosa", "quando", "dove", "perché", "come", "quale", "quali", "è", "sono", "era", "erano", "del", "della", "dei", "delle", "degli", "al", "alla", "ai", "alle", "nel", "nella", "non", "mi", "ti", "ci", "si"]
)
_WORD_RE = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class SearchParams:
    """Tuning knobs; defaults chosen by the retrieval benchmark (docs/performance.md)."""

    ef_search: int = 100
    rrf_k: int = 60
    recency_weight: float = 0.002
    recency_half_life_days: float = 30.0
    candidates: int = 50


@dataclass(frozen=True)
class SearchHit:
    memory: Memory
    score: float
    modes: tuple[str, ...]  # which of semantic / fulltext / keyword / category matched
    similarity: float | None = None


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    modes: tuple[str, ...]
    fallback: str | None = None  # why a mode was skipped, e.g. the embedder being down


def fulltext_query(query: str) -> str | None:
    """An OR of the query's meaningful words as a tsquery string, or None if none remain."""
    words = []
    for word in _WORD_RE.findall(query.lower()):
        if word not in STOPWORDS and word not in words and len(word) > 1:
            words.append(word)
    if not words:
        return None
    return " | ".join("'" + w.replace("'", "''") + "'" for w in words[:32])


def like_pattern(keyword: str) -> str:
    escaped = keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def search_memories(
    db: Database,
    ctx: SpaceContext,
    query: str | None = None,
    keyword: str | None = None,
    category: str | None = None,
    query_embedding: Sequence[float] | None = None,
    limit: int = 10,
    params: SearchParams | None = None,
    fallback: str | None = None,
) -> SearchResult:
    """Rank the space's live memories for a question, a literal keyword and/or a category.

    Pass ``query_embedding`` for semantic recall; without it (the embedder being down) the query is
    answered by full text alone and ``fallback`` says why.
    """
    params = params or SearchParams()
    query = (query or "").strip() or None
    keyword = (keyword or "").strip() or None
    category = validation.category(category)
    if query is None and keyword is None and category is None:
        raise ValidationError("query", "give at least one of query, keyword or category")
    if query is not None and len(query) > 2000:
        raise ValidationError("query", "must be at most 2000 characters")
    if keyword is not None and len(keyword) > 200:
        raise ValidationError("keyword", "must be at most 200 characters")
    if not 1 <= limit <= validation.MAX_LIMIT:
        raise ValidationError("limit", f"must be an integer from 1 to {validation.MAX_LIMIT}")

    filters = [f"m.space_id = :s AND {LIVE}"]
    bind: dict[str, Any] = {"s": ctx.space.id, "k": params.candidates}
    filter_modes: list[str] = []
    if keyword is not None:
        filters.append("m.content ILIKE :kw")
        bind["kw"] = like_pattern(keyword)
        filter_modes.append("keyword")
    if category is not None:
        filters.append("m.category = :cat")
        bind["cat"] = category
        filter_modes.append("category")
    where = " AND ".join(filters)

    ranked: dict[str, list[tuple[uuid.UUID, float]]] = {}
    async with db.transaction([ctx.space.id]) as conn:
        if query is not None:
            if query_embedding is not None:
                ranked["semantic"] = await _semantic(conn, where, bind, query_embedding, params)
            tsq = fulltext_query(query)
            if tsq is not None:
                ranked["fulltext"] = await _fulltext(conn, where, bind, tsq)
        else:
            ranked["filter"] = await _filtered(conn, where, bind, keyword)
        hits = await _fuse(conn, ranked, filter_modes, limit, params)
    modes = tuple(m for m in ranked if m != "filter") + tuple(filter_modes)
    return SearchResult(hits=hits, modes=modes, fallback=fallback)


async def _semantic(
    conn: AsyncConnection, where: str, bind: dict[str, Any], embedding: Sequence[float], params: SearchParams
) -> list[tuple[uuid.UUID, float]]:
    # Iterative index scans keep filtered queries from starving: the HNSW scan continues until
    # enough rows pass the space/keyword/category filter instead of stopping at ef_search.
    await conn.execute(text(f"SET LOCAL hnsw.ef_search = {int(params.ef_search)}"))
    await conn.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
    rows = await conn.execute(
        text(
            "SELECT id, distance FROM ("
            "  SELECT m.id, m.embedding <=> CAST(:e AS halfvec) AS distance FROM memories m"
            f"  WHERE {where} AND m.embedding IS NOT NULL"
            "  ORDER BY m.embedding <=> CAST(:e AS halfvec) LIMIT :k"
            ") c ORDER BY distance"
        ),
        {**bind, "e": vector_literal(embedding)},
    )
    return [(r.id, 1.0 - float(r.distance)) for r in rows]


async def _fulltext(
    conn: AsyncConnection, where: str, bind: dict[str, Any], tsq: str
) -> list[tuple[uuid.UUID, float]]:
    rows = await conn.execute(
        text(
            "SELECT m.id, ts_rank_cd(m.tsv, q, 1) AS rank "
            "FROM memories m, to_tsquery('simple', :tsq) q "
            f"WHERE {where} AND m.tsv @@ q ORDER BY rank DESC, m.created_at DESC LIMIT :k"
        ),
        {**bind, "tsq": tsq},
    )
    return [(r.id, float(r.rank)) for r in rows]


async def _filtered(
    conn: AsyncConnection, where: str, bind: dict[str, Any], keyword: str | None
) -> list[tuple[uuid.UUID, float]]:
    """Keyword and/or category alone: closest literal matches first, then newest."""
    order = "m.created_at DESC"
    if keyword is not None:
        bind = {**bind, "kwraw": keyword}
        order = "word_similarity(:kwraw, m.content) DESC, m.created_at DESC"
    rows = await conn.execute(
        text(f"SELECT m.id FROM memories m WHERE {where} ORDER BY {order} LIMIT :k"), bind
    )
    return [(r.id, 0.0) for r in rows]


async def _fuse(
    conn: AsyncConnection,
    ranked: dict[str, list[tuple[uuid.UUID, float]]],
    filter_modes: list[str],
    limit: int,
    params: SearchParams,
) -> list[SearchHit]:
    scores: dict[uuid.UUID, float] = {}
    modes: dict[uuid.UUID, list[str]] = {}
    for mode, items in ranked.items():
        for rank, (memory_id, _) in enumerate(items, start=1):
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (params.rrf_k + rank)
            if mode != "filter":
                modes.setdefault(memory_id, []).append(mode)
    if not scores:
        return []
    similarity = dict(ranked.get("semantic", []))
    rows = await conn.execute(text(f"{MEMORY_SELECT} WHERE m.id = ANY(:ids)"), {"ids": list(scores)})
    memories = {r.id: memory_from_row(r) for r in rows}
    now = datetime.now(UTC)
    hits = []
    for memory_id, score in scores.items():
        memory = memories.get(memory_id)
        if memory is None:
            continue
        age_days = max((now - memory.created_at).total_seconds() / 86400.0, 0.0)
        recency = params.recency_weight * math.exp(-age_days * math.log(2) / params.recency_half_life_days)
        hits.append(
            SearchHit(
                memory=memory,
                score=round(score + recency, 6),
                modes=tuple(modes.get(memory_id, [])) + tuple(filter_modes),
                similarity=round(similarity[memory_id], 4) if memory_id in similarity else None,
            )
        )
    hits.sort(key=lambda h: (-h.score, -h.memory.created_at.timestamp()))
    return hits[:limit]


async def record_recalls(db: Database, counts: dict[tuple[uuid.UUID, uuid.UUID], int]) -> None:
    """Add recall counts ``{(space id, memory id): n}`` in one statement (feeds the stable profile).

    Callers batch these off the request path: updating the same hot rows inside every search
    transaction would serialize concurrent searches on row locks.
    """
    if not counts:
        return
    ordered = sorted(counts.items(), key=lambda item: item[0][1])  # one lock order: no deadlocks
    async with db.transaction({space for space, _ in counts}) as conn:
        await conn.execute(
            text(
                "UPDATE memories m SET recall_count = m.recall_count + c.n, last_recalled_at = now() "
                "FROM unnest(CAST(:ids AS uuid[]), CAST(:ns AS int[])) AS c(id, n) WHERE m.id = c.id"
            ),
            {"ids": [memory_id for (_, memory_id), _ in ordered], "ns": [n for _, n in ordered]},
        )
