"""What a per-key rate limit costs a request: the token-bucket statement, and authentication with it.

    python -m bench.ratelimit [--calls 2000] [--concurrency 1,8]

Prints, against a throw-away embedded PostgreSQL: microseconds per bucket check
(``ratelimit.spend``, one upsert) and calls per second of the request path's authentication
(``identity.authenticate`` plus the check, as ``MemoryService.authenticate`` runs it) for a key
without a limit and one with a limit high enough never to refuse. With ``--concurrency`` above 1
the calls run side by side on one key, all contending for its bucket row, which is the worst case:
one key spread across many pods.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from memory_mcp.store import apikeys, identity, ratelimit, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.db import Database

from .common import bench_server, machine, median


async def _timed(calls: int, concurrency: int, one: Callable[[], Awaitable[object]]) -> float:
    """Seconds for ``calls`` calls of ``one``, ``concurrency`` at a time."""
    queue = iter(range(calls))

    async def worker() -> None:
        for _ in queue:
            await one()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def measure(db: Database, calls: int, concurrencies: list[int]) -> None:
    await spaces.upsert_space(db, "bench", "Bench")
    await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER)
    grant = [apikeys.GrantSpec("bench", Access.READ)]
    _, free = await apikeys.create_key(db, "free", "bench", grant)
    # High enough never to refuse: the cost measured is the statement's, not a refusal's.
    _, limited = await apikeys.create_key(
        db, "limited", "bench", grant, rate_limit=ratelimit.RateLimit(1_000_000, 1_000_000)
    )
    limited_key = (await identity.authenticate(db, limited)).key

    async def auth_free() -> object:
        caller = await identity.authenticate(db, free)
        await ratelimit.spend(db, caller.key)  # no limit: returns at once
        return caller

    async def auth_limited() -> object:
        caller = await identity.authenticate(db, limited)
        await ratelimit.spend(db, caller.key)
        return caller

    async def check() -> object:
        await ratelimit.spend(db, limited_key)
        return None

    await _timed(200, 1, check)  # warm the pool and the statement cache
    for concurrency in concurrencies:
        runs = {name: [] for name in ("check", "free", "limited")}  # type: dict[str, list[float]]
        for _ in range(3):
            runs["check"].append(await _timed(calls, concurrency, check))
            runs["free"].append(await _timed(calls, concurrency, auth_free))
            runs["limited"].append(await _timed(calls, concurrency, auth_limited))
        check_s, free_s, limited_s = (median(runs[n]) for n in ("check", "free", "limited"))
        print(f"\nconcurrency {concurrency} ({calls} calls, median of 3 runs)")
        print(
            f"  bucket check alone:            {check_s / calls * 1e6:8.0f} us per call, {calls / check_s:8.0f} calls/s"
        )
        print(
            f"  authenticate, no limit:        {free_s / calls * 1e6:8.0f} us per call, {calls / free_s:8.0f} calls/s"
        )
        print(
            f"  authenticate + bucket check:   {limited_s / calls * 1e6:8.0f} us per call, {calls / limited_s:8.0f} calls/s"
        )
        print(f"  added per request by a limit:  {(limited_s - free_s) / calls * 1e6:8.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8", help="comma-separated numbers of calls at once")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with bench_server() as server:
        database = server.database("ratelimit")

        async def run() -> None:
            db = Database(database.app_url, pool_size=max(int(c) for c in args.concurrency.split(",")))
            try:
                await measure(db, args.calls, [int(c) for c in args.concurrency.split(",")])
            finally:
                await db.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
