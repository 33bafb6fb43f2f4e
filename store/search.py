"""Hybrid recall inside one space: semantic (HNSW) + full text, fused by reciprocal rank, plus filters.

``keyword`` is a literal substring filter (trigram index: codes, partial words) and ``category`` an
exact tag filter; both restrict every mode. Only latest, unforgotten memories are searched.

Every default below was chosen with ``python -m bench.retrieval`` (quality) and ``python -m
bench.scale`` (latency); docs/performance.md has the figures.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.rows import namedtuple_row
from sqlalchemy import text

from . import validation
from .db import Database, HalfVector
from .errors import ValidationError
from .memories import LIVE, MEMORY_SELECT, memory_from_row
from .models import Memory, SpaceContext

# Words that carry no meaning for full-text ranking in English, German and Italian questions. The
# 'simple' configuration keeps every word (no stemming, so all languages behave alike), so without
# this list "what is the ..." would match half the space.
_STOPWORDS_BY_LANGUAGE = {
    "en": """a an the and or of to in on at for from by with about as is are was were be been being do does
        did what which who whom whose when where why how that this these those it its i you he she we they
        me my your our their his her them us there here have has had not no can could should would will
        shall may might must any some all into than then so if but just also very too please tell know""",
    "de": """der die das ein eine einer eines einem einen und oder von zu im am an auf für mit über ist sind
        war waren wird werden wer was wann wo warum wie welche welcher welches den dem des nicht kein
        keine es ich du er sie wir ihr mir mich uns euch sein seine ihre bei nach aus""",
    "it": """il lo la i gli le un uno una e o di da con su per tra fra che chi cosa quando dove perché come
        quale quali è sono era erano del della dei delle degli al alla ai alle nel nella non mi ti ci si""",
}
STOPWORDS = sorted({word for words in _STOPWORDS_BY_LANGUAGE.values() for word in words.split()})
# The same list as an SQL constant: part of the statement, not a parameter dumped on every search
# (it was 3.5% of a search call's server CPU), and written compactly (see ``_search_sql``).
_STOPWORDS_SQL = "string_to_array('" + " ".join(STOPWORDS).replace("'", "''") + "', ' ')"
MAX_TERMS = 32


@dataclass(frozen=True)
class SearchParams:
    """Tuning knobs; defaults chosen by the retrieval benchmark (docs/performance.md)."""

    # HNSW candidate list per scan step: recall vs latency, measured by bench/scale.py.
    ef_search: int = 100
    # Reciprocal rank fusion constant. 60 is the usual value; 10 and 30 measured within one query
    # of it on recall@10, and a larger k keeps fused scores comparable for the newer-first rule.
    rrf_k: int = 60
    # Added to a just-saved memory's score, halving every ``recency_half_life_days``. Kept below the
    # gap between neighbouring ranks at the top (1/61 - 1/62 = 0.00026), so it breaks near-ties
    # towards newer memories but never outvotes relevance: at 0.002 (eight ranks' worth) recall@1
    # fell from 0.63 to 0.56, because when a memory was written says little about whether it answers.
    recency_weight: float = 0.0002
    recency_half_life_days: float = 30.0
    # How many candidates each mode contributes to the fusion.
    candidates: int = 50
    # A keyword or category filter passed by at most this many memories is searched exactly
    # (see _semantic); above it, the HNSW scan finds enough matches on its own.
    exact_below: int = 20000
    # Full text reads at most this many memories per query word before ranking (see _fulltext):
    # at 100k memories 1000 gave p50 27 ms, 200 gave 14 ms; recall on the retrieval benchmark was
    # the same even at 20, since the words that decide a ranking are the rare ones.
    rows_per_term: int = 200
    # Two results at least this similar to each other (cosine of their embeddings) are taken to be
    # about the same subject, and the newer one is put above the older one if its own score is
    # within ``newer_within`` of it: a correction outranks the fact it corrects even when it was
    # not saved as a new version. Auto-supersede cannot do this at save time (correction pairs and
    # unrelated look-alikes overlap in similarity); at query time both stay visible, only the order
    # changes, and the query has to rank both before the rule applies. Measured on the retrieval
    # benchmark (corrected first of the 40 correction queries / overall recall@1): within 0.85,
    # 32 / 0.630; 0.75, 33 / 0.620; 0.7, 34 / 0.620 (34 of the 35 that return either version);
    # 0.5, 34 / 0.587. Similarity 0.55 instead of 0.6 gave 36 but recall@1 0.603: look-alikes
    # that are not corrections move too.
    same_subject_similarity: float = 0.6
    newer_within: float = 0.7
    # Off only to measure semantic search on its own (bench/retrieval.py compares the modes).
    fulltext: bool = True


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


def like_pattern(keyword: str) -> str:
    """An ILIKE pattern matching ``keyword`` literally anywhere: ``%`` and ``_`` are not wildcards."""
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

    filters = [f"m.space_id = %(s)s AND {LIVE}"]
    bind: dict[str, Any] = {"s": ctx.space.id, "k": params.candidates}
    filter_modes: list[str] = []
    if keyword is not None:
        filters.append("m.content ILIKE %(kw)s")
        bind["kw"] = like_pattern(keyword)
        filter_modes.append("keyword")
    if category is not None:
        filters.append("m.category = %(cat)s")
        bind["cat"] = category
        filter_modes.append("category")
    if filter_modes:
        bind["exact_below"] = params.exact_below
    where = " AND ".join(filters)

    # The ranked lists this search fuses. Full text is also the fallback when there is no vector. A
    # keyword is a literal promise, so its matches are a list of their own even beside a question:
    # an approximate index scan may stop before a rare match, and a code rarely shares words with
    # the question around it. Like full text, that lexical list is left out when semantic search is
    # measured on its own.
    lists: list[str] = []
    if query is not None and query_embedding is not None:
        lists.append("semantic")
        bind["e"] = HalfVector(query_embedding)
    if query is not None and (params.fulltext or query_embedding is None):
        lists.append("fulltext")
        bind.update(q=query, max_terms=MAX_TERMS, per_term=params.rows_per_term)
    if query is None or (keyword is not None and params.fulltext):
        lists.append("filter")
        bind["kwraw"] = keyword

    # Iterative index scans keep filtered queries from starving: the HNSW scan continues until
    # enough rows pass the space/keyword/category filter instead of stopping at ef_search.
    hnsw = {"hnsw.ef_search": str(int(params.ef_search)), "hnsw.iterative_scan": "relaxed_order"}
    newer_first = query is not None and params.same_subject_similarity < 1.0
    bind.update(
        rrf_k=params.rrf_k,
        recency=params.recency_weight,
        decay=math.log(2) / params.recency_half_life_days,
        # Candidates beyond the limit come back too: a newer same-subject memory ranked below it
        # may still be moved above the older one it corrects.
        top=3 * limit,
    )
    if newer_first:
        bind.update(within=params.newer_within, distance=1.0 - params.same_subject_similarity)
    async with (
        db.driver_transaction([ctx.space.id], settings=hnsw) as pg,
        pg.cursor(row_factory=namedtuple_row) as cur,
    ):
        sql = _search_sql(tuple(lists), where, bool(filter_modes), keyword is not None, newer_first)
        await cur.execute(sql, bind)
        rows: list[Any] = await cur.fetchall()
    # Row i is candidate i: every candidate is a visible row of this statement's own snapshot.
    pairs = [(row.i, newer) for row in rows for newer in row.newer or ()]
    hits = [
        SearchHit(
            memory=memory_from_row(row),
            score=round(row.score, 6),
            modes=tuple(row.modes or ()) + tuple(filter_modes),
            similarity=round(row.similarity, 4) if row.similarity is not None else None,
        )
        for row in (rows[i] for i in _newer_above_older(len(rows), pairs)[:limit])
    ]
    modes = tuple(m for m in lists if m != "filter") + tuple(filter_modes)
    return SearchResult(hits=hits, modes=modes, fallback=fallback)


def _semantic_sql(where: str, filtered: bool) -> str:
    """Nearest neighbours by cosine distance (at most ``k``), read through the HNSW index.

    The transaction enables relaxed-order iterative scans, which return rows slightly out of
    distance order; ``_LIST_SELECT`` numbers them by distance. A selective filter (a rare category,
    a keyword: at most ``exact_below`` rows pass it) is searched with exact distances instead: the
    HNSW scan would walk the whole neighbourhood of the query to find those rows and stop at its
    scan limits first (at 1M memories a 1% category kept 55% of the true top 10). ``+ 0`` keeps the
    planner from ordering that variant through the HNSW index anyway. The row count is an init
    plan, so only one of the two scans runs.
    """
    scan = (
        "SELECT m.id, m.created_at, m.embedding <=> CAST(%(e)s AS halfvec) AS distance FROM memories m "
        f"WHERE {where} AND m.embedding IS NOT NULL"
    )
    if not filtered:
        return f"semantic AS ({scan} ORDER BY m.embedding <=> CAST(%(e)s AS halfvec) LIMIT %(k)s)"
    few = (
        "(SELECT count(*) <= %(exact_below)s FROM "
        f"(SELECT 1 FROM memories m WHERE {where} LIMIT %(exact_below)s + 1) c)"
    )
    return (
        f"semantic AS (SELECT * FROM ({scan} AND {few} "
        "ORDER BY (m.embedding <=> CAST(%(e)s AS halfvec)) + 0 LIMIT %(k)s) exact "
        f"UNION ALL SELECT * FROM ({scan} AND NOT {few} "
        "ORDER BY m.embedding <=> CAST(%(e)s AS halfvec) LIMIT %(k)s) approximate)"
    )


def _fulltext_sql(where: str) -> str:
    """Memories sharing words with the query, by coverage: the share of the query's words they hold.

    The query is split by PostgreSQL's own parser (``to_tsvector('simple', ...)``), so it splits
    exactly like the stored text: "INC-61839" is 'inc' and '-61839' on both sides, which a
    regular-expression tokenizer gets wrong. Single characters and stopwords carry no signal; each
    remaining word becomes a quoted tsquery operand (quotes doubled, backslashes escaped).

    An OR of the words finds everything that shares one, which for a question is mostly noise
    ("need", "team"); ordering by coverage first puts a memory holding every word of a quoted code
    or phrase above one that shares a single common word, and the fusion weighs each match by its
    squared coverage (a memory holding 1 of 5 words counts 1/25 of a full match).

    Each word contributes at most ``per_term`` rows before ranking, so a common word in a
    million-memory space costs a bounded amount of work: rare words (codes, names) are always read
    in full, and a memory holding a rare word is found through it.
    """
    return (
        "terms AS MATERIALIZED ("
        "  SELECT CAST('''' || replace(replace(w.lexeme, '\\', '\\\\'), '''', '''''') || '''' AS tsquery) AS q"
        "  FROM unnest(to_tsvector('simple', %(q)s)) w"
        f"  WHERE length(w.lexeme) >= 2 AND w.lexeme <> ALL({_STOPWORDS_SQL})"
        "  ORDER BY w.positions[1] LIMIT %(max_terms)s"
        "), fulltext AS ("
        "  SELECT m.id, m.created_at, (SELECT count(*) FROM terms t WHERE m.tsv @@ t.q) AS matched,"
        "    ts_rank_cd(m.tsv, (SELECT CAST(string_agg(CAST(q AS text), ' | ') AS tsquery) FROM terms), 1) AS rank"
        "  FROM memories m WHERE m.id IN ("
        "    SELECT x.id FROM terms t CROSS JOIN LATERAL ("
        f"      SELECT m.id FROM memories m WHERE {where} AND m.tsv @@ t.q LIMIT %(per_term)s) x)"
        "  ORDER BY matched DESC, rank DESC, m.created_at DESC LIMIT %(k)s)"
    )


def _filter_sql(where: str, keyword: bool) -> str:
    """Keyword and/or category alone: closest literal matches first, then newest."""
    closeness = "word_similarity(%(kwraw)s, m.content)" if keyword else "0"
    return (
        f"filtered AS (SELECT m.id, m.created_at, {closeness} AS closeness FROM memories m WHERE {where} "
        "ORDER BY closeness DESC, m.created_at DESC LIMIT %(k)s)"
    )


# Each list's rows, numbered in rank order, tagged with the list's place among the lists (the order
# of ``modes``). ``value`` is the cosine distance of a semantic match and the number of query words
# a full-text match holds (out of ``terms``).
_LIST_SELECT = {
    "semantic": "SELECT 'semantic' AS list, 0 AS n, row_number() OVER (ORDER BY distance) AS ord, id, "
    "created_at, distance AS value, 0 AS terms FROM semantic",
    "fulltext": "SELECT 'fulltext' AS list, 1 AS n, "
    "row_number() OVER (ORDER BY matched DESC, rank DESC, created_at DESC) AS ord, id, created_at, "
    "CAST(matched AS float8) AS value, (SELECT count(*) FROM terms) AS terms FROM fulltext",
    "filter": "SELECT 'filter' AS list, 2 AS n, row_number() OVER (ORDER BY closeness DESC, created_at DESC) "
    "AS ord, id, created_at, 0 AS value, 0 AS terms FROM filtered",
}

# Weighted reciprocal rank fusion plus a small recency term. Each list adds weight / (rrf_k + rank):
# semantic and filter matches weigh 1, full-text matches their squared coverage (see
# ``_fulltext_sql``). Ranks rather than raw scores, because cosine similarity and text rank live on
# unrelated scales; the weight keeps a one-word overlap from counting as much as a quoted phrase.
# The recency term halves every ``recency_half_life_days`` (``decay`` is ln 2 / half-life).
_FUSE_SQL = (
    "fused AS ("
    "  SELECT id, max(created_at) AS created_at,"
    "    sum(CASE WHEN list = 'fulltext' THEN power(value / terms, 2) ELSE 1 END / (%(rrf_k)s + ord)) AS rrf,"
    "    max(1 - value) FILTER (WHERE list = 'semantic') AS similarity,"
    "    array_agg(list ORDER BY n) FILTER (WHERE list <> 'filter') AS modes"
    "  FROM ranked GROUP BY id"
    "), scored AS ("
    "  SELECT *, rrf + %(recency)s * exp(-greatest(extract(epoch FROM now() - created_at) / 86400, 0) * %(decay)s)"
    "    AS score FROM fused"
    "), top AS MATERIALIZED ("
    "  SELECT row_number() OVER (ORDER BY score DESC, created_at DESC) - 1 AS i, id, score, similarity, modes"
    "  FROM (SELECT * FROM scored ORDER BY score DESC, created_at DESC LIMIT %(top)s) best"
    ")"
)

# Same-subject pairs among the top candidates (see ``SearchParams.same_subject_similarity``): for
# each one, the positions of the newer candidates whose embedding is that close and whose score is
# within ``newer_within`` of its own. The candidates' rows are read once by primary key
# (MATERIALIZED, so the planner cannot turn the self-join into a walk over every later memory of
# the space); memories without a vector pair with nothing.
_PAIRS_SQL = (
    ", vectors AS MATERIALIZED ("
    "  SELECT t.i, t.score, m.created_at, m.embedding FROM top t JOIN memories m ON m.id = t.id"
    "  WHERE m.embedding IS NOT NULL)"
)
_NEWER_SQL = (
    "(SELECT array_agg(b.i) FROM vectors a JOIN vectors b ON b.created_at > a.created_at"
    "  WHERE a.i = t.i AND b.score >= %(within)s * a.score AND (a.embedding <=> b.embedding) <= %(distance)s)"
)


@functools.lru_cache(maxsize=64)
def _search_sql(lists: tuple[str, ...], where: str, filtered: bool, keyword: bool, newer_first: bool) -> str:
    """The whole ranking as one statement (one round trip): every ranked list, their fusion, the
    best ``top`` candidates as memory rows in fused order, and with ``newer_first`` each row's
    same-subject newer candidates, for ``_newer_above_older``.

    Built once per shape of search, with runs of spaces collapsed: the driver caches its parsing of
    a statement only up to 4096 characters (no literal in these statements holds two spaces).
    """
    ctes = {
        "semantic": lambda: _semantic_sql(where, filtered),
        "fulltext": lambda: _fulltext_sql(where),
        "filter": lambda: _filter_sql(where, keyword),
    }
    ranked = " UNION ALL ".join(_LIST_SELECT[name] for name in lists)
    return " ".join(
        f"WITH {', '.join(ctes[name]() for name in lists)}, ranked AS ({ranked}), {_FUSE_SQL}"
        f"{_PAIRS_SQL if newer_first else ''} "
        f"SELECT t.i, t.score, t.similarity, t.modes, {_NEWER_SQL if newer_first else 'NULL'} AS newer, r.* "
        f"FROM top t CROSS JOIN LATERAL ({MEMORY_SELECT} WHERE m.id = t.id) r ORDER BY t.i".split()
    )


def _newer_above_older(count: int, pairs: list[tuple[int, int]]) -> list[int]:
    """An order of ``count`` candidates in which each pair's newer one stands above its older one.

    Each move puts one memory directly above another; a bounded number of passes settles chains (a
    fact corrected twice) without looping on a cycle of near-ties.
    """
    order = list(range(count))
    position = list(range(count))  # position[i]: where candidate i stands now
    for _ in range(count if pairs else 0):
        for older, newer in pairs:
            if position[newer] > position[older]:
                break
        else:
            break
        above, below = position[older], position[newer]
        order.insert(above, order.pop(below))
        for place in range(above, below + 1):  # only the moved span changed places
            position[order[place]] = place
    return order


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
