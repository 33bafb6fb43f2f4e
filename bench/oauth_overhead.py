"""What an OAuth access token adds to a request, against an API key, in one run.

    python -m bench.oauth_overhead [--calls 3000] [--rounds 10]

Against a throw-away embedded PostgreSQL, the authentication every request of /mcp and /v1 runs:
``identity.authenticate`` for an API key (one lookup by prefix, a SHA-256 comparison) and
``oauth.caller_for_access_token`` for a token granted from the same key (the Ed25519 signature,
iss, aud and expiry, then one lookup of the key with its grant's liveness). Calls alternate key,
token, key, token... so both see the same machine and database, in rounds; prints p50/p95 of
each, the difference of the p50s round by round and its median (the target: at most 1 ms), and the
JWT check alone (the part a token adds; the lookup costs what a key's does). A control spends the
JWT check's CPU time before a key's lookup: on a saturated machine the extra CPU before a round trip
delays the reply by itself, and the control shows how much of the difference that is. The CPU time
of the process per call is the figure contention does not move.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time

import jwt

from memory_mcp.store import apikeys, identity, oauth, oauth_keys, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.db import Database

from .common import bench_server, machine, median, percentile

ORIGIN = "https://memory.example.com"


async def _token(db: Database, plaintext: str, keys: oauth_keys.SigningKeys) -> str:
    caller = await identity.authenticate(db, plaintext)
    client = await oauth.register_client(db, "bench", ["http://127.0.0.1:9/cb"])
    verifier = "v" * 43
    challenge = oauth_keys.b64(hashlib.sha256(verifier.encode()).digest())
    request = oauth.SignIn(
        caller.key.id, client.client_id, "http://127.0.0.1:9/cb", challenge, f"{ORIGIN}/mcp", None
    )
    handle = await oauth.begin_sign_in(db, caller, request, 600)
    signed_in = await oauth.end_sign_in(db, handle)
    assert signed_in is not None
    code = await oauth.grant_consent(db, signed_in, ["bench"], 60, "bench")
    issuer = oauth.Issuer(ORIGIN + "/", keys, oauth.Lifetimes(3600, 86400, 60))
    tokens = await oauth.exchange_code(
        db,
        issuer,
        code=code,
        client_id=client.client_id,
        redirect_uri=request.redirect_uri,
        code_verifier=verifier,
        resource=None,
    )
    return tokens.access_token


async def measure(db: Database, calls: int, rounds: int) -> None:
    await spaces.upsert_space(db, "bench", "Bench")
    await spaces.upsert_space(db, "other", "Other")
    await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER)
    grants = [apikeys.GrantSpec("bench", Access.READ_WRITE), apikeys.GrantSpec("other", Access.READ)]
    _, key = await apikeys.create_key(db, "bench", "bench", grants, "bench")
    keys = oauth_keys.SigningKeys(None, overlap_s=3600)
    token = await _token(db, key, keys)
    audiences = (f"{ORIGIN}/mcp",)

    async def by_key() -> None:
        await identity.authenticate(db, key)

    async def by_token() -> None:
        await oauth.caller_for_access_token(db, keys, token, issuer=ORIGIN + "/", audiences=audiences)

    public = (await keys.signing_key(db)).public
    jwt_s = []
    for _ in range(calls):
        started = time.perf_counter()
        jwt.decode(token, public, algorithms=["EdDSA"], audience=list(audiences), issuer=ORIGIN + "/")
        jwt_s.append(time.perf_counter() - started)
    spin_s = median(jwt_s)

    async def by_key_and_spin() -> None:
        # The control: a key, plus as much CPU as the JWT check takes, spent just before the round
        # trip. On a saturated machine this alone adds scheduling delay to the round trip.
        started = time.perf_counter()
        while time.perf_counter() - started < spin_s:
            pass
        await identity.authenticate(db, key)

    variants = {"key": by_key, "token": by_token, "control": by_key_and_spin}
    for _ in range(200):  # warm the pool, the statement cache and the key cache
        for one in variants.values():
            await one()
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    differences = []
    for _ in range(rounds):
        start = {name: len(wall[name]) for name in variants}
        for _ in range(calls // rounds):
            for name, one in variants.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                await one()
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
        differences.append(median(wall["token"][start["token"] :]) - median(wall["key"][start["key"] :]))

    def line(name: str, values: list[float]) -> str:
        return f"  {name:<44} p50 {median(values) * 1e3:7.3f} ms   p95 {percentile(values, 95) * 1e3:7.3f} ms"

    print(f"\n{calls} calls each in {rounds} rounds, interleaved, one connection at a time")
    print(line("API key (identity.authenticate)", wall["key"]))
    print(line("access token (caller_for_access_token)", wall["token"]))
    print(line("control: key + the JWT check's CPU as a spin", wall["control"]))
    print(line("the JWT check alone (signature, iss, aud, exp)", jwt_s))
    per_round = " ".join(f"{d * 1e3:+.2f}" for d in differences)
    print(f"  token - key at p50, per round (ms): {per_round}")
    print(f"  token - key at p50, median of rounds: {median(differences) * 1e3:+.3f} ms (target: <= 1 ms)")
    print(f"  control - key at p50: {(median(wall['control']) - median(wall['key'])) * 1e3:+.3f} ms")
    print(
        f"  CPU of this process per call, p50: key {median(cpu['key']) * 1e3:.3f} ms, "
        f"token {median(cpu['token']) * 1e3:.3f} ms, added {(median(cpu['token']) - median(cpu['key'])) * 1e3:+.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=10, help="the p50s are compared round by round")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with bench_server() as server:
        database = server.database("oauth")

        async def run() -> None:
            db = Database(database.app_url, pool_size=2)
            try:
                await measure(db, args.calls, args.rounds)
            finally:
                await db.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
