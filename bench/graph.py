"""What a page of the memory-graph widget costs: ``graph.space_graph`` (fetch-graph-data's query).

    python -m bench.graph [--memories 2000] [--runs 20]

Fills one space of a throw-away embedded PostgreSQL with ``--memories`` memories whose vectors are
drawn around 40 topics (so that some pairs are related and most are not), every tenth one a new
version of the one before, then prints per page size the median milliseconds of one page and what
it holds: nodes, links by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time

from memory_mcp.store import graph, memories
from memory_mcp.store.db import Database

from .common import bench_server, machine, median, writer_contexts

DIM = 384


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


async def measure(db: Database, count: int, runs: int) -> None:
    ctx = (await writer_contexts(db, ["graph"]))["graph"]
    rng = random.Random(7)
    topics = [_unit([rng.gauss(0, 1) for _ in range(DIM)]) for _ in range(40)]
    started = time.perf_counter()
    previous = None
    for i in range(count):
        topic = topics[i % len(topics)]
        vector = _unit([t + rng.gauss(0, 0.02) for t in topic])
        supersedes = previous if i % 10 == 9 and previous is not None else None
        saved = await memories.save_memory(
            db, ctx, f"Memory {i} about topic {i % len(topics)}.", None, vector, supersedes_id=supersedes
        )
        previous = saved.memory.id
    print(f"filled {count} memories in {time.perf_counter() - started:.1f} s")
    await graph.space_graph(db, ctx)  # warm the pool and the plans
    for limit in (50, 100, 200):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            page = await graph.space_graph(db, ctx, 1, limit)
            times.append(time.perf_counter() - t0)
        kinds = {k: sum(1 for e in page.edges if e.kind == k) for k in ("source", "version", "related")}
        nodes = len(page.documents) + len(page.memories)
        print(
            f"limit {limit:3d}: {median(times) * 1000:6.1f} ms median of {runs}; {nodes} nodes, "
            f"links {kinds['source']} source, {kinds['version']} version, {kinds['related']} related"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with bench_server() as server:
        database = server.database("graph")

        async def run() -> None:
            db = Database(database.app_url, pool_size=2)
            try:
                await measure(db, args.memories, args.runs)
            finally:
                await db.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
