"""What an external OpenID provider's access token costs a request, against an API key, in one run.

    python -m bench.oidc_overhead [--calls 2000] [--keys 3]

Against a throw-away embedded PostgreSQL: ``identity.authenticate`` for an API key (one lookup by
prefix, a SHA-256 comparison) and ``identity.caller_for_user`` for the same user found by email
(one query reading every live key of the user with its grants, merged), interleaved call by call;
then the provider token's check alone (``jwt.decode`` with ES256 and RS256: signature, iss, aud,
exp, nbf), which runs before the lookup once the provider's keys are cached. A token costs about
the lookup plus the check; the fetch of the provider's keys happens once an hour, not per request.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from memory_mcp.store import apikeys, identity, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.db import Database

from .common import bench_server, machine, median, percentile

ISSUER = "https://sso.example.com/realms/memory"
AUDIENCE = "https://memory.example.com/mcp"


def _line(name: str, values: list[float]) -> str:
    return f"  {name:<52} p50 {median(values) * 1e3:7.3f} ms   p95 {percentile(values, 95) * 1e3:7.3f} ms"


async def measure(db: Database, calls: int, key_count: int) -> None:
    await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER)
    key = ""
    for n in range(key_count):
        await spaces.upsert_space(db, f"space-{n}", f"Space {n}")
        grants = [apikeys.GrantSpec(f"space-{n}", Access.READ_WRITE)]
        if n:  # overlapping grants, merged by the lookup
            grants.append(apikeys.GrantSpec("space-0", Access.READ))
        _, key = await apikeys.create_key(db, f"bench-{n}", "bench", grants, f"space-{n}")

    async def by_key() -> None:
        await identity.authenticate(db, key)

    async def by_user() -> None:
        await identity.caller_for_user(db, "bench@example.com")

    variants = {"key": by_key, "user": by_user}
    for _ in range(200):  # warm the pool and the statement cache
        for one in variants.values():
            await one()
    wall: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(calls):
        for name, one in variants.items():
            started = time.perf_counter()
            await one()
            wall[name].append(time.perf_counter() - started)

    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 3600, "nbf": now, "email": "bench@example.com"}
    decode: dict[str, list[float]] = {}
    for alg, private in (
        ("ES256", ec.generate_private_key(ec.SECP256R1())),
        ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    ):
        token = jwt.encode(claims, private, algorithm=alg, headers={"kid": "k1"})
        public = private.public_key()
        decode[alg] = []
        for _ in range(calls):
            started = time.perf_counter()
            jwt.decode(token, public, algorithms=[alg], issuer=ISSUER, audience=[AUDIENCE], leeway=30)
            decode[alg].append(time.perf_counter() - started)

    print(f"\n{calls} calls each, interleaved, one connection at a time; the user has {key_count} live keys")
    print(_line("API key (identity.authenticate)", wall["key"]))
    print(_line("provider token's user lookup (caller_for_user)", wall["user"]))
    for alg, values in decode.items():
        print(_line(f"provider token's check alone ({alg})", values))
    added = median(wall["user"]) - median(wall["key"])
    print(f"  lookup - key at p50: {added * 1e3:+.3f} ms")
    for alg, values in decode.items():
        print(f"  token ({alg}) - key at p50, estimated: {(added + median(values)) * 1e3:+.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=3, help="live keys of the user, each with grants")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with bench_server() as server:
        database = server.database("oidc")

        async def run() -> None:
            db = Database(database.app_url, pool_size=2)
            try:
                await measure(db, args.calls, args.keys)
            finally:
                await db.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
