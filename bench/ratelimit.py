"""What a per-key rate limit costs a request: the token-bucket statement, and authentication with it.

    python -m bench.ratelimit [--calls 2000] [--concurrency 1,8]

Prints, against a throw-away embedded PostgreSQL: microseconds per bucket check
(``ratelimit.spend``, one upsert) and calls per second of the request path's authentication
(``identity.authenticate`` plus the check, as ``MemoryService.authenticate`` runs it) for a key
without a limit and one with a limit high enough never to refuse. With ``--concurrency`` above 1
the calls run side by side on one key, all contending for its bucket row, which is the worst case:
one key spread across many pods.

The second part is the failed-authentication throttle (``server.throttle.AuthThrottle`` over
``store.auth_failures``), driven through the middleware itself around an inner app that answers 200
or 401: a valid request, a failure counted in PostgreSQL (each from a new address, as a spread
attack is; and all from one address, contending for its row), a failure refused from the note kept
in the process once over the limit, and, for comparison, a failure counted in process memory (what
every failure cost while the counts were per process, and what it costs while the database is out
of reach). It also prints the counts written to the database per request of each kind, read from the
table itself: a valid request and a refused one write nothing. For scale: ``identity.authenticate``
of a wrong key, the lookup every such failure costs anyway, and the same two counts written to a
logged copy of the table (the table is UNLOGGED: its commit waits for no WAL flush).

    python -m bench.ratelimit --part failures [--calls 2000] [--concurrency 1,8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg
from sqlalchemy import text
from starlette.types import Message, Receive, Scope, Send

from memory_mcp.server.throttle import AuthThrottle
from memory_mcp.store import apikeys, identity, ratelimit, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.auth_failures import FailureCounts
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import APP_ROLE
from memory_mcp.store.errors import AuthenticationFailed

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


# What a count cost in a logged table (its commit waits for the WAL to reach the disk): the table is
# UNLOGGED instead, as the rate buckets are.
_LOGGED_COPY = "CREATE TABLE logged_failure_counts (LIKE auth_failure_counts INCLUDING ALL)"
_LOGGED_UPSERT = """
INSERT INTO logged_failure_counts AS c (what, subject, window_ends_at, count)
VALUES ('address', %(address)s, now() + interval '1 hour', 1), ('key_prefix', '0000000006', now() + interval '1 hour', 1)
ON CONFLICT (what, subject) DO UPDATE SET count = c.count + 1
RETURNING count
"""


async def _answer(status: int, _scope: Scope, _receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    """What authentication answers, without its lookup: 200 for the valid key, 401 for any other."""
    valid = (b"authorization", b"Bearer mmk_0123456789_valid") in scope["headers"]
    await _answer(200 if valid else 401, scope, receive, send)


def _scope(address: str, key: str) -> Scope:
    return {
        "type": "http",
        "method": "GET",
        "path": "/v1/whoami",
        "client": (address, 40000),
        "headers": [(b"authorization", f"Bearer {key}".encode())],
    }


async def _recorded(db: Database) -> int:
    """The counts the database holds, summed over every row (a kind's delta is what it wrote)."""
    async with db.transaction() as conn:
        total = (await conn.execute(text("SELECT coalesce(sum(count), 0) FROM auth_failure_counts"))).scalar()
    return int(total or 0)


async def measure_failures(db: Database, calls: int, concurrencies: list[int]) -> None:
    logging.getLogger("memory_mcp").setLevel(logging.ERROR)  # a warning per failure is not a figure
    limit = 1_000_000_000  # reached by one address only, the "refused" kind's, put over it below
    throttle = AuthThrottle(_inner, db, limit=limit, window_s=3600.0)
    statuses: list[int] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    numbers = iter(range(10**9))

    def request(address: Callable[[], str], key: str) -> Callable[[], Awaitable[object]]:
        return lambda: throttle(_scope(address(), key), receive, send)

    def new_address() -> str:
        n = next(numbers)
        return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"

    valid = request(lambda: "198.51.100.1", "mmk_0123456789_valid")
    spread = request(new_address, "mmk_0000000001_x")
    one_address = request(lambda: "198.51.100.2", "mmk_0000000002_x")
    refused = request(lambda: "198.51.100.3", "mmk_0000000003_x")
    # One failure past the limit is counted in the database; every later one is refused from the note.
    async with db.transaction() as conn:
        await conn.execute(
            text(
                "INSERT INTO auth_failure_counts VALUES ('address', '198.51.100.3', now() + interval '1 hour', :n)"
            ),
            {"n": limit},
        )
    await refused()
    assert statuses[-1] == 429
    in_memory = FailureCounts(limit, 3600.0)

    async def counted_in_memory() -> object:
        in_memory.add(new_address())  # an address and a prefix, as every failure counts both
        return in_memory.add("0000000004")

    await _timed(200, 1, spread)  # warm the pool and the statement cache
    kinds = {
        "valid request (200)": valid,
        "failure, counted in PostgreSQL, new address each": spread,
        "failure, counted in PostgreSQL, one address": one_address,
        "failure past the limit, refused from the note": refused,
    }
    for concurrency in concurrencies:
        print(f"\nconcurrency {concurrency} ({calls} requests, median of 3 runs)")
        for name, one in kinds.items():
            runs, writes = [], []
            for _ in range(3):
                before = await _recorded(db)
                runs.append(await _timed(calls, concurrency, one))
                writes.append((await _recorded(db) - before) / calls)
            seconds = median(runs)
            print(
                f"  {name + ':':52} {seconds / calls * 1e6:7.0f} us per request, "
                f"{calls / seconds:7.0f}/s, {median(writes):.2f} counts written per request"
            )
        seconds = median([await _timed(calls, concurrency, counted_in_memory) for _ in range(3)])
        print(f"  {'counting step alone, in process memory (per pod):':52} {seconds / calls * 1e6:7.1f} us")
    assert set(statuses) == {200, 401, 429}, set(statuses)

    async def wrong_key() -> object:
        with contextlib.suppress(AuthenticationFailed):
            await identity.authenticate(db, "mmk_0000000005_wrong")
        return None

    async def logged_upsert() -> object:
        async with db.autocommit() as pg:
            await pg.execute(_LOGGED_UPSERT, {"address": new_address()})
        return None

    print("\nfor scale, at concurrency 1:")
    for name, one in (
        ("identity.authenticate of a wrong key", wrong_key),
        ("the same two counts in a logged table", logged_upsert),
    ):
        seconds = median([await _timed(calls, 1, one) for _ in range(3)])
        print(f"  {name + ':':52} {seconds / calls * 1e6:7.0f} us per call")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8", help="comma-separated numbers of calls at once")
    parser.add_argument("--part", choices=("buckets", "failures", "all"), default="all")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with bench_server() as server:
        database = server.database("ratelimit")

        async def run() -> None:
            db = Database(database.app_url, pool_size=max(int(c) for c in args.concurrency.split(",")))
            concurrencies = [int(c) for c in args.concurrency.split(",")]
            try:
                if args.part in ("buckets", "all"):
                    await measure(db, args.calls, concurrencies)
                if args.part in ("failures", "all"):
                    with psycopg.connect(database.owner_dsn, autocommit=True) as owner:
                        owner.execute(_LOGGED_COPY)
                        owner.execute(f"GRANT SELECT, INSERT, UPDATE ON logged_failure_counts TO {APP_ROLE}")
                    print("\nfailed authentications (AuthThrottle)")
                    await measure_failures(db, args.calls, concurrencies)
            finally:
                await db.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
