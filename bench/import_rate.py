"""Import rate: memories/s of `memory-mcp import`'s work (check every line, embed in batches, write).

Builds an export-shaped JSONL of distinct memories (generated ~20-word facts, or the turns of the
public LoCoMo conversations with ``--locomo``), imports it into an empty space of a throw-away
embedded PostgreSQL and prints memories/s, with the share of the time spent embedding. In the same
run it encodes the same texts with the plain model, nothing else (the rate the model allows), in fp32
and in the number format the import runs in (bf16 where the start-up probe chose it), and prints the
import's rate as a ratio of each. A second run of the same file shows what a re-run
costs (it adds nothing).

    python -m bench.import_rate                  # 2,000 generated memories, batches of 64
    python -m bench.import_rate --locomo /path/to/locomo10.zip --count 2000
    python -m bench.import_rate --count 5000 --batch-size 128

With ``--cli`` it times ``memory-mcp import`` end to end instead, process start included, into a
data dir that has served before (its database made, the machine's cache holding the static table
and the precision verdict), against plain fp32 encoding of the same texts in the same run:

    python -m bench.import_rate --cli --locomo /path/to/locomo10.zip --count 2000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import bench_server, machine, plain_encoding_seconds
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import BulkPolicy, embed_bulk, make_embedder
from memory_mcp.embedder.static import load_static_model
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


def export_lines(count: int, seed: int = 0, texts: list[str] | None = None) -> list[str]:
    """``count`` export lines: the given ``texts`` (distinct), or generated facts."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        record = {
            "type": "memory",
            "id": f"m{i}",
            "content": texts[i] if texts is not None else f"Fact {i}: " + " ".join(rng.choices(_WORDS, k=20)),
            "category": rng.choice(["process", "people", "preferences", None]),
            "status": "live",
            "version": 1,
            "createdAt": (START + timedelta(milliseconds=i)).isoformat(),
            "createdBy": {"name": "ada", "email": "ada@example.com", "displayName": "Ada"},
        }
        lines.append(json.dumps(record))
    return lines


def locomo_texts(path: str, count: int) -> list[str]:
    """The first ``count`` distinct turns of the LoCoMo conversations, as bench/locomo.py saves them."""
    from bench.locomo import load_locomo

    seen: dict[str, None] = {}
    for conversation in load_locomo(Path(path).expanduser()):
        for turn in conversation.turns:
            seen.setdefault(turn.text, None)
    texts = list(seen)[:count]
    if len(texts) < count:
        raise SystemExit(f"LoCoMo has only {len(texts)} distinct turns")
    return texts


async def run(args: argparse.Namespace, app_url: str) -> None:
    db = Database(app_url, pool_size=2)
    settings = Settings(embedder="local")
    embedder = await make_embedder(settings)
    static = load_static_model(settings.static_embedding_cache_dir) if settings.static_embedding else None
    policy = BulkPolicy.from_settings(settings)
    embed_s = 0.0

    async def timed_embed(texts: list[str]) -> list[list[float]]:
        nonlocal embed_s
        started = time.perf_counter()
        try:
            return await embed_bulk(embedder, texts, policy)
        finally:
            embed_s += time.perf_counter() - started

    try:
        space = (await spaces.upsert_space(db, "bench", "Bench")).space
        await embedder.embed(["warm up the model"])
        texts = locomo_texts(args.locomo, args.count) if args.locomo else None
        lines = export_lines(args.count, texts=texts)
        precision = getattr(getattr(embedder, "model", None), "precision", None)
        mode = precision.mode if precision else "fp32"
        modes = ["fp32"] if mode == "fp32" else ["fp32", mode]
        contents = [json.loads(line)["content"] for line in lines]

        def plain() -> dict[str, float]:
            return plain_encoding_seconds(contents, args.batch_size, modes)

        # Timed before and after the import, and averaged: on shared cores the machine's speed
        # drifts within a run, and one side of the import alone would carry that drift.
        plain_before = plain()
        started = time.perf_counter()
        entries, problems = transfer.check_lines(lines)
        check_s = time.perf_counter() - started
        assert not problems, problems[:3]
        profiler = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        report = await transfer.import_entries(
            db,
            space.id,
            space.key,
            entries,
            timed_embed,
            batch_size=args.batch_size,
            static=static.vectors if static is not None else None,
        )
        if profiler is not None:
            profiler.disable()
        write_s = time.perf_counter() - started
        plain_after = plain()
        total = check_s + write_s
        assert report.imported == args.count, report.as_dict()
        chars = sum(len(c) for c in contents) / len(contents)
        print(f"machine: {machine()}")
        print(f"cpu flags (vector units): {cpu_vector_flags()}")
        print(
            f"model: {embedder.name} ({mode}), {args.count} memories "
            f"({'LoCoMo turns' if args.locomo else 'generated facts'}, {chars:.0f} characters on average), "
            f"batches of {args.batch_size}, static vectors {'on' if static else 'off'}"
        )
        rate = args.count / total
        ratios = []
        for name in modes:
            plain_rate = args.count / ((plain_before[name] + plain_after[name]) / 2)
            ratios.append(f"{rate / plain_rate:.2f}x plain {name}")
            print(
                f"plain {name} encoding of the same texts: {plain_rate:.1f}/s ({plain_before[name]:.2f} s "
                f"before the import, {plain_after[name]:.2f} s after)"
            )
        print(
            f"import: {rate:.1f} memories/s = {', '.join(ratios)} encoding ({total:.2f} s: "
            f"check {check_s:.2f} s, embedding {embed_s:.2f} s = {100 * embed_s / total:.0f}%, "
            f"the rest {write_s - embed_s:.2f} s = {100 * (write_s - embed_s) / total:.0f}%)"
        )
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        started = time.perf_counter()
        again = await transfer.import_entries(db, space.id, space.key, entries, timed_embed)
        rerun_s = time.perf_counter() - started
        assert again.imported == 0 and again.already == args.count, again.as_dict()
        print(f"re-run: {args.count / rerun_s:.0f} lines/s, nothing added")
    finally:
        await embedder.aclose()
        await db.close()


def cpu_vector_flags() -> str:
    """The CPU's vector and matrix extensions (what decides whether bf16 pays), from /proc/cpuinfo."""
    try:
        flags = next(
            line.split(":", 1)[1].split()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        )
    except (OSError, StopIteration):
        return "unknown"
    wanted = [f for f in flags if f.startswith(("avx", "amx", "fma")) or f in ("f16c", "sse4_2")]
    return " ".join(wanted) or "none of avx/amx"


def run_cli(args: argparse.Namespace) -> None:
    """``memory-mcp import`` of the lines as a person runs it, timed from process start to exit."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from bench.common import static_table_dir
    from bench.first_start import READY, Serve

    texts = locomo_texts(args.locomo, args.count) if args.locomo else None
    lines = export_lines(args.count, texts=texts)
    contents = [json.loads(line)["content"] for line in lines]
    work = Path(tempfile.mkdtemp(prefix="memory-mcp-bench-import-"))
    cache, data_dir, source = work / "cache", work / "data", work / "import.jsonl"
    try:
        shared = static_table_dir()
        cache.mkdir()
        for folder in shared.glob("static-embedding*") if shared is not None else ():
            shutil.copytree(folder, cache / folder.name)
        env = {k: v for k, v in os.environ.items() if k != "MEMORY_MCP_STATIC_EMBEDDING_DIR"}
        env["MEMORY_MCP_CACHE_DIR"] = str(cache)
        command = [sys.executable, "-m", "memory_mcp.cli"]

        def cli(*arguments: str) -> float:
            started = time.perf_counter()
            done = subprocess.run([*command, *arguments], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            return time.perf_counter() - started

        # The data dir has served before (its database made, the precision verdict kept in the
        # machine's cache), and holds the space.
        served = Serve.start(data_dir, cache, work / "serve.log")
        served.wait_for(READY)
        served.stop()
        cli("space", "create", "bench", "--data-dir", str(data_dir))
        source.write_text("".join(line + "\n" for line in lines))
        verdicts = (
            json.loads((cache / "precision.json").read_text()) if (cache / "precision.json").exists() else {}
        )
        mode = next(iter(verdicts.values()), {}).get("mode", "fp32")
        modes = ["fp32"] if mode == "fp32" else ["fp32", mode]
        plain_before = plain_encoding_seconds(contents, args.batch_size, modes)
        took = cli("import", str(source), "--space", "bench", "--data-dir", str(data_dir))
        plain_after = plain_encoding_seconds(contents, args.batch_size, modes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"memory-mcp import of {args.count} {'LoCoMo turns' if args.locomo else 'generated facts'}, "
        f"end to end (process start to exit), the model in {mode}: {took:.1f} s = {args.count / took:.1f}/s"
    )
    for name in modes:
        plain_s = (plain_before[name] + plain_after[name]) / 2
        print(
            f"plain {name} encoding of the same texts: {args.count / plain_s:.1f}/s ({plain_before[name]:.1f} s "
            f"before, {plain_after[name]:.1f} s after); import = {plain_s / took:.2f}x plain {name}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=transfer.IMPORT_BATCH)
    parser.add_argument("--locomo", metavar="PATH", help="import LoCoMo turns (locomo10.zip) instead")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the import (the event loop's thread)"
    )
    parser.add_argument(
        "--cli", action="store_true", help="time `memory-mcp import` end to end, process start included"
    )
    args = parser.parse_args()
    if args.cli:
        run_cli(args)
        return
    with bench_server() as server:
        database = server.database("import")
        asyncio.run(run(args, database.app_url))


if __name__ == "__main__":
    main()
