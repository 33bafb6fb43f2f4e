"""Saves retried by clients: duplicates with and without ``idempotencyKey``, and what a key costs.

Two ``memory-mcp serve`` processes on one database (two pods). Eight clients save facts over REST;
each save "times out": a random 0-30 ms after sending it the client sends it again, reworded as a
model retrying would ("... (retried)"), to the other server, while the first is still in flight.
Every save means one memory, so every row beyond the saves made is a duplicate. Then the p50 of a
save with a key against one without, one client, alternating on one server.

    python -m bench.lifecycle [--saves 2000] [--control 400] [--latency 200]
    python -m bench.lifecycle --store-only 300     # the store's save alone, with and without a key
    python -m bench.lifecycle --webhooks 20        # saves at 50/s: webhooks off, then on
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
import psycopg

from bench.common import bench_server, machine, percentile, serve_process
from bench.ingest import wait_ready
from memory_mcp.store import apikeys, memories, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database

CLIENTS = 8


SPACES = ("retries", "control")


async def _key(url: str) -> str:
    """A Writer's key to both spaces."""
    db = Database(url, pool_size=2)
    try:
        for space in SPACES:
            await spaces.upsert_space(db, space, space.title())
        await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER, True)
        grants = [GrantSpec(space, Access.READ_WRITE) for space in SPACES]
        _, key = await apikeys.create_key(db, "bench-key", "bench", grants, SPACES[0])
        return key
    finally:
        await db.close()


@contextmanager
def _serve(database_url: str) -> Iterator[str]:
    """A ``memory-mcp serve`` process on ``database_url``; yields its base URL."""
    with serve_process("memory-mcp-lifecycle-", extra_args=("--database-url", database_url)) as (
        server,
        _,
        port,
    ):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, server)
        yield base


def _rows(dsn: str, space: str) -> int:
    """Every memory row of the space, versions included (as the superuser: past row-level security)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memories m JOIN spaces s ON s.id = m.space_id WHERE s.key = %s", (space,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def retried_saves(bases: list[str], key: str, space: str, saves: int, keyed: bool) -> float:
    """``saves`` saves by CLIENTS clients, each sent twice (the retry to the other server)."""
    auth = {"Authorization": f"Bearer {key}"}
    per_client = saves // CLIENTS
    rng = random.Random(7)

    async def client(n: int, http: list[httpx2.AsyncClient]) -> None:
        for i in range(per_client):
            fact = (
                f"Build agent {n}-{i} ({uuid.uuid4().hex[:6]}) runs the {space} nightly job on rack {i % 17}."
            )
            extra = {"containerTag": space, **({"idempotencyKey": f"{n}-{i}"} if keyed else {})}
            first = asyncio.create_task(http[i % 2].post("/v1/memories", json={"content": fact, **extra}))
            await asyncio.sleep(rng.uniform(0, 0.03))  # the client's timeout: it retries, reworded
            retry = http[(i + 1) % 2].post("/v1/memories", json={"content": f"{fact} (retried)", **extra})
            for answer in await asyncio.gather(first, retry):
                answer.raise_for_status()

    started = time.perf_counter()
    clients = [
        [httpx2.AsyncClient(base_url=b, headers=auth, timeout=120) for b in bases] for _ in range(CLIENTS)
    ]
    try:
        await asyncio.gather(*(client(n, clients[n]) for n in range(CLIENTS)))
    finally:
        for pair in clients:
            for c in pair:
                await c.aclose()
    return time.perf_counter() - started


async def latency(base: str, key: str, n: int) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    keyed: list[float] = []
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        for i in range(n):
            for times, extra in ((plain, {}), (keyed, {"idempotencyKey": f"lat-{i}"})):
                body = {
                    "content": f"Latency probe {i} {uuid.uuid4().hex[:8]}: the {len(times)}th fact.",
                    **extra,
                }
                started = time.perf_counter()
                (await http.post("/v1/memories", json=body)).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
    return plain, keyed


async def store_latency(url: str, n: int) -> tuple[list[float], list[float]]:
    """The store's save alone (no HTTP, no embedding), with and without a key, alternating."""
    from memory_mcp.store import identity

    key = await _key(url)
    db = Database(url, pool_size=2)
    plain: list[float] = []
    keyed: list[float] = []
    try:
        ctx = identity.resolve_space(await identity.authenticate(db, key), "control")
        for i in range(n):
            for times, idem in ((plain, None), (keyed, f"store-{i}")):
                started = time.perf_counter()
                await memories.save_memory(
                    db, ctx, f"Store probe {i} {uuid.uuid4().hex[:8]}.", idempotency_key=idem
                )
                times.append((time.perf_counter() - started) * 1000)
    finally:
        await db.close()
    return plain, keyed


async def webhook_latency(
    url: str, seconds: float, rate: float, hooked: bool
) -> tuple[list[float], list[float]]:
    """Saves at ``rate`` a second for ``seconds`` (the store's save, no embedding); with ``hooked``,
    a webhook on the space, delivered by the server's loop (``deliver_next`` every 0.5 s) to a
    loopback receiver. Returns the saves' latencies and each event's commit-to-receipt delay (ms)."""
    import threading
    from datetime import UTC, datetime
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from memory_mcp.server.app import WEBHOOK_POLL_INTERVAL_S
    from memory_mcp.server.webhook_sender import sender
    from memory_mcp.store import identity, webhooks

    received: dict[str, float] = {}
    main_loop = asyncio.get_running_loop()
    all_in = asyncio.Event()
    expected = [-1]

    def check() -> None:
        if len(received) >= expected[0] >= 0:
            all_in.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            received[body["data"]["id"]] = time.time()
            main_loop.call_soon_threadsafe(check)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    key = await _key(url)
    db = Database(url, pool_size=4)
    saved: dict[str, float] = {}
    save_ms: list[float] = []
    stop = asyncio.Event()

    async def deliver() -> None:
        send = sender(allow_loopback=True)
        while not stop.is_set():
            await asyncio.sleep(WEBHOOK_POLL_INTERVAL_S)
            while await webhooks.deliver_next(db, send, datetime.now(UTC)):
                pass

    try:
        ctx = identity.resolve_space(await identity.authenticate(db, key), "retries")
        loop = None
        if hooked:
            await webhooks.add_webhook(
                db, "retries", f"http://127.0.0.1:{http.server_address[1]}/hook", "bench"
            )
            loop = asyncio.create_task(deliver())
        started = time.perf_counter()
        for i in range(int(seconds * rate)):
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            t0 = time.perf_counter()
            result = await memories.save_memory(db, ctx, f"Webhook probe {i} {uuid.uuid4().hex[:8]}.")
            save_ms.append((time.perf_counter() - t0) * 1000)
            saved[str(result.memory.id)] = time.time()
        if loop is not None:
            expected[0] = len(saved)
            check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), 60)
            stop.set()
            await loop
    finally:
        await db.close()
        http.shutdown()
    delays = [(received[m] - t) * 1000 for m, t in saved.items() if m in received]
    return save_ms, delays


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--saves", type=int, default=2000, help="saves with keys (0: none)")
    parser.add_argument("--control", type=int, default=400, help="saves without keys (0: none)")
    parser.add_argument("--latency", type=int, default=200, help="saves of each kind timed")
    parser.add_argument("--store-only", type=int, default=0, help="only time N store saves of each kind")
    parser.add_argument(
        "--webhooks",
        type=float,
        default=0,
        help="only: saves at 50/s for this many seconds, webhooks off then on",
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.webhooks:
        with bench_server() as pg:
            off, _ = asyncio.run(webhook_latency(pg.database("off").app_url, args.webhooks, 50, hooked=False))
            on, delays = asyncio.run(
                webhook_latency(pg.database("on").app_url, args.webhooks, 50, hooked=True)
            )
        print(
            f"webhooks, saves at 50/s for {args.webhooks:.0f} s (store save, no embedding): save p50 "
            f"{statistics.median(off):.2f} ms off, {statistics.median(on):.2f} ms on; {len(delays)} of {len(on)} "
            f"events received, commit to receipt p50 {statistics.median(delays):.0f} ms, "
            f"p99 {percentile(delays, 99):.0f} ms"
        )
        return
    if args.store_only:
        with bench_server() as pg:
            plain, keyed = asyncio.run(store_latency(pg.database("store").app_url, args.store_only))
        print(
            f"store save p50, {args.store_only} of each alternating: plain {statistics.median(plain):.2f} ms, "
            f"with idempotencyKey {statistics.median(keyed):.2f} ms"
        )
        return
    with bench_server() as pg:
        database = pg.database("lifecycle")
        key = asyncio.run(_key(database.app_url))
        every_row = pg.superuser_dsn.replace("/memory_mcp?", f"/{database.name}?")
        with _serve(database.owner_url) as a, _serve(database.owner_url) as b:
            bases = [a, b]
            if args.saves:
                elapsed = asyncio.run(retried_saves(bases, key, "retries", args.saves, keyed=True))
                rows = _rows(every_row, "retries")
                print(
                    f"with idempotencyKey: {args.saves} saves, each retried once on the other server, "
                    f"{CLIENTS} clients, 2 servers: {rows} memories stored, {rows - args.saves} duplicates "
                    f"({elapsed:.0f} s, {2 * args.saves / elapsed:.1f} requests/s)"
                )
            if args.control:
                elapsed = asyncio.run(retried_saves(bases, key, "control", args.control, keyed=False))
                rows = _rows(every_row, "control")
                print(
                    f"without a key: {args.control} saves retried the same way: {rows} memories stored, "
                    f"{rows - args.control} duplicates ({elapsed:.0f} s)"
                )
            plain, keyed = asyncio.run(latency(bases[0], key, args.latency))
            print(
                f"save p50 over REST, one client, {args.latency} of each alternating: plain "
                f"{statistics.median(plain):.1f} ms (p99 {percentile(plain, 99):.1f}), with idempotencyKey "
                f"{statistics.median(keyed):.1f} ms (p99 {percentile(keyed, 99):.1f})"
            )


if __name__ == "__main__":
    main()
