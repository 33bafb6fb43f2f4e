"""Import from another tool: memories/s and peak memory of `import --from chatgpt` on a large export.

Generates a ChatGPT data export (a zip holding conversations.json, in the shape of the real one:
message nodes linked by parent/children, the branch to `current_node`) of N conversations of a few
turns each, parses it (every turn checked for credentials, user turns cut into memories) and
imports it into an empty space of a throw-away embedded PostgreSQL with the real model. Prints
conversations/s and memories/s of the parse, memories/s of the whole import, the share spent
embedding, and the process's peak RSS after each step (the model is loaded after the parse, so the
first figure is the parser's own). A second run shows what a re-run costs.

    python bench/import_formats.py                        # 2,000 conversations, 3 user turns each
    python bench/import_formats.py --conversations 5000 --turns 4
    python bench/import_formats.py --parse-only          # the parser alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import resource
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench.common import bench_server, machine
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import make_embedder
from memory_mcp.store import importers, spaces, transfer
from memory_mcp.store.db import Database

_SUBJECTS = ["I", "My partner", "Our team", "My sister", "The landlord", "My manager", "We"]
_VERBS = ["prefer", "need", "want to plan", "keep forgetting", "decided on", "are comparing", "booked"]
_THINGS = [
    "a week in Lisbon",
    "the quarterly budget",
    "vegetarian recipes",
    "a standing desk",
    "the heat pump quote",
    "train tickets to Porto",
    "the garden irrigation",
    "a running plan",
    "the kitchen renovation",
    "a reading list",
]
_DETAILS = [
    "before the end of the month",
    "under 150 euros",
    "for two people",
    "on Friday mornings",
    "without a car",
    "with the old laptop",
    "after the school holidays",
]
_REPLIES = [
    "Here are a few options to consider, with their costs and trade-offs.",
    "That sounds like a good plan. A few things to check first.",
    "Sure. I would start with the simplest version and adjust from there.",
]


def _statement(rng: random.Random, n: int) -> str:
    sentences = [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} {rng.choice(_DETAILS)}."
        for _ in range(rng.randint(1, 3))
    ]
    return " ".join(sentences) + f" (note {n})"


def conversation(index: int, turns: int, rng: random.Random) -> dict[str, Any]:
    start = 1_700_000_000 + index * 3600
    mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    parent = "root"
    for t in range(turns * 2):
        node_id = f"c{index}-m{t}"
        role = "user" if t % 2 == 0 else "assistant"
        text = _statement(rng, index * 100 + t) if role == "user" else rng.choice(_REPLIES)
        mapping[node_id] = {
            "id": node_id,
            "parent": parent,
            "children": [],
            "message": {
                "id": node_id,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": start + t * 30,
                "update_time": None,
                "content": {"content_type": "text", "parts": [text]},
                "status": "finished_successfully",
                "metadata": {},
                "recipient": "all",
            },
        }
        mapping[parent]["children"].append(node_id)
        parent = node_id
    return {
        "title": f"Conversation {index}: {rng.choice(_THINGS)}",
        "create_time": start,
        "update_time": start + turns * 60,
        "mapping": mapping,
        "current_node": parent,
        "conversation_id": f"bench-{index:06d}",
        "id": f"bench-{index:06d}",
    }


def write_export(path: Path, conversations: int, turns: int) -> int:
    rng = random.Random(0)
    data = [conversation(i, turns, rng) for i in range(conversations)]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", json.dumps(data))
        archive.writestr("user.json", "{}")
    return path.stat().st_size


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


async def run(args: argparse.Namespace, app_url: str, export: Path) -> None:
    base_rss = peak_rss_mb()
    started = time.perf_counter()
    parsed = importers.parse("chatgpt", export)
    parse_s = time.perf_counter() - started
    parse_rss = peak_rss_mb()
    memories = sum(e.kind == "memory" for e in parsed.entries)
    documents = sum(e.kind == "document" for e in parsed.entries)
    assert documents == args.conversations, (documents, parsed.skipped[:3])
    print(f"machine: {machine()}")
    print(
        f"input: {args.conversations} conversations, {args.turns} user turns each, zip of "
        f"{args.zip_bytes / 1e6:.1f} MB"
    )
    print(
        f"parse: {parse_s:.2f} s = {args.conversations / parse_s:.0f} conversations/s, "
        f"{memories / parse_s:.0f} memories/s; peak RSS {parse_rss:.0f} MB ({base_rss:.0f} MB before)",
        flush=True,
    )
    if args.parse_only:
        return

    db = Database(app_url, pool_size=2)
    # A bulk import waits for the model as long as it takes (a busy machine is not an outage).
    embedder = await make_embedder(Settings(embedder="local", embedder_timeout_s=600))
    embed_s = 0.0

    async def timed_embed(texts: list[str]) -> list[list[float]]:
        nonlocal embed_s
        begun = time.perf_counter()
        try:
            return await embedder.embed(texts)
        finally:
            embed_s += time.perf_counter() - begun

    try:
        space = (await spaces.upsert_space(db, "bench", "Bench")).space
        await embedder.embed(["warm up the model"])
        started = time.perf_counter()
        report = await transfer.import_entries(db, space.id, space.key, parsed.entries, timed_embed)
        write_s = time.perf_counter() - started
        assert report.imported == memories, report.as_dict()
        total = parse_s + write_s
        print(
            f"import: {memories} memories, {documents} documents in {total:.1f} s = {memories / total:.0f} "
            f"memories/s (parse {parse_s:.1f} s, embedding {embed_s:.1f} s = {100 * embed_s / total:.0f}%, "
            f"writing {write_s - embed_s:.1f} s); peak RSS {peak_rss_mb():.0f} MB with the model"
        )
        started = time.perf_counter()
        again = await transfer.import_entries(
            db, space.id, space.key, importers.parse("chatgpt", export).entries, timed_embed
        )
        rerun_s = time.perf_counter() - started
        assert again.imported == 0 and again.already == memories + documents, again.as_dict()
        print(f"re-run: {rerun_s:.1f} s (parse included), nothing added")
    finally:
        await embedder.aclose()
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=3, help="user turns per conversation")
    parser.add_argument("--parse-only", action="store_true", help="stop after the parse (no model)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, bench_server() as server:
        export = Path(folder) / "chatgpt-export.zip"
        # Written by a child process, so that this one's peak RSS is the import's alone.
        writer = multiprocessing.get_context("fork").Process(
            target=write_export, args=(export, args.conversations, args.turns)
        )
        writer.start()
        writer.join()
        args.zip_bytes = export.stat().st_size
        database = server.database("import")
        asyncio.run(run(args, database.app_url, export))


if __name__ == "__main__":
    main()
