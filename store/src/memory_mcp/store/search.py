"""Hybrid recall inside one space: semantic (HNSW) + full text + the static embedding, fused by score, plus filters.

``keyword`` is a literal substring filter (trigram index: codes, partial words) and ``category`` an
exact tag filter; both restrict every mode. Only live memories (latest, unforgotten, unexpired:
``memories.LIVE``) are searched. Every filter is part of each candidate statement's WHERE, so none
is applied after the top k are cut (tests/store/test_search_filters.py).

Every default below was chosen with ``python -m bench.retrieval`` (quality) and ``python -m
bench.scale`` (latency); docs/performance.md has the figures.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import text

from . import dates, validation
from . import intent as intents
from .db import Database, HalfVector, NativeStatement
from .errors import ValidationError
from .memories import LIVE, MEMORY_SELECT, MIN_SHORT_ID_LEN, SHORT_ID_LEN, memory_from_row
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
# Single letters are left out of it: the statement drops them by length first.
_STOPWORDS_SQL = (
    "string_to_array('" + " ".join(w for w in STOPWORDS if len(w) > 1).replace("'", "''") + "', ' ')"
)
MAX_TERMS = 32
# A search's statements run on PostgreSQL's generic plan, planned once per connection: no value is
# inlined into them, and the filtered semantic list picks its exact or approximate scan as it runs
# (``_semantic_sql``). Left to itself, PostgreSQL plans the first five runs of a prepared statement
# with their values and keeps the generic plan only when its estimate is no higher than theirs; in
# a space of 100,000 memories it never was (a parameter's LIMIT is estimated as a tenth of the
# table), so every search was planned again: 3 ms of PostgreSQL's time a search, of 16-17
# (``bench.search_cost``; docs/performance.md, "Recall v4, last round"). Those searches' generic
# plan has the same shape and gave the same results, scores and order for all 200 of the bench's
# questions. A shape that did go generic (a filter) now skips its five custom plans too.
_GENERIC_PLAN = {"plan_cache_mode": "force_generic_plan"}
# Words the soft word match skips in a memory, as the query's own words skip them: stopwords (a third
# of a conversation's words; LoCoMo dev measured the same with and without them). Single characters
# match nothing either (the word matcher's rule).
_NOT_MATCHED = frozenset(STOPWORDS)


# For each text (its words, separated by spaces), the full-text weight of the query's words (given
# with their weights) that it matches by word vectors, from a similarity of the given floor (nothing)
# to 1 (the word itself), its words in the given set matching nothing: the static model's
# ``soft_matches``, the soft word match of ``SearchParams.soft_weight``.
WordMatches = Callable[
    [Sequence[str], Sequence[float], Sequence[str], float, frozenset[str]], Sequence[float]
]


@dataclass(frozen=True)
class SearchParams:
    """Tuning knobs. Each default was measured on two benchmarks, the public LoCoMo conversations
    (``bench/locomo.py``, tuned on its five dev conversations only) and the generated team dataset
    (``bench/retrieval.py``); docs/performance.md has the figures."""

    # HNSW candidate list per scan step: recall vs latency, measured by bench/scale.py.
    ef_search: int = 100
    # How many candidates each ranked list (semantic, full text, keyword) contributes. Every
    # candidate then gets both scores, whichever list found it. LoCoMo dev hit@10 was the same at
    # 30, 50 and 100.
    candidates: int = 50
    # Score-aware fusion: cosine similarity plus ``lexical_weight`` times the share of the query's
    # full-text weight a memory holds (its coverage, 0-1). Ranks alone (reciprocal rank fusion)
    # throw away how far apart two results are: on LoCoMo dev plain RRF reached hit@10 0.668 at
    # k = 60 (0.736 at k = 10); this fusion 0.782. Relative to the best full-text score among the
    # candidates instead of the query's own weight, LoCoMo was the same (0.784) but the generated
    # benchmark lost 1.3 points: a weak lexical match then counts as much as a strong one. Weight
    # 0.6: LoCoMo 0.780, generated 0.810; the same candidates rescored at 0.4: 0.766 and 0.820,
    # at 0.7: 0.783 and 0.803.
    lexical_weight: float = 0.6
    # Full text scores a memory by the inverse document frequency of the query words it holds
    # (BM25 with term frequency 1 and no length normalisation: b = 0 measured best on LoCoMo dev,
    # 0.3 lost a point, 0.75 two). An alphabetic word longer than ``prefix_chars`` matches by its
    # first ``prefix_chars`` letters ("supported" finds "supportive"), a stemmer that needs no
    # language; words with digits (codes) match exactly. 5 measured best (4, 6, 7: within a point;
    # whole words: 1.5 points lower).
    prefix_chars: int = 5
    # Document frequencies are counted up to these caps, so a common word in a big space costs a
    # bounded amount of work: a word in more than ``df_cap`` memories gets the weight of one in
    # exactly that many, and a space is counted up to ``space_cap`` memories (below the caps the
    # weights are exact: every LoCoMo and generated space is). At 100k memories in one space the
    # counts dominated a search: caps of 100,000 and 2,000 gave hybrid p50 52 ms (bench/scale.py
    # --leakproof), 10,000 and 1,000 gave 21 ms (p99 40 ms; 18 ms before this fusion).
    df_cap: int = 1000
    space_cap: int = 10000
    # A count that reached its cap is remembered for ``capped_ttl_s`` (per process, per space and
    # word) and not made again meanwhile: adding memories cannot change a capped count, so the
    # weights stay exact unless the space shrinks back under a cap within that time. At 100,000
    # memories the two counts were 3.6 ms of a search's 8.6 in PostgreSQL (``bench.search_cost``).
    # A search with a filter (keyword, category, time range) counts within it, every time.
    capped_ttl_s: float = 60.0
    # Full text reads at most this many memories per query word before scoring: rare words (codes,
    # names) are always read in full, and a memory holding a rare word is found through it.
    rows_per_term: int = 200
    # A keyword or category filter passed by at most this many memories is searched exactly
    # (see _semantic_sql); above it, the HNSW scan finds enough matches on its own.
    exact_below: int = 20000
    # No rule reorders results by age. Corrections are versions, made at write time (supersede):
    # search sees only the latest. A query-time rule that put the newer of two similar results first
    # went: at cosine >= 0.6 (most turns of one conversation) it cost LoCoMo dev 12 points of hit@10;
    # at 0.9 it held LoCoMo but moved no generated correction up and cost exact quotes 0.15 of R@1.
    # A recency tie-breaker went too (no measurable effect on either benchmark).
    # The relevance floor: a result is "matching" when its cosine similarity reaches
    # ``min_similarity`` or it holds ``min_coverage`` of the query's full-text weight (a code or a
    # name the embedding misses); below both it is only the closest there is.
    min_similarity: float = 0.3
    min_coverage: float = 0.5
    # Similarities are taken onto the default model's scale as gain x cosine + offset before they
    # are fused, judged against the floor and shown; the identity for the default model. Another
    # model packs its similarities elsewhere (multilingual E5: unrelated text at 0.76), and would
    # otherwise count for little against the full-text share and clear the floor with anything.
    # The embedding backend's table (core/backends.py) gives each model's values.
    similarity_gain: float = 1.0
    similarity_offset: float = 0.0
    # The static embedding (a table distilled from the same MiniLM, embedder/static.py) as a third
    # signal: every candidate of the other lists has ``static_weight`` times its static cosine
    # similarity added to its fused score. It brings no candidates of its own: on LoCoMo dev a
    # second HNSW scan over the static column found the same top 10 for every question and cost
    # 2.8 ms at p50 and 15 ms at p95 (bench.locomo, variants of one load). Chosen on LoCoMo dev only: hit@10 0.780
    # without it, 0.783 at 0.3 and 0.5, 0.780 at 0.8, 0.782 at 1.2, 0.784 at 1.6; the generated
    # benchmark (a guard, not tuned on) then held 0.810 at 0.5 and fell to 0.807 at 0.3 and 0.793
    # at 1.6, so 0.5. docs/performance.md, "The third signal".
    static_weight: float = 0.5
    # Context of neighbours: memories saved one after another carry context for each other (a
    # conversation saved turn by turn: "Yes, it was in Paris!" answers the turn before it, and
    # matches the question only through it). The ``context_of`` best candidates by their own score
    # have their neighbours looked up: the memories just before and after them, that is the pieces
    # beside a piece of one document (an upload, an imported conversation), or the memories the
    # same writer saved on their own at most ``context_window_s`` apart. The neighbours join the
    # candidates, and every memory gets ``context_weight`` times the best own score of its
    # neighbours added to its own. LoCoMo dev (hit@1/5/10): 0.437 / 0.700 / 0.780 without,
    # 0.446 / 0.720 / 0.818 at 0.2, 0.447 / 0.726 / 0.818 at 0.25, 0.442 / 0.729 / 0.822 at 0.3;
    # the neighbours of the best 10 candidates gave 0.820, of all of them (no ``context_of``)
    # 0.818 at about 1.4 ms more. The generated benchmark (a guard: its memories are not a
    # conversation) held R@10 0.807 with statistics (0.807 without the context too). Search p50 in
    # process on LoCoMo dev 6.8 -> 7.3 ms. The window is not measured: every LoCoMo conversation is saved within a
    # minute, and keeping neighbours to their session measured the same (0.821 against 0.820 at
    # 0.25, a model of the ranking); 15 minutes keeps a conversation saved turn by turn together
    # and keeps apart what one writer saved on different occasions.
    context_weight: float = 0.25
    context_window_s: float = 900.0
    context_of: int = 20
    # Soft word match: full text counts a query word only where a memory holds it (or its first
    # ``prefix_chars`` letters); "damage" then misses a memory that says "broke down". Each query
    # word's highest similarity to a word of the memory (stopwords skipped), by the static model's
    # word vectors, counts from ``soft_floor`` (nothing) to 1 (the word itself), and
    # ``soft_weight`` times the share of the query's full-text weight matched that way joins the
    # memory's own score. Read for the best ``soft_of`` candidates by their own score; the others
    # get their exact share (coverage), the least the match finds. LoCoMo dev (hit@1/5/10), with
    # the question rule below: 0.447 / 0.725 / 0.820 with neither, 0.462 / 0.751 / 0.828 at 0.3,
    # 0.466 / 0.750 / 0.830 at 0.6. The generated benchmark (the guard) fell from R@10 0.807 to
    # 0.800 at 0.6 (paraphrases -3.8 points) and reads 0.810 at 0.3, hence 0.3. Floors of 0.3-0.5
    # measured alike on LoCoMo; 0.5 cost the guard 1.7 points. Search p50 about +1 ms in process
    # (docs/performance.md, "Soft word match").
    soft_weight: float = 0.3
    soft_floor: float = 0.4
    soft_of: int = 60
    # A memory that ends in a question mark asks rather than tells: it loses ``question_penalty``
    # of its score. Saved conversations hold the question beside its answer, and the question often
    # repeats the words of a later search ("What's your favourite childhood book?" for "What was
    # her favourite childhood book?") and so ranked above the answer. The penalty leaves its score
    # as context for its neighbours (the answer after it). LoCoMo dev hit@1 0.451 -> 0.462 beside
    # the soft match; 0.05-0.1 measured alike, 0.2 lost a point, 0.3 two; the guard the same.
    question_penalty: float = 0.1
    # A memory that ends in a question but also holds a statement (a sentence of at least
    # ``statement_words`` words ending in "." or "!") tells as well as asks, and is not penalised:
    # "I follow a strict gluten-free diet, so snacks are hard. What should I pack?" holds the
    # preference a later request needs. PrefEval (spent, a tuning set now) hit@1/@10 0.253 / 0.595
    # -> 0.261 / 0.625; LoCoMo dev 0.471 / 0.837 -> 0.468 / 0.839; MemoryBank 0.384 / 0.909 the
    # same; the generated guard R@10 0.810 the same. 6-10 words measured alike on PrefEval and a
    # point lower at hit@1 on LoCoMo dev. (255, the regular expression's limit, turns it off.)
    statement_words: int = 12
    # Weights by what the question asks (``intent.classify``): each kind's values replace the ones
    # above for that kind's questions, written ``kind:field=value,...`` (or ``&`` between fields)
    # and separated by ``;``. ``intent_aware`` off: one blend for every question. Chosen on LoCoMo
    # dev (760 questions: 425 fact, 170 temporal, 87 trait, 78 several) against the same ranking
    # without them, with the paired sign test of bench.locomo --compare: a fact's neighbours count
    # for more (context 0.35: hit@10 +8 -2), a date question matches words more softly (soft 0.6:
    # +5 -0), a question about a trait leans on meaning (lexical 0.3, static 0.8: +6 -2); the lexical
    # weight of date and list questions (0.4 to 1.2), a list question's pool (100) and its
    # neighbours moved nothing. Together hit@1 0.462 -> 0.471 and hit@10 0.833 -> 0.837 (none of it
    # significant alone, p > 0.05); the generated benchmark (the guard) held R@10 0.810.
    intent_aware: bool = True
    by_intent: str = (
        "fact:context_weight=0.35; temporal:soft_weight=0.6; trait:lexical_weight=0.3, static_weight=0.8"
    )
    # A question that names a time ("in May 2023", "last week") adds ``time_weight`` to the memories
    # whose time (``dates.memory_time``, else the day they were saved) falls in it. LoCoMo dev hit@10
    # 0.828 -> 0.833 at 0.1 and 0.2 (0.829 at 0.05); with the date words also taken out of the
    # full-text words it fell to 0.817.
    time_weight: float = 0.1
    # Off only to measure semantic search on its own (bench/retrieval.py compares the modes).
    fulltext: bool = True
    static: bool = True
    context: bool = True
    soft: bool = True

    def for_intent(self, kind: intents.Intent) -> SearchParams:
        """These parameters as a question of ``kind`` uses them."""
        changes = _intent_changes(self.by_intent).get(kind) if self.intent_aware else None
        return dataclasses.replace(self, **changes) if changes else self


@functools.lru_cache(maxsize=16)
def _intent_changes(spec: str) -> dict[str, dict[str, Any]]:
    """``SearchParams.by_intent`` read: per kind, the fields it changes (of the fields' own types)."""
    types = {f.name: str(f.type) for f in dataclasses.fields(SearchParams)}
    casts: dict[str, Callable[[str], Any]] = {
        "int": int,
        "float": float,
        "bool": lambda v: v.strip().lower() in ("1", "true"),
    }
    out: dict[str, dict[str, Any]] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        kind, _, pairs = part.partition(":")
        if kind.strip() not in intents.INTENTS:
            raise ValueError(f"by_intent: unknown kind {kind!r}")
        for pair in filter(None, (p.strip() for p in pairs.replace("&", ",").split(","))):
            name, _, value = pair.partition("=")
            name = name.strip()
            cast = casts.get(types.get(name, ""))
            if cast is None:
                raise ValueError(f"by_intent: {name!r} is not a numeric search parameter")
            out.setdefault(kind.strip(), {})[name] = cast(value)
    return out


@dataclass(frozen=True)
class SearchHit:
    memory: Memory
    score: float
    modes: tuple[str, ...]  # which of semantic / fulltext / keyword / category matched
    similarity: float | None = None
    matching: bool = True  # above the relevance floor (see SearchParams.min_similarity)
    ref: str | None = None  # the shortest short id no other memory of the space shares


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    modes: tuple[str, ...]
    fallback: str | None = None  # why a mode was skipped, e.g. the embedder being down
    intent: intents.Intent | None = None  # what the question was read as asking (``intent.classify``)

    @property
    def matching(self) -> int:
        return sum(h.matching for h in self.hits)


# A memory's time overlaps the days from ``lo`` to ``hi``: its own span (migration 0018), else the day
# it was saved.
_IN_TIME = (
    "coalesce(m.happened_to, CAST(m.created_at AS date)) >= {lo}"
    " AND coalesce(m.happened_from, CAST(m.created_at AS date)) <= {hi}"
)


class _SpaceCaps:
    """What is known of one space's full-text counts under one set of caps: until when its size is
    known to reach ``space_cap``, and each word's count ``df_cap`` (monotonic clock)."""

    def __init__(self, params: SearchParams) -> None:
        self.ttl = params.capped_ttl_s
        self.space_cap = params.space_cap
        self.full_until = 0.0
        self.words: dict[str, float] = {}

    def known(self, query: str) -> tuple[bool, list[str] | None]:
        """Whether the space's size is known to be capped, and the words of ``query`` whose counts
        are (a word PostgreSQL's parser reads from the question is lower case and inside it; a
        word passed that it does not read is never looked up). None: no word is known."""
        now = time.monotonic()
        self.words = {w: until for w, until in self.words.items() if until > now}
        folded = query.lower()
        return self.full_until > now, [w for w in self.words if w in folded] or None

    def learn(self, space_n: int | None, capped: Sequence[str] | None) -> None:
        """Remember the counts a search made that reached their caps. A count read from here (not
        made) comes back capped too and keeps its first deadline: it is made again once that passes."""
        now = time.monotonic()
        until = now + self.ttl
        if space_n is not None and space_n >= self.space_cap and self.full_until <= now:
            self.full_until = until
        for word in capped or ():
            if word not in self.words and len(self.words) < _CAPPED_WORDS:
                self.words[word] = until


class _CappedCounts:
    """The full-text counts that reached their caps lately, per space (``SearchParams.capped_ttl_s``),
    in this process, for the most recently searched ``_CAPPED_SPACES`` spaces."""

    def __init__(self) -> None:
        self._spaces: OrderedDict[tuple[uuid.UUID, int, int, int, float], _SpaceCaps] = OrderedDict()

    def of(self, space: uuid.UUID, params: SearchParams) -> _SpaceCaps:
        key = (space, params.space_cap, params.df_cap, params.prefix_chars, params.capped_ttl_s)
        caps = self._spaces.get(key)
        if caps is None:
            caps = self._spaces[key] = _SpaceCaps(params)
            if len(self._spaces) > _CAPPED_SPACES:
                self._spaces.popitem(last=False)
        else:
            self._spaces.move_to_end(key)
        return caps


_CAPPED_SPACES = 1024
_CAPPED_WORDS = 512  # a space's common words a search passes: a list of at most a few kilobytes
_CAPPED = _CappedCounts()


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
    static_embedding: Sequence[float] | None = None,
    word_matches: WordMatches | None = None,
    since: datetime.date | None = None,
    until: datetime.date | None = None,
    today: datetime.date | None = None,
) -> SearchResult:
    """Rank the space's live memories for a question, a literal keyword and/or a category.

    Pass ``query_embedding`` for semantic recall; without it (the embedder being down) the query is
    answered by full text alone and ``fallback`` says why. ``static_embedding`` is the query's
    vector in the static model's space, the third signal; ``word_matches`` (the static model's
    :meth:`best_matches`) adds the soft word match beside it. ``since`` and ``until`` (days, both
    included) keep the memories whose time overlaps them: the span of the dates the memory mentions,
    else the day it was saved (``dates``). A question's own dates are read from ``today`` (UTC by
    default). Results come back in score order.
    """
    params = params or SearchParams()
    query = validation.optional_text(query, "query", validation.MAX_QUERY)
    keyword = validation.optional_text(keyword, "keyword", validation.MAX_KEYWORD)
    category = validation.category(category)
    if query is None and keyword is None and category is None:
        raise ValidationError("query", "give at least one of query, keyword or category")
    limit = validation.result_limit(limit)
    since, until = validation.time_range(since, until)
    kind = intents.classify(query) if query is not None else None
    if kind is not None:
        params = params.for_intent(kind)

    filters = [f"m.space_id = %(s)s AND {LIVE}"]
    bind: dict[str, Any] = {"s": ctx.space.id, "k": params.candidates}
    if since is not None or until is not None:
        filters.append(_IN_TIME.format(lo="%(since)s", hi="%(until)s"))
        bind.update(since=since or datetime.date.min, until=until or datetime.date.max)
    filter_modes: list[str] = []
    if keyword is not None:
        filters.append("m.content ILIKE %(kw)s")
        bind["kw"] = like_pattern(keyword)
        filter_modes.append("keyword")
    if category is not None:
        filters.append("m.category = %(cat)s")
        bind["cat"] = category
        filter_modes.append("category")
    filtered = bool(filter_modes) or since is not None or until is not None
    if filtered:
        bind["exact_below"] = params.exact_below
    where = " AND ".join(filters)

    # The ranked lists whose candidates are scored. Full text is also the fallback when there is no
    # vector. A keyword is a literal promise, so its matches are a list of their own even beside a
    # question: an approximate index scan may stop before a rare match, and a code rarely shares
    # words with the question around it.
    semantic = query is not None and query_embedding is not None
    lexical = query is not None and (params.fulltext or query_embedding is None)
    lists: list[str] = []
    if semantic:
        lists.append("semantic")
        bind["e"] = HalfVector(query_embedding)  # type: ignore[arg-type]
    static = query is not None and static_embedding is not None and params.static
    if static:
        bind["se"] = HalfVector(static_embedding)  # type: ignore[arg-type]
    # The time a question names ("in May 2023") adds to the memories of that time; its date words
    # stay among the full-text words, which match memories that write the date the same way (LoCoMo
    # dev lost a point of hit@10 with them left out).
    asked = None
    if query is not None and params.time_weight > 0:
        asked, _ = dates.query_time(query, today or datetime.datetime.now(datetime.UTC).date())
    timed = asked is not None and (semantic or lexical)
    if timed:
        assert asked is not None
        bind.update(qfrom=asked.start, qto=asked.end, timew=params.time_weight)
    # What this process knows of the space's capped counts (a filter changes every count).
    capped = _CAPPED.of(ctx.space.id, params) if lexical and not filtered else None
    if lexical:
        lists.append("fulltext")
        full, common = capped.known(query or "") if capped else (False, None)
        bind.update(
            q=query,
            max_terms=MAX_TERMS,
            per_term=params.rows_per_term,
            prefix=params.prefix_chars,
            df_cap=params.df_cap,
            space_cap=params.space_cap,
            full=full,
            common=common,
        )
    if query is None or (keyword is not None and params.fulltext):
        lists.append("filter")
        bind["kwraw"] = keyword

    # Iterative index scans keep filtered queries from starving: the HNSW scan continues until
    # enough rows pass the space/keyword/category filter instead of stopping at ef_search.
    # The statements run on their generic plan from the first search of a connection on
    # (``_GENERIC_PLAN``).
    hnsw = {
        "hnsw.ef_search": str(int(params.ef_search)),
        "hnsw.iterative_scan": "relaxed_order",
        **_GENERIC_PLAN,
    }
    bind.update(
        # Without a vector, full text is the whole score.
        lexw=params.lexical_weight if semantic else 1.0,
        staticw=params.static_weight,
        tells=statement_pattern(params.statement_words),
        ctxw=params.context_weight,
        softn=params.soft_of,
        ctxn=params.context_of,
        window=datetime.timedelta(seconds=params.context_window_s),
        sgain=params.similarity_gain,
        soffset=params.similarity_offset,
    )
    soft = static and "fulltext" in lists and params.soft and params.soft_weight > 0
    context = (semantic or lexical) and params.context and params.context_weight > 0
    statement = _search_sql(tuple(lists), where, filtered, keyword is not None, static, context, soft, timed)
    async with (
        db.driver_transaction([ctx.space.id], settings=hnsw) as pg,
        psycopg.AsyncRawCursor(pg, row_factory=namedtuple_row) as cur,
    ):
        await db.execute(cur, statement, bind)
        scored: list[Any] = await cur.fetchall()
        if capped and scored:
            capped.learn(scored[0].space_n, scored[0].capped)
        ranked = _rank(scored, params, word_matches if soft else None, semantic or lexical)
        ranked = ranked[:limit]
        rows: dict[str, Any] = {}
        if ranked:
            await db.execute(cur, _MEMORIES, {"ids": [row.id for row, _ in ranked]})
            fetched: list[Any] = await cur.fetchall()
            rows = {str(memory.id): memory for memory in fetched}
    # A memory removed between the two statements (its space deleted) is left out.
    hits = [_hit(c, score, rows[c.id], filter_modes, params, semantic) for c, score in ranked if c.id in rows]
    modes = tuple(m for m in lists if m != "filter") + tuple(filter_modes)
    return SearchResult(hits=hits, modes=modes, fallback=fallback, intent=kind)


def _hit(
    scores: Any, score: float, row: Any, filter_modes: list[str], params: SearchParams, semantic: bool
) -> SearchHit:
    """A ranked candidate (``scores``, fused into ``score``) and its memory row as a hit, judged
    against the relevance floor.

    A literal keyword or category match is what was asked for, so it always matches; so does any
    full-text match when there is no vector to judge meaning by (the embedder being down).
    """
    matching = (
        bool(filter_modes)
        or (scores.sim is not None and scores.sim >= params.min_similarity)
        or scores.cov >= params.min_coverage
        or (not semantic and scores.cov > 0)
    )
    modes = ("semantic",) * bool(scores.sem) + ("fulltext",) * (scores.cov > 0)
    return SearchHit(
        memory=memory_from_row(row),
        score=round(score, 4),
        modes=modes + tuple(filter_modes),
        similarity=round(scores.sim, 4) if semantic and scores.sim is not None else None,
        matching=matching,
        ref=str(row.id)[: row.ref_len],
    )


def _semantic_sql(where: str, filtered: bool) -> str:
    """Nearest neighbours by cosine distance (at most ``k``), read through the HNSW index.

    A selective filter (a rare category, a keyword: at most ``exact_below`` rows pass it) is
    searched with exact distances instead: the HNSW scan would walk the whole neighbourhood of the
    query to find those rows and stop at its scan limits first (at 1M memories a 1% category kept
    55% of the true top 10). ``+ 0`` keeps the planner from ordering that variant through the HNSW
    index anyway. The row count is an init plan, so only one of the two scans runs.

    Each row comes with its distance (``d``): the scoring (``_scored_sql``) reuses it rather than
    reading the vector again (a vector stored out of line, as a long memory's is, costs a TOAST
    fetch).
    """
    distance = "m.embedding <=> CAST(%(e)s AS halfvec)"
    scan = f"SELECT m.id, {distance} AS d FROM memories m WHERE {where} AND m.embedding IS NOT NULL"
    if not filtered:
        return f"semantic AS ({scan} ORDER BY {distance} LIMIT %(k)s)"
    few = (
        "(SELECT count(*) <= %(exact_below)s FROM "
        f"(SELECT 1 FROM memories m WHERE {where} LIMIT %(exact_below)s + 1) c)"
    )
    # OFFSET 0 keeps the exact scan a subquery, so its distance is computed once (``d``).
    return (
        f"semantic AS (SELECT * FROM (SELECT * FROM ({scan} AND {few} OFFSET 0) s "
        f"ORDER BY d + 0 LIMIT %(k)s) exact "
        f"UNION ALL SELECT * FROM ({scan} AND NOT {few} "
        f"ORDER BY {distance} LIMIT %(k)s) approximate)"
    )


def _fulltext_sql(where: str) -> str:
    """The query's words with their weights, and the memories holding the heaviest share of them.

    The query is split by PostgreSQL's own parser (``to_tsvector('simple', ...)``), so it splits
    exactly like the stored text: "INC-61839" is 'inc' and '-61839' on both sides, which a
    regular-expression tokenizer gets wrong. Single characters and stopwords carry no signal; each
    remaining word becomes a quoted tsquery operand (quotes doubled, backslashes escaped), a prefix
    operand when it is an alphabetic word longer than ``prefix`` letters.

    A word's weight is its inverse document frequency in the space (the BM25 form), counted up to
    ``df_cap`` memories. A word no memory holds keeps its weight, the highest there is: it is part
    of what was asked, so a memory holding only the query's one common word covers a small share of
    it, not all of it. Each word contributes at most ``per_term`` rows as candidates; every
    candidate is then scored on all the words, read from the rows the words' scans return (fetching
    the candidates again by id cost 0.7-1.4 ms a search at 100,000 memories, for the same results).

    A count known to reach its cap is not made (``full``: the space's, ``common``: the words'; see
    ``_CappedCounts``): the branch of a ``CASE`` not taken never runs its subquery.
    """
    return (
        "terms AS MATERIALIZED ("
        "  SELECT CAST(CASE WHEN length(lexeme) > %(prefix)s AND lexeme ~ '^[[:alpha:]]+$'"
        "    THEN left(lexeme, %(prefix)s) || ':*'"
        "    ELSE '''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''' END AS tsquery) AS q,"
        "    min(lexeme) AS word"
        "  FROM (SELECT w.lexeme FROM unnest(to_tsvector('simple', %(q)s)) w"
        f"  WHERE length(w.lexeme) >= 2 AND w.lexeme <> ALL({_STOPWORDS_SQL})"
        "  ORDER BY w.positions[1] LIMIT %(max_terms)s) words GROUP BY 1"
        "), n AS MATERIALIZED (SELECT CASE WHEN %(full)s THEN %(space_cap)s ELSE (SELECT count(*) FROM"
        f"  (SELECT 1 FROM memories m WHERE {where} LIMIT %(space_cap)s) x) END AS n"
        "), wts AS MATERIALIZED ("
        "  SELECT t.q, t.word, d.df, ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) AS idf FROM terms t CROSS JOIN n s"
        "  CROSS JOIN LATERAL (SELECT CASE WHEN t.word = ANY(CAST(%(common)s AS text[])) THEN %(df_cap)s"
        f"    ELSE (SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} AND m.tsv @@ t.q LIMIT %(df_cap)s) x) END AS df) d"
        "), fulltext AS ("
        "  SELECT y.id FROM (SELECT DISTINCT ON (x.id) x.* FROM wts w CROSS JOIN LATERAL ("
        f"    SELECT m.id, m.tsv, m.created_at FROM memories m WHERE {where} AND m.tsv @@ w.q LIMIT %(per_term)s) x) y"
        "  ORDER BY (SELECT sum(w.idf) FROM wts w WHERE y.tsv @@ w.q) DESC, y.created_at DESC LIMIT %(k)s)"
    )


def _filter_sql(where: str, keyword: bool) -> str:
    """Keyword and/or category matches: closest literal matches first, then newest."""
    closeness = "word_similarity(%(kwraw)s, m.content) DESC, " if keyword else ""
    return (
        f"filtered AS (SELECT m.id FROM memories m WHERE {where} "
        f"ORDER BY {closeness}m.created_at DESC LIMIT %(k)s)"
    )


_LIST_CTE = {"semantic": "semantic", "fulltext": "fulltext", "filter": "filtered"}


def _neighbours_sql() -> str:
    """The neighbours of the best ``ctxn`` candidates (by their own score): the live memories just
    before and after each. A piece of a document (it has a position) neighbours the pieces beside
    it; a memory saved on its own neighbours the memories its writer saved on their own just before
    and after it, at most ``window`` seconds apart. Each lookup is one step down a partial index
    (migration 0011); the search's filters apply when the neighbours are scored."""
    doc = f"SELECT id FROM memories m WHERE {LIVE} AND m.document_id = x.document_id AND m.char_start"
    own = (
        f"SELECT id FROM memories m WHERE {LIVE} AND m.char_start IS NULL AND x.char_start IS NULL AND"
        " m.space_id = x.space_id AND m.created_by_user_id = x.created_by_user_id AND m.created_at"
    )
    return (
        "near AS MATERIALIZED (SELECT x.id AS a, n.id AS b FROM"
        " (SELECT id FROM own ORDER BY own DESC LIMIT %(ctxn)s) c JOIN memories x ON x.id = c.id"
        f" CROSS JOIN LATERAL (({doc} < x.char_start ORDER BY m.char_start DESC LIMIT 1)"
        f" UNION ALL ({doc} > x.char_start ORDER BY m.char_start LIMIT 1)"
        f" UNION ALL ({own} < x.created_at AND m.created_at >= x.created_at - %(window)s"
        " ORDER BY m.created_at DESC LIMIT 1)"
        f" UNION ALL ({own} > x.created_at AND m.created_at <= x.created_at + %(window)s"
        " ORDER BY m.created_at LIMIT 1)) n)"
    )


@functools.lru_cache(maxsize=8)
def statement_pattern(words: int) -> str:
    """A PostgreSQL regular expression for a sentence of at least ``words`` words that ends in a
    full stop or an exclamation mark (a statement)."""
    return rf"(^|[.!?]\s)\s*([^.!?\s]+\s+){{{max(words - 1, 0)},}}[^.!?\s]+[.!](\s|$)"


def _scored_sql(
    lists: tuple[str, ...], where: str, keyword: bool, static: bool, context: bool, timed: bool
) -> str:
    """Every candidate of every list with its scores, and its own relevance.

    ``similarity`` is the cosine similarity to the query (on the default model's scale), ``lex``
    the full-text weight of the query words the memory holds (``total``: of all of them),
    ``closeness`` how closely the literal keyword matches (the whole score of a search without a
    question), ``ssim`` the static embedding's cosine similarity. A memory's own score is
    similarity + ``lexw`` x lex / total (the coverage of the query's weight) + ``staticw`` x ssim.
    ``asks``: the memory ends in a question mark and holds no statement; ``tsv``: its full-text
    words, which the soft word match reads. With ``timed`` (the question names a time), a memory whose time falls in it gains
    ``timew``.

    With ``context``, the best candidates' neighbours (``_neighbours_sql``) are scored too and join
    the candidates (``every``); the fusion (``_rank``) adds ``ctxw`` times the best own score of a
    memory's neighbours to its own. The relation is symmetric (a memory is its neighbour's
    neighbour), so a neighbour pulled in gets the candidate beside it as its context.
    """
    distance = "m.embedding <=> CAST(%(e)s AS halfvec)"
    if "semantic" in lists:
        # The semantic list's own distances (``d``), computed once: a candidate of the other lists
        # only (``d`` null) and a neighbour are measured here.
        others = "".join(
            f" UNION ALL SELECT id, CAST(NULL AS float8) FROM {_LIST_CTE[n]}"
            for n in lists
            if n != "semantic"
        )
        candidates = f"SELECT id, min(d) AS d FROM (SELECT id, d FROM semantic{others}) x GROUP BY id"
        similarity = "%(sgain)s * (1 - ({})) + %(soffset)s"
    else:
        candidates = " UNION ".join(f"SELECT id FROM {_LIST_CTE[name]}" for name in lists)
        similarity = "CAST(NULL AS float8)"
    lex, total = "0.0", "0.0"
    if "fulltext" in lists:
        lex = "(SELECT coalesce(sum(w.idf), 0) FROM wts w WHERE m.tsv @@ w.q)"
        total = "(SELECT coalesce(sum(idf), 0) FROM wts)"
    closeness = "word_similarity(%(kwraw)s, m.content)" if keyword else "0"
    ssim = "1 - (m.static_embedding <=> CAST(%(se)s AS halfvec))" if static else "CAST(NULL AS float8)"
    in_time = (
        f"CASE WHEN {_IN_TIME.format(lo='%(qfrom)s', hi='%(qto)s')} THEN %(timew)s ELSE 0 END"
        if timed
        else "0"
    )
    if "semantic" in lists or "fulltext" in lists:
        relevance = (
            "coalesce(sim, 0) + %(lexw)s * coalesce(lex / nullif(total, 0), 0) + %(staticw)s * coalesce(ssim, 0)"
            + (" + timed" if timed else "")
        )
    else:
        relevance = "closeness"

    def score(source: str, filters: str = "true", candidate: bool = True) -> str:
        # A candidate is in the semantic list when it has that list's distance; a neighbour (not a
        # candidate) never is.
        sim, in_semantic = similarity, "false"
        if "semantic" in lists:
            sim = similarity.format(f"coalesce(c.d, {distance})" if candidate else distance)
            in_semantic = "c.d IS NOT NULL" if candidate else "false"
        return (
            f"SELECT m.id, m.created_at, {sim} AS sim, {lex} AS lex, {total} AS total,"
            f" {closeness} AS closeness, {ssim} AS ssim, {in_semantic} AS sem, {in_time} AS timed,"
            f" right(rtrim(m.content), 1) = '?' AND m.content !~ %(tells)s AS asks, m.tsv"
            f" FROM ({source}) c JOIN memories m ON m.id = c.id WHERE {filters}"
        )

    scored = f"cand AS ({candidates}), scored AS MATERIALIZED ({score('SELECT * FROM cand')})"
    if not context:
        return f"{scored}, every AS (SELECT *, {relevance} AS own FROM scored)"
    return (
        f"{scored}, own AS MATERIALIZED (SELECT *, {relevance} AS own FROM scored), {_neighbours_sql()},"
        f" every AS (SELECT * FROM own UNION ALL SELECT *, {relevance} FROM"
        f" ({score('SELECT b AS id FROM near EXCEPT SELECT id FROM cand', where, False)}) s)"
    )


@functools.lru_cache(maxsize=64)
def _search_sql(
    lists: tuple[str, ...],
    where: str,
    filtered: bool,
    keyword: bool,
    static: bool,
    context: bool,
    soft: bool,
    timed: bool,
) -> NativeStatement:
    """Every ranked list, and every candidate (with the neighbours of the best, for the context)
    with its scores, the neighbour pairs among them and, for the soft word match, its words and
    the query's words with their weights: the first of a search's two statements (the second reads
    the results' memory rows). ``_rank`` fuses the scores.

    Built once per shape of search, with runs of spaces collapsed (no literal in these statements
    holds two spaces) and PostgreSQL's own placeholders: at about 5,700 characters the driver would
    rewrite its placeholders on every search (``NativeStatement``).
    """
    ctes = {
        "semantic": lambda: _semantic_sql(where, filtered),
        "fulltext": lambda: _fulltext_sql(where),
        "filter": lambda: _filter_sql(where, keyword),
    }
    # A candidate is named by its place in the order of own scores (``r``: 1 is the best): numbers
    # cost the client less than uuids. The neighbour pairs come as two lists of places on the first
    # row (``_rank`` reads them both ways), as do ``total`` and the query's words: a list of
    # neighbours per row, gathered and joined back here, cost PostgreSQL 0.1-0.2 ms more a search.
    pairs = "SELECT CAST(NULL AS int8[]) AS a, CAST(NULL AS int8[]) AS b"
    if context:
        pairs = (
            "SELECT array_agg(x.r) AS a, array_agg(y.r) AS b FROM near n"
            " JOIN ranked x ON x.id = n.a JOIN ranked y ON y.id = n.b"
        )
    # The soft word match reads the words of the best ``softn`` (a string: an array of words took
    # twice as long to read), and the query's words with their weights.
    words, terms = (
        "CAST(NULL AS text)",
        "SELECT CAST(NULL AS text[]) AS qwords, CAST(NULL AS float8[]) AS qidf",
    )
    if soft:
        words = "CASE WHEN e.r <= %(softn)s THEN array_to_string(tsvector_to_array(e.tsv), ' ') END"
        terms = (
            "SELECT array_agg(word ORDER BY word) AS qwords,"
            " array_agg(CAST(idf AS float8) ORDER BY word) AS qidf FROM wts"
        )
    # The counts that reached their caps (``_CappedCounts`` learns them from the first row).
    counted = "SELECT CAST(NULL AS int8) AS space_n, CAST(NULL AS text[]) AS capped"
    if "fulltext" in lists:
        counted = (
            "SELECT (SELECT n FROM n) AS space_n,"
            " array_agg(word) FILTER (WHERE df >= %(df_cap)s) AS capped FROM wts"
        )
    first = "CASE WHEN e.r = 1 THEN {} END"
    sql = " ".join(
        f"WITH {', '.join(ctes[name]() for name in lists)}, {_scored_sql(lists, where, keyword, static, context, timed)},"
        " ranked AS MATERIALIZED (SELECT *, row_number() OVER (ORDER BY own DESC, created_at DESC) AS r FROM every)"
        " SELECT e.r, CAST(e.id AS text) AS id, e.sim, CAST(coalesce(e.lex / nullif(e.total, 0), 0) AS float8) AS cov,"
        f" e.sem, e.own, e.asks, {words} AS words, {first.format('p.a')} AS near_a, {first.format('p.b')} AS near_b,"
        f" {first.format('CAST(e.total AS float8)')} AS total, {first.format('t.qwords')} AS qwords,"
        f" {first.format('t.qidf')} AS qidf, {first.format('k.space_n')} AS space_n, {first.format('k.capped')} AS capped"
        f" FROM ranked e CROSS JOIN ({pairs}) p CROSS JOIN ({terms}) t CROSS JOIN ({counted}) k ORDER BY e.r".split()
    )
    return NativeStatement.of(sql)


def _unique_prefix(digits: int) -> str:
    """True when no other memory of the space that a short id can name (the latest versions) has an
    id starting with the same ``digits`` hex digits: one step down the primary key each."""
    pad = (8 - digits) * "{0}" + "-{0}{0}{0}{0}-{0}{0}{0}{0}-{0}{0}{0}{0}-" + 12 * "{0}"
    lo, hi = (f"CAST(left(CAST(m.id AS text), {digits}) || '{pad.format(c)}' AS uuid)" for c in "0f")
    return (
        "(SELECT count(*) FROM (SELECT 1 FROM memories o WHERE o.space_id = m.space_id AND o.is_latest"
        f" AND o.id BETWEEN {lo} AND {hi} LIMIT 2) x) = 1"
    )


# The results' memory rows, each with the length of its shortest unique short id (``ref_len``).
_REF_LEN = (
    f"CASE WHEN {_unique_prefix(MIN_SHORT_ID_LEN)} THEN {MIN_SHORT_ID_LEN}"
    f" WHEN {_unique_prefix(6)} THEN 6 ELSE {SHORT_ID_LEN} END AS ref_len"
)
_MEMORIES = NativeStatement.of(
    " ".join(
        f"{MEMORY_SELECT.replace('SELECT ', f'SELECT {_REF_LEN}, ', 1)} WHERE m.id = ANY(CAST(%(ids)s AS uuid[]))".split()
    )
)


def _rank(
    rows: Sequence[Any], params: SearchParams, word_matches: WordMatches | None, relevance: bool
) -> list[tuple[Any, float]]:
    """The candidates (in the order of their own scores, ``_search_sql``) with their fused scores,
    best first (the better own score first on a tie).

    A memory's own score gains the soft word match when ``word_matches`` is given, then its
    neighbours' best own score times ``context_weight``; a memory that asks a question loses
    ``question_penalty`` (only where relevance ranks, not a bare keyword or category).
    """
    own: list[float] = [row.own for row in rows]  # own[r - 1]
    if word_matches is not None and rows and rows[0].qwords and rows[0].total:
        total = rows[0].total
        read = [row.words for row in rows if row.words is not None]  # the first ones
        matched = word_matches(rows[0].qwords, rows[0].qidf, read, params.soft_floor, _NOT_MATCHED)
        for n, weight in enumerate(matched):
            own[n] += params.soft_weight * weight / total
        for n in range(len(read), len(rows)):  # beyond: the exact share (what the match finds at the least)
            own[n] += params.soft_weight * rows[n].cov

    # Each candidate's neighbours (places), from the pairs of the first row, read both ways.
    neighbours: dict[int, list[int]] = {}
    if rows and rows[0].near_a:
        for a, b in zip(rows[0].near_a, rows[0].near_b, strict=True):
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)

    # One loop with the weights in locals (a hundred rows a search).
    context_weight, question_penalty = params.context_weight, params.question_penalty
    ranked: list[tuple[Any, float]] = []
    for row in rows:
        score: float = own[row.r - 1]
        near = neighbours.get(row.r)
        if near:
            score += context_weight * max([own[n - 1] for n in near])
        if relevance and row.asks:
            score -= question_penalty
        ranked.append((row, score))
    ranked.sort(key=lambda item: (-item[1], item[0].r))
    return ranked


async def record_recalls(db: Database, counts: dict[tuple[uuid.UUID, uuid.UUID], int]) -> None:
    """Add recall counts ``{(space id, memory id): n}`` in one statement (feeds the stable profile).

    Callers batch these off the request path: updating the same hot rows inside every search
    transaction would serialize concurrent searches on row locks. The counts live in
    ``memory_recalls`` (migration 0020), so a batch leaves the memories' own rows alone; a memory
    deleted since it was found is skipped.
    """
    if not counts:
        return
    ordered = sorted(counts.items(), key=lambda item: item[0][1])  # one lock order: no deadlocks
    async with db.transaction({space for space, _ in counts}) as conn:
        await conn.execute(
            text(
                "INSERT INTO memory_recalls AS r (memory_id, space_id, recall_count, last_recalled_at, created_at)"
                " SELECT m.id, m.space_id, c.n, now(), m.created_at"
                " FROM unnest(CAST(:ids AS uuid[]), CAST(:ns AS int[])) WITH ORDINALITY AS c(id, n, i)"
                " JOIN memories m ON m.id = c.id ORDER BY c.i"
                " ON CONFLICT (memory_id) DO UPDATE"
                " SET recall_count = r.recall_count + excluded.recall_count, last_recalled_at = now()"
            ),
            {"ids": [memory_id for (_, memory_id), _ in ordered], "ns": [n for _, n in ordered]},
        )
