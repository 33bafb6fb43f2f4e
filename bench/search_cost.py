"""Where a search's CPU goes: the query's embeddings, the store's statements and ranking, PostgreSQL.

Seeds one space of N memories (real texts, real vectors), gathers statistics (``ANALYZE``), then
asks M different questions through the store's ``search_memories`` exactly as the service does
(MiniLM query vector, the static model's vector, the soft word match) and prints, per search, the
CPU milliseconds of each part (medians of ``--rounds`` rounds over the same questions):

- ``embed``: the MiniLM forward pass of the question (``encode``, the call the embedder makes, on
  the model loaded as the server loads it: through ONNX Runtime's int8 copy once its files are
  ready, which the bench waits for; ``MEMORY_MCP_EMBEDDING_INT8_QUERIES=false`` for the exact
  graph; the service's LRU of query vectors is not in the way: every question is new to the model
  call);
- ``static``: the question's static-model vector;
- ``soft``: the soft word match (``StaticModel.soft_matches``, called from the store's ranking);
- ``store``: the rest of ``search_memories`` in this process: checks, building the bind, sending
  the statements, decoding the rows, the fusion in Python;
- ``pg``: PostgreSQL's CPU (every process of the cluster, read from /proc), and of it, from
  ``pg_stat_statements``, the execution time of the fusion statement, of the results' memory rows
  with their short ids, and of everything else (transaction set-up, parse/bind, commit), each with
  its planning; ``pg: planning`` is the planning alone, all statements together, and a last line
  says how many times the fusion statement was planned in a round (a few on a warm connection's
  generic plan; one a search where PostgreSQL keeps custom plans).

What it leaves out is the MCP request around a search (HTTP, session, JSON-RPC, the output schema,
rendering): ``python -m bench.load`` measures the whole server process.

The texts are the generated team dataset's (``bench/retrieval_dataset.py``: people, preferences,
codes, corrections, chatter in English, German and Italian), as many distinct ones as N needs; the
questions are its questions. A space's memories are written by one writer in sessions of about
thirty, a few seconds apart (so neighbours exist, as in a saved conversation), COPYed in as the
schema owner with the indexes in place, in a database with ``@@`` and ``ILIKE`` marked LEAKPROOF as
the embedded default marks them. The model's vectors are kept in ``--vectors FILE.npz``
between runs (100,000 texts take minutes to embed on two cores).

    python -m bench.search_cost --memories 300,100000 --vectors /tmp/search_cost.npz
    python -m bench.search_cost --memories 100000 --explain     # EXPLAIN (ANALYZE, BUFFERS) too
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench.common import BenchDatabase, BenchServer, bench_server, machine, writer_contexts
from bench.retrieval_dataset import build_dataset
from bench.scale import INDEXES
from memory_mcp.embedder.model import EmbeddingModel, encode, load_model
from memory_mcp.embedder.onnx_model import onnx_roots
from memory_mcp.embedder.static import StaticModel, load_static_model
from memory_mcp.store import search
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import LEAKPROOF_FUNCTIONS
from memory_mcp.store.models import SpaceContext

SPACE = "cost"
# pg_stat_statements for the split of PostgreSQL's time by statement; the buffer cache holds 100k.
# Planning is tracked too ("pg: planning"): a search's statements are prepared and run on a cached
# generic plan, so it stays near 0 unless something makes them replan.
SERVER_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
    "shared_buffers": "1GB",
}
SESSION = 30  # memories a writer saves in one sitting
PARTS = ("embed", "static", "soft", "store", "pg")
EXPLAIN_RUNS = 12  # --explain: the plan of the last run, a prepared statement's generic plan


def texts_and_questions(size: int, questions: int) -> tuple[list[str], list[str | None], list[str]]:
    """``size`` distinct memory texts with their categories, and ``questions`` distinct questions."""
    texts: dict[str, str | None] = {}
    asked: dict[str, None] = {}
    seed = 7
    while len(texts) < size or len(asked) < questions:
        data = build_dataset(seed, max(1, min(20, size // 1500)))
        for memory in data.memories:
            texts.setdefault(memory.content, memory.category)
        for query in data.queries:
            if query.text is not None:
                asked.setdefault(query.text, None)
        seed += 1
    chosen = list(texts.items())[:size]
    return [t for t, _ in chosen], [c for _, c in chosen], list(asked)[:questions]


def model_vectors(
    model: EmbeddingModel, texts: Sequence[str], questions: Sequence[str], cache: Path | None
) -> tuple[np.ndarray, np.ndarray]:
    """The model's vectors of the texts and the questions, from ``cache`` when it holds them."""
    key = hashlib.sha256("\n".join([*texts, "--", *questions]).encode()).hexdigest()
    if cache is not None and cache.exists():
        stored = np.load(cache)
        if str(stored["key"]) == key:
            print(f"model vectors read from {cache}")
            return stored["texts"], stored["questions"]
    started = time.perf_counter()
    rows = encode(model, texts, "passage")
    asked = encode(model, questions, "query")
    print(f"embedded {len(texts)} texts in {time.perf_counter() - started:.0f} s")
    if cache is not None:
        np.savez(cache, key=np.array(key), texts=rows, questions=asked)
    return rows, asked


def halfvec_text(rows: np.ndarray) -> list[str]:
    return ["[" + ",".join(f"{v:.5g}" for v in row) + "]" for row in rows]


def load(
    owner_dsn: str,
    space: uuid.UUID,
    writer: uuid.UUID,
    texts: Sequence[str],
    categories: Sequence[str | None],
    vectors: np.ndarray,
    statics: np.ndarray,
) -> None:
    """COPY the memories into the space (one document each, as ``add_memory`` saves them) with the
    search indexes dropped, rebuild those, then ``VACUUM ANALYZE``. ``owner_dsn`` is the schema
    owner's, in the form psycopg takes; ``writer`` is the user every memory is saved by."""
    now = datetime.now(UTC)
    started = time.perf_counter()
    with psycopg.connect(owner_dsn) as conn:
        definitions: dict[str, str] = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories' AND indexname = ANY(%s)",
                (list(INDEXES),),
            ).fetchall()
        )
        for name in definitions:
            conn.execute(f"DROP INDEX {name}")
        for table in ("documents", "memories"):
            conn.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        documents = [uuid.uuid4() for _ in texts]
        with conn.cursor().copy(
            "COPY documents (id, space_id, title, doc_type, status, content_hash, created_by_user_id)"
            " FROM STDIN"
        ) as copy:
            for doc, content in zip(documents, texts, strict=True):
                copy.write_row((doc, space, content[:60], "text", "done", doc.hex, writer))
        with conn.cursor().copy(
            "COPY memories (space_id, document_id, content, content_hash, category, embedding,"
            " static_embedding, created_by_user_id, created_at, updated_at) FROM STDIN"
        ) as copy:
            for start in range(0, len(texts), 5000):
                stop = min(len(texts), start + 5000)
                rows = zip(
                    range(start, stop),
                    halfvec_text(vectors[start:stop]),
                    halfvec_text(statics[start:stop]),
                    strict=True,
                )
                for i, vector, static in rows:
                    # Sessions of SESSION memories a few seconds apart, a day between sessions.
                    created = now - timedelta(
                        days=len(texts) // SESSION - i // SESSION, seconds=-5 * (i % SESSION)
                    )
                    content = texts[i]
                    copy.write_row(
                        (
                            space,
                            documents[i],
                            content,
                            hashlib.sha256(content.encode()).hexdigest(),
                            categories[i],
                            vector,
                            static,
                            writer,
                            created,
                            created,
                        )
                    )
        for table in ("documents", "memories"):
            conn.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        conn.execute("SET maintenance_work_mem = '2GB'")
        for definition in definitions.values():
            conn.execute(definition)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    print(
        f"loaded {len(texts)} memories in {time.perf_counter() - started:.0f} s (COPY, index builds, VACUUM ANALYZE)"
    )


class PgCpu:
    """CPU seconds of every process of one PostgreSQL cluster (postmaster and children), /proc."""

    def __init__(self, data_dir: Path) -> None:
        self.postmaster = (data_dir / "postmaster.pid").read_text().split()[0]
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _stat(pid: str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    def read(self) -> float:
        ticks = sum(int(v) for v in self._stat(self.postmaster)[11:15])
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = self._stat(entry.name)
                except OSError:
                    continue
                if fields[1] == self.postmaster:
                    ticks += int(fields[11]) + int(fields[12])
        return ticks / self.tick


@dataclass
class Round:
    """CPU seconds of each part, summed over a round's searches."""

    searches: int = 0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    statements: dict[str, float] = field(default_factory=dict)  # pg_stat_statements, ms summed
    fusion_plans: int = 0  # how many times the fusion statement was planned (pg_stat_statements)

    def per_search(self) -> dict[str, float]:
        out = {name: seconds * 1000 / self.searches for name, seconds in self.parts.items()}
        out.update({name: ms / self.searches for name, ms in self.statements.items()})
        return out


def statement_kind(query: str) -> str:
    """Which of a search's statements a pg_stat_statements row is."""
    if "ranked AS MATERIALIZED" in query:
        return "pg: fusion"
    if "ref_len" in query:
        return "pg: rows + ids"
    return "pg: other"


async def one_round(
    db: Database,
    ctx: SpaceContext,
    model: EmbeddingModel,
    static: StaticModel,
    questions: Sequence[str],
    pg: PgCpu,
    superuser: str,
) -> Round:
    spent = Round()
    soft = 0.0

    def timed_soft(*args: Any) -> Any:
        nonlocal soft
        started = time.process_time()
        try:
            return static.soft_matches(*args)
        finally:
            soft += time.process_time() - started

    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    for question in questions:
        t0 = time.process_time()
        vector = encode(model, [question], "query")[0].tolist()
        t1 = time.process_time()
        static_vector = static.vectors([question])[0]
        t2 = time.process_time()
        soft_before, pg_before = soft, pg.read()
        t2b = time.process_time()  # reading /proc is the harness's own cost, not the search's
        await search.search_memories(
            db,
            ctx,
            question,
            query_embedding=vector,
            static_embedding=static_vector,
            word_matches=timed_soft,
        )
        t3 = time.process_time()
        pg_after = pg.read()
        spent.searches += 1
        spent.parts["embed"] += t1 - t0
        spent.parts["static"] += t2 - t1
        spent.parts["soft"] += soft - soft_before
        spent.parts["store"] += t3 - t2b - (soft - soft_before)
        spent.parts["pg"] += pg_after - pg_before
    with psycopg.connect(superuser, autocommit=True) as conn:
        for query, total_ms, plan_ms, plans in conn.execute(
            "SELECT query, total_exec_time + total_plan_time, total_plan_time, plans FROM pg_stat_statements"
            " WHERE query NOT LIKE '%%pg_stat_statements%%'"
        ).fetchall():
            kind = statement_kind(query)
            spent.statements[kind] = spent.statements.get(kind, 0.0) + float(total_ms)
            spent.statements["pg: planning"] = spent.statements.get("pg: planning", 0.0) + float(plan_ms)
            if kind == "pg: fusion":
                spent.fusion_plans += int(plans)
    return spent


async def explain(
    server: BenchServer,
    bench_db: BenchDatabase,
    ctx: SpaceContext,
    model: EmbeddingModel,
    static: StaticModel,
    question: str,
) -> None:
    """Print the plans (EXPLAIN ANALYZE, BUFFERS, by ``auto_explain`` in the cluster's log) of one
    search's statements, run through the store's own call on a fresh connection.

    The search runs ``EXPLAIN_RUNS`` times and the last run's plans are printed: the driver prepares
    a statement after five runs on a connection and PostgreSQL settles on a generic plan after five
    custom ones, so the last run shows the cached plan every search of a warm connection uses (its
    conditions read ``$1``, not the values; the first run's custom plan also pays the new
    connection's catalog look-ups)."""
    settings = {
        "session_preload_libraries": "auto_explain",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_buffers": "on",
    }
    log = server.pg.pgdata / "log"  # the embedded server's log file
    seen = log.stat().st_size
    with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
    db = Database(bench_db.app_url, pool_size=1)
    try:
        for _ in range(EXPLAIN_RUNS):
            await search.search_memories(
                db,
                ctx,
                question,
                query_embedding=encode(model, [question], "query")[0].tolist(),
                static_embedding=static.vectors([question])[0],
                word_matches=static.soft_matches,
            )
    finally:
        await db.close()
        with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
            for name in settings:
                conn.execute(f"ALTER SYSTEM RESET {name}")
            conn.execute("SELECT pg_reload_conf()")
    print(f"\nEXPLAIN (ANALYZE, BUFFERS) of the search statements for: {question} (run {EXPLAIN_RUNS})")
    with log.open(errors="replace") as f:
        f.seek(seen)
        text = f.read()
    last: dict[str, list[str]] = {}
    for plan in text.split("LOG:  duration: ")[1:]:
        lines = plan.splitlines()
        kinds = [k for k in ("ranked", "ref_len") if any(k in line for line in lines[:3])]
        if kinds:  # not the transaction's settings
            last[kinds[0]] = lines
    for lines in last.values():
        print(f"\nstatement: {lines[0]}")
        for line in lines[2:]:
            if line.startswith("\t") or line.startswith(" "):
                print(line.strip("\t")[:180])


def print_table(size: int, rounds: list[Round]) -> None:
    rows = [r.per_search() for r in rounds]
    names = [*PARTS, *sorted({k for r in rows for k in r if k not in PARTS})]
    print(
        f"\n{size} memories, {rounds[0].searches} questions, {len(rounds)} rounds: CPU ms a search (median; min-max)"
    )
    for name in names:
        values = [r.get(name, 0.0) for r in rows]
        print(f"  {name:<16}{statistics.median(values):>8.2f}   ({min(values):.2f}-{max(values):.2f})")
    totals = [sum(r[p] for p in PARTS) for r in rows]
    server = [sum(r[p] for p in PARTS if p != "pg") for r in rows]
    print(f"  {'server part':<16}{statistics.median(server):>8.2f}   (embed + static + soft + store)")
    print(f"  {'total':<16}{statistics.median(totals):>8.2f}   ({min(totals):.2f}-{max(totals):.2f})")
    without = [t - r["embed"] for t, r in zip(totals, rows, strict=True)]
    print(f"  {'total - embed':<16}{statistics.median(without):>8.2f}   (what a cached query vector costs)")
    # Once a connection has its generic plan, a search plans nothing: a count near the searches'
    # means every search is planned again (custom plans: 3 ms a search at 100,000 memories).
    plans = ", ".join(str(r.fusion_plans) for r in rounds)
    print(f"  the fusion statement was planned {plans} times in {rounds[0].searches} searches a round")


async def measure(
    server: BenchServer, size: int, args: argparse.Namespace, model: EmbeddingModel, static: StaticModel
) -> None:
    texts, categories, questions = texts_and_questions(size, args.questions)
    cache = None if args.vectors is None else args.vectors.with_suffix(f".{size}.npz")
    vectors, _ = model_vectors(model, texts, questions, cache)
    statics = static.encode(texts)
    bench_db = server.database("cost")
    # As the embedded default marks them at bootstrap (docs/operations.md): full text uses its index.
    server.mark_leakproof(bench_db, LEAKPROOF_FUNCTIONS)
    superuser = server.superuser_dsn.replace("/memory_mcp?", f"/{bench_db.name}?")
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    db = Database(bench_db.app_url, pool_size=2)
    try:
        ctx = (await writer_contexts(db, [SPACE]))[SPACE]
        load(bench_db.owner_dsn, ctx.space.id, ctx.caller.user.id, texts, categories, vectors, statics)
        pg = PgCpu(server.pg.pgdata)
        await one_round(db, ctx, model, static, questions[:20], pg, superuser)  # warm-up
        rounds = [
            await one_round(db, ctx, model, static, questions, pg, superuser) for _ in range(args.rounds)
        ]
        print_table(size, rounds)
        if args.explain:
            await explain(server, bench_db, ctx, model, static, questions[0])
    finally:
        await db.close()
        server.drop(bench_db)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", default="300", help="space sizes, comma-separated")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--vectors", type=Path, metavar="FILE.npz", help="keep the model's vectors here (one file a size)"
    )
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) the last fusion statement"
    )
    args = parser.parse_args()
    print(machine())
    from memory_mcp.core.settings import Settings

    settings = Settings()
    # As the server loads it: a question's pass through ONNX Runtime (its int8 copy unless the
    # settings turn it off) once its files are ready.
    model = load_model(None, onnx_roots=onnx_roots(settings), int8_queries=settings.embedding_int8_queries)
    model.short_runtime_settled.wait()
    print(f"a question's forward pass runs on {model.short_runtime}")
    static = load_static_model(settings.static_embedding_cache_dir)
    with bench_server(SERVER_SETTINGS) as server:
        for size in (int(s) for s in args.memories.split(",")):
            asyncio.run(measure(server, size, args, model, static))


if __name__ == "__main__":
    main()
