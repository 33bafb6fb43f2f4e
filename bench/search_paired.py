"""A change to the search statement, paired: the store's search module as it is and as it was at a
git revision, on one loaded space, same questions, blocks alternated.

Seeds one space as ``bench.search_cost`` does (the generated dataset's texts, real vectors, COPY,
``ANALYZE``), loads ``store/src/memory_mcp/store/search.py`` of ``--against`` beside the working
tree's, each with its own connection, and asks every question through both:

- **the same results**: per question, whether both return the same memories with the same scores
  (to nine places), and the same memories in the same order;
- **CPU a search**: this process's CPU plus the connection's backend CPU (``/proc/PID/schedstat``,
  nanoseconds), for blocks of 20 questions alternated between the two (which goes first alternates
  too), after a warm-up of 40; the median of each side, and per block the difference, its median,
  its mean and in how many blocks the working tree was cheaper. A machine doing other work moves
  both sides of a block alike, so the paired figures are the ones to read.

The questions' vectors are computed once, before the blocks: embedding is not part of the figure.

    python -m bench.search_paired --against HEAD~1 --memories 100000 --vectors /tmp/search_cost.npz
    python -m bench.search_paired --against main --memories 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import search_cost
from bench.common import bench_server, machine, writer_contexts
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.model import load_model
from memory_mcp.embedder.static import static_model_for
from memory_mcp.store import search
from memory_mcp.store.db import Database

SEARCH_MODULE = "store/src/memory_mcp/store/search.py"
BLOCK = 20
WARM_UP = 40


def module_at(revision: str) -> ModuleType:
    """The store's search module as it was at ``revision``, importable beside today's (its relative
    imports resolve in today's package)."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{SEARCH_MODULE}"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "search_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("memory_mcp.store.search_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def backend_pid(db: Database, space: Any) -> int:
    async with db.driver_transaction([space]) as conn:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return int(row[0])


def backend_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


async def measure(size: int, args: argparse.Namespace) -> None:
    settings = Settings()
    model = load_model(
        None, onnx_roots=search_cost.onnx_roots(settings), int8_queries=settings.embedding_int8_queries
    )
    model.short_runtime_settled.wait()
    static = await static_model_for(settings)
    texts, categories, questions = search_cost.texts_and_questions(size, args.questions)
    cache = None if args.vectors is None else args.vectors.with_suffix(f".{size}.npz")
    vectors, asked = search_cost.model_vectors(model, texts, questions, cache)
    statics = static.encode(texts)
    asked_static = static.vectors(questions)
    modules = {"now": search, "then": module_at(args.against)}
    with bench_server() as server:
        bench_db = server.database("paired")
        server.mark_leakproof(bench_db, search_cost.LEAKPROOF_FUNCTIONS)
        dbs = {name: Database(bench_db.app_url, pool_size=1) for name in modules}
        try:
            ctx = (await writer_contexts(dbs["now"], [search_cost.SPACE]))[search_cost.SPACE]
            search_cost.load(
                bench_db.owner_dsn, ctx.space.id, ctx.caller.user.id, texts, categories, vectors, statics
            )
            pids = {name: await backend_pid(db, ctx.space.id) for name, db in dbs.items()}
            results: dict[str, dict[int, list[tuple[Any, float]]]] = {name: {} for name in modules}

            async def block(name: str, numbers: range) -> float:
                started, backend = time.process_time(), backend_ns(pids[name])
                for n in numbers:
                    found = await modules[name].search_memories(
                        dbs[name],
                        ctx,
                        questions[n],
                        query_embedding=asked[n].tolist(),
                        static_embedding=asked_static[n],
                        word_matches=static.soft_matches,
                    )
                    results[name][n] = [(h.memory.id, round(h.score, 9)) for h in found.hits]
                spent = (time.process_time() - started) * 1000 + (backend_ns(pids[name]) - backend) / 1e6
                return spent / len(numbers)

            for name in modules:
                await block(name, range(min(WARM_UP, len(questions))))
            costs: dict[str, list[float]] = {name: [] for name in modules}
            blocks = [range(i, min(i + BLOCK, len(questions))) for i in range(0, len(questions), BLOCK)]
            for round_ in range(args.rounds):
                for i, numbers in enumerate(blocks):
                    for name in ("now", "then") if (i + round_) % 2 == 0 else ("then", "now"):
                        costs[name].append(await block(name, numbers))
        finally:
            for db in dbs.values():
                await db.close()
            server.drop(bench_db)
    same = sum(results["now"][n] == results["then"][n] for n in results["now"])
    order = sum(
        [i for i, _ in results["now"][n]] == [i for i, _ in results["then"][n]] for n in results["now"]
    )
    deltas = [now - then for now, then in zip(costs["now"], costs["then"], strict=True)]
    print(f"\n{size} memories, {len(questions)} questions, {args.rounds} rounds of {len(blocks)} blocks")
    print(f"  the same hits and scores: {same} of {len(questions)}; the same memories in order: {order}")
    print(
        f"  CPU ms a search (this process + its backend), median of blocks: {args.against} "
        f"{statistics.median(costs['then']):.2f}, working tree {statistics.median(costs['now']):.2f}"
    )
    print(
        f"  paired, per block: median {statistics.median(deltas):+.2f}, mean {statistics.mean(deltas):+.2f}; "
        f"the working tree cheaper in {sum(d < 0 for d in deltas)} of {len(deltas)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", default="HEAD", help="the git revision to compare with")
    parser.add_argument("--memories", default="300", help="space sizes, comma-separated")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--vectors", type=Path, metavar="FILE.npz", help="keep the model's vectors here (one file a size)"
    )
    args = parser.parse_args()
    print(machine())
    for size in (int(s) for s in args.memories.split(",")):
        asyncio.run(measure(size, args))


if __name__ == "__main__":
    main()
