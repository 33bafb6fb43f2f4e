"""Search latency and ANN recall at 10k, 100k (and 1M) memories in one space.

The vectors are GENERATED, not embedded: unit vectors around random cluster centres (about 200
memories per cluster, cosine ~0.55 inside a cluster, like sentence embeddings of related facts),
because embedding a million texts takes hours on 2 CPUs. The texts reuse the retrieval dataset's
memories (with a serial number, so each is unique), so full text and trigram indexes see realistic
words; 1% of the memories carry the category ``rare`` for the filtered measurements.

For each size: bulk load (COPY as the schema owner), index build time and size, then through the
store's real ``search_memories`` (least-privilege role, row-level security on):
- hybrid search latency p50/p95/p99 and queries/s (1 and 4 concurrent callers);
- semantic recall@10 of the HNSW scan against exact search, per ``ef_search``;
- the same with a 1% category filter (iterative index scans), and a keyword + query search.

    python -m bench.scale                              # 10k and 100k as shipped, about 8 minutes
    python -m bench.scale --sizes 10000,1000000 --leakproof   # 1M, about 20 minutes (see --leakproof)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg

from bench.common import (
    BenchDatabase,
    BenchServer,
    bench_server,
    machine,
    median,
    percentile,
    writer_contexts,
)
from bench.retrieval_dataset import build_dataset
from memory_mcp.store import search
from memory_mcp.store.db import Database
from memory_mcp.store.models import SpaceContext

DIM = 384
SPACE = "scale"
RARE = "rare"
COMMON = ("fact", "contact", "decision", "policy", "howto", "incident", "task", "social", "preference")
CHUNK = 20_000
# Server settings for the run: a buffer cache that holds the 100k point, and index builds that use
# the second core and enough memory to build the HNSW graph in memory.
SERVER_SETTINGS = {"shared_buffers": "4GB", "max_parallel_maintenance_workers": "1"}
MAINTENANCE_WORK_MEM = "8GB"
INDEXES = ("memories_embedding_hnsw", "memories_tsv", "memories_content_trgm")
# Row-level security lets the planner use an index for a condition only if its operator is
# LEAKPROOF; the full-text match (@@) and ILIKE are not, so under RLS the GIN indexes go unused and
# full text and keyword filters scan the space. --leakproof marks these two (superuser, this
# benchmark database only) to measure what the indexes would give.
LEAKPROOF_CANDIDATES = ("ts_match_vq(tsvector, tsquery)", "texticlike(text, text)")


@dataclass(frozen=True)
class Corpus:
    vectors: np.ndarray
    centres: np.ndarray
    texts: list[str]
    query_texts: list[str]


def unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: np.ndarray = (rows / norms).astype(np.float32)
    return out


def make_corpus(size: int, seed: int = 1) -> Corpus:
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((max(50, size // 200), DIM)))
    vectors = np.empty((size, DIM), dtype=np.float32)
    for start in range(0, size, CHUNK):
        n = min(CHUNK, size - start)
        noise = rng.standard_normal((n, DIM)) / np.sqrt(DIM)
        vectors[start : start + n] = unit(centres[rng.integers(0, len(centres), n)] + 0.9 * noise)
    data = build_dataset(7, 1)
    base = [m.content for m in data.memories]
    texts = [f"{base[i % len(base)]} (#{i})" for i in range(size)]
    query_texts = [q.text for q in data.queries if q.text is not None]
    return Corpus(vectors, centres, texts, query_texts)


def query_vectors(corpus: Corpus, count: int, seed: int) -> np.ndarray:
    """Questions near a cluster: a centre plus less noise than the memories have."""
    rng = np.random.default_rng(seed)
    picks = corpus.centres[rng.integers(0, len(corpus.centres), count)]
    return unit(picks + 0.6 * rng.standard_normal((count, DIM)) / np.sqrt(DIM))


def vector_text(rows: np.ndarray) -> list[str]:
    buffer = io.StringIO()
    np.savetxt(buffer, rows, fmt="%.4g", delimiter=",")
    return ["[" + line + "]" for line in buffer.getvalue().splitlines()]


def bulk_load(bench_db: BenchDatabase, space_id: uuid.UUID, corpus: Corpus) -> dict[str, tuple[float, int]]:
    """COPY the corpus in with the search indexes dropped, then rebuild them; (seconds, bytes) each."""
    size = len(corpus.texts)
    rng = np.random.default_rng(2)
    rare = rng.random(size) < 0.01
    common = rng.integers(0, len(COMMON), size)
    ages = rng.uniform(0, 720, size)
    now = datetime.now(UTC)
    with psycopg.connect(bench_db.owner_dsn) as conn:
        conn.execute("SELECT set_config('memory_mcp.spaces', %s, false)", (str(space_id),))
        definitions: dict[str, str] = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories' AND indexname = ANY(%s)",
                (list(INDEXES),),
            ).fetchall()
        )
        for name in INDEXES:
            conn.execute(f"DROP INDEX {name}")
        # COPY refuses tables under row-level security; the owner lifts FORCE for the load only.
        for table in ("documents", "memories"):
            conn.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        documents = [uuid.uuid4() for _ in range(0, size, 1000)]
        with conn.cursor().copy(
            "COPY documents (id, space_id, title, doc_type, status, content_hash) FROM STDIN"
        ) as copy:
            for doc in documents:
                copy.write_row((doc, space_id, "generated", "text", "done", doc.hex))
        started = time.perf_counter()
        with conn.cursor().copy(
            "COPY memories (space_id, document_id, content, content_hash, category, embedding, created_at, "
            "updated_at) FROM STDIN"
        ) as copy:
            for start in range(0, size, CHUNK):
                stop = min(size, start + CHUNK)
                for i, vector in zip(
                    range(start, stop), vector_text(corpus.vectors[start:stop]), strict=True
                ):
                    created = now - timedelta(days=float(ages[i]))
                    content = corpus.texts[i]
                    copy.write_row(
                        (
                            space_id,
                            documents[i // 1000],
                            content,
                            hashlib.sha256(content.encode()).hexdigest(),
                            RARE if rare[i] else COMMON[common[i]],
                            vector,
                            created,
                            created,
                        )
                    )
        for table in ("documents", "memories"):
            conn.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        conn.commit()
        print(f"  loaded {size} memories in {time.perf_counter() - started:.0f} s (COPY, indexes dropped)")
        conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
        built: dict[str, tuple[float, int]] = {}
        for name in INDEXES:
            started = time.perf_counter()
            conn.execute(definitions[name])
            conn.commit()
            seconds = time.perf_counter() - started
            row = conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()
            built[name] = (seconds, int(row[0]) if row else 0)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE memories")
        table_size = conn.execute("SELECT pg_table_size('memories')").fetchone()
        built["memories (table)"] = (0.0, int(table_size[0]) if table_size else 0)
    return built


@dataclass(frozen=True)
class Latency:
    p50: float
    p95: float
    p99: float
    qps1: float
    qps4: float


async def latency(
    db: Database,
    ctx: SpaceContext,
    texts: list[str],
    vectors: np.ndarray,
    params: search.SearchParams,
    category: str | None = None,
    keywords: list[str] | None = None,
) -> Latency:
    """Search latency over ``len(vectors)`` queries, one caller, then four callers at once."""

    async def one(i: int) -> float:
        started = time.perf_counter()
        await search.search_memories(
            db,
            ctx,
            texts[i % len(texts)],
            keywords[i % len(keywords)] if keywords else None,
            category,
            vectors[i].tolist(),
            10,
            params,
        )
        return time.perf_counter() - started

    for i in range(10):  # warm-up: connections, plans, buffer cache
        await one(i)
    started = time.perf_counter()
    samples = [await one(i) for i in range(len(vectors))]
    qps1 = len(samples) / (time.perf_counter() - started)
    pending = iter(range(len(vectors)))

    async def caller() -> None:
        for i in pending:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(4)))
    qps4 = len(vectors) / (time.perf_counter() - started)
    ms = [s * 1000 for s in samples]
    return Latency(median(ms), percentile(ms, 95), percentile(ms, 99), qps1, qps4)


def exact_top10(
    bench_db: BenchDatabase, space_id: uuid.UUID, vectors: np.ndarray, category: str | None
) -> list[list[uuid.UUID]]:
    """Exact nearest neighbours (index scans off: a sequential scan computes every distance)."""
    out = []
    where = "space_id = %s AND is_latest AND forgotten_at IS NULL" + (
        " AND category = %s" if category else ""
    )
    with psycopg.connect(bench_db.owner_dsn) as conn:
        conn.execute("SELECT set_config('memory_mcp.spaces', %s, false)", (str(space_id),))
        conn.execute("SET enable_indexscan = off")
        for vector in vector_text(vectors):
            args = (space_id, category, vector) if category else (space_id, vector)
            rows = conn.execute(
                f"SELECT id FROM memories WHERE {where} ORDER BY embedding <=> %s::halfvec LIMIT 10", args
            ).fetchall()
            out.append([r[0] for r in rows])
    return out


async def ann_recall(
    db: Database,
    ctx: SpaceContext,
    vectors: np.ndarray,
    exact: list[list[uuid.UUID]],
    params: search.SearchParams,
    category: str | None,
) -> tuple[float, float, float]:
    """Recall@10 of semantic search against exact search; median and p99 latency in ms."""
    # Semantic ranks only: no full text, no recency, no newer-first reordering.
    semantic = replace(params, fulltext=False)
    found, ms = 0.0, []
    for vector, truth in zip(vectors, exact, strict=True):
        started = time.perf_counter()
        result = await search.search_memories(db, ctx, "q", None, category, vector.tolist(), 10, semantic)
        ms.append((time.perf_counter() - started) * 1000)
        found += len({h.memory.id for h in result.hits} & set(truth)) / max(1, min(10, len(truth)))
    return found / len(vectors), median(ms), percentile(ms, 99)


async def measure(server: BenchServer, size: int, args: argparse.Namespace) -> dict[str, float]:
    print(f"\n== {size} memories in one space (generated vectors) ==", flush=True)
    corpus = make_corpus(size)
    bench_db = server.database(f"scale{size}")
    if args.leakproof:
        server.mark_leakproof(bench_db, LEAKPROOF_CANDIDATES)
    db = Database(bench_db.app_url, pool_size=5)
    figures: dict[str, float] = {}
    try:
        ctx = (await writer_contexts(db, [SPACE]))[SPACE]
        built = bulk_load(bench_db, ctx.space.id, corpus)
        for name, (seconds, size_bytes) in built.items():
            took = f"built in {seconds:7.1f} s, " if seconds else ""
            print(f"  {name:<26} {took}{size_bytes / 2**20:8.1f} MiB")
        figures["hnsw_build_s"] = built["memories_embedding_hnsw"][0]
        params = search.SearchParams(ef_search=args.ef_search)
        vectors = query_vectors(corpus, args.queries, seed=3)
        lat = await latency(db, ctx, corpus.query_texts, vectors, params)
        print(
            f"  hybrid search (ef_search {args.ef_search}):            p50 {lat.p50:6.1f} ms  p95 {lat.p95:6.1f} ms  "
            f"p99 {lat.p99:6.1f} ms  {lat.qps1:5.1f} q/s (1 caller)  {lat.qps4:5.1f} q/s (4 callers)",
            flush=True,
        )
        figures["p50"], figures["p99"] = lat.p50, lat.p99
        lat = await latency(db, ctx, corpus.query_texts, vectors, params, category=RARE)
        print(
            f"  hybrid + 1% category filter:                 p50 {lat.p50:6.1f} ms  p95 {lat.p95:6.1f} ms  "
            f"p99 {lat.p99:6.1f} ms  {lat.qps1:5.1f} q/s (1 caller)  {lat.qps4:5.1f} q/s (4 callers)",
            flush=True,
        )
        keywords = [f"(#{i})" for i in np.random.default_rng(4).integers(0, size, args.queries)]
        lat = await latency(db, ctx, corpus.query_texts, vectors, params, keywords=keywords)
        print(
            f"  hybrid + keyword matching one memory:        p50 {lat.p50:6.1f} ms  p95 {lat.p95:6.1f} ms  "
            f"p99 {lat.p99:6.1f} ms  {lat.qps1:5.1f} q/s (1 caller)  {lat.qps4:5.1f} q/s (4 callers)",
            flush=True,
        )
        recall_vectors = query_vectors(corpus, args.recall_queries, seed=5)
        for category in (None, RARE):
            exact = exact_top10(bench_db, ctx.space.id, recall_vectors, category)
            # With the 1% filter the default is an exact search over the filtered rows; the HNSW
            # iterative scan is measured too (exact_below=0), as a less selective filter gets it.
            paths = (
                [("", params)]
                if category is None
                else [("exact path", params), ("HNSW scan", replace(params, exact_below=0))]
            )
            for path, path_params in paths:
                label = f"1% category, {path}" if category else "no filter"
                for ef in args.ef_sweep if (category is None or path == "HNSW scan") else [args.ef_search]:
                    recall, p50, p99 = await ann_recall(
                        db, ctx, recall_vectors, exact, replace(path_params, ef_search=ef), category
                    )
                    print(
                        f"  semantic recall@10 vs exact, {label:<23}, ef_search {ef:>3}: {recall:.3f}  "
                        f"(p50 {p50:5.1f} ms, p99 {p99:5.1f} ms)",
                        flush=True,
                    )
                    figures[f"recall_{label}_{ef}"] = recall
    finally:
        await db.close()
        server.drop(bench_db)
    return figures


async def run(args: argparse.Namespace, server: BenchServer) -> None:
    results = {size: await measure(server, size, args) for size in args.sizes}
    if len(results) > 1:
        smallest, largest = min(results), max(results)
        ratio = results[largest]["p50"] / results[smallest]["p50"]
        ratio99 = results[largest]["p99"] / results[smallest]["p99"]
        print(f"\nlatency growth {smallest} -> {largest}: p50 x{ratio:.2f}, p99 x{ratio99:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated memory counts")
    parser.add_argument("--queries", type=int, default=100, help="queries per latency measurement")
    parser.add_argument("--recall-queries", type=int, default=50, help="queries checked against exact search")
    parser.add_argument("--ef-search", type=int, default=100, help="ef_search for the latency runs")
    parser.add_argument("--ef-sweep", default="40,100,200", help="ef_search values for the recall runs")
    parser.add_argument(
        "--leakproof", action="store_true", help="mark @@ and ILIKE LEAKPROOF in the benchmark databases"
    )
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.ef_sweep = [int(s) for s in args.ef_sweep.split(",")]
    print(f"machine: {machine()}")
    print("vectors: GENERATED (clustered random unit vectors, 384 dims), not model embeddings")
    if args.leakproof:
        print(f"LEAKPROOF (this run only): {', '.join(LEAKPROOF_CANDIDATES)}")
    with bench_server(SERVER_SETTINGS) as server:
        asyncio.run(run(args, server))


if __name__ == "__main__":
    main()
