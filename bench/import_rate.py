"""Import rate: memories/s of `memory-mcp import`'s work (check every line, embed in batches, write).

Builds an export-shaped JSONL of distinct ~20-word memories, imports it into an empty space of a
throw-away embedded PostgreSQL and prints memories/s, with the share of the time spent embedding.
A second run of the same file shows what a re-run costs (it adds nothing).

    python bench/import_rate.py                  # 2,000 memories, batches of 64
    python bench/import_rate.py --count 5000 --batch-size 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import UTC, datetime, timedelta

from bench.common import bench_server, machine
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import make_embedder
from memory_mcp.store import spaces, transfer
from memory_mcp.store.db import Database

_WORDS = [
    "team",
    "deploy",
    "window",
    "billing",
    "service",
    "owner",
    "prefers",
    "tabs",
    "database",
    "backup",
    "weekly",
    "review",
    "release",
    "incident",
    "runbook",
    "customer",
    "contract",
    "renewal",
    "budget",
    "quarter",
    "roadmap",
    "design",
    "decision",
    "api",
    "limit",
]


START = datetime(2026, 1, 1, tzinfo=UTC)


def export_lines(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        record = {
            "type": "memory",
            "id": f"m{i}",
            "content": f"Fact {i}: " + " ".join(rng.choices(_WORDS, k=20)),
            "category": rng.choice(["process", "people", "preferences", None]),
            "status": "live",
            "version": 1,
            "createdAt": (START + timedelta(milliseconds=i)).isoformat(),
            "createdBy": {"name": "ada", "email": "ada@example.com", "displayName": "Ada"},
        }
        lines.append(json.dumps(record))
    return lines


async def run(args: argparse.Namespace, app_url: str) -> None:
    db = Database(app_url, pool_size=2)
    embedder = await make_embedder(Settings(embedder="local"))
    embed_s = 0.0

    async def timed_embed(texts: list[str]) -> list[list[float]]:
        nonlocal embed_s
        started = time.perf_counter()
        try:
            return await embedder.embed(texts)
        finally:
            embed_s += time.perf_counter() - started

    try:
        space = (await spaces.upsert_space(db, "bench", "Bench")).space
        await embedder.embed(["warm up the model"])
        lines = export_lines(args.count)
        started = time.perf_counter()
        entries, problems = transfer.check_lines(lines)
        check_s = time.perf_counter() - started
        assert not problems, problems[:3]
        started = time.perf_counter()
        report = await transfer.import_entries(
            db, space.id, space.key, entries, timed_embed, batch_size=args.batch_size
        )
        write_s = time.perf_counter() - started
        total = check_s + write_s
        assert report.imported == args.count, report.as_dict()
        print(f"machine: {machine()}")
        print(f"model: {embedder.name}, {args.count} memories, batches of {args.batch_size}")
        print(
            f"import: {args.count / total:.0f} memories/s ({total:.2f} s: check {check_s:.2f} s, "
            f"embedding {embed_s:.2f} s = {100 * embed_s / total:.0f}%, "
            f"writing {write_s - embed_s:.2f} s = {100 * (write_s - embed_s) / total:.0f}%)"
        )
        print(f"embedding alone: {args.count / embed_s:.0f} memories/s")
        started = time.perf_counter()
        again = await transfer.import_entries(db, space.id, space.key, entries, timed_embed)
        rerun_s = time.perf_counter() - started
        assert again.imported == 0 and again.already == args.count, again.as_dict()
        print(f"re-run: {args.count / rerun_s:.0f} lines/s, nothing added")
    finally:
        await embedder.aclose()
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=transfer.IMPORT_BATCH)
    args = parser.parse_args()
    with bench_server() as server:
        database = server.database("import")
        asyncio.run(run(args, database.app_url))


if __name__ == "__main__":
    main()
