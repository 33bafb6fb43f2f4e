"""The failed-authentication budget of ``/mcp``, ``/v1``, ``/token`` and ``/revoke`` is one for the
deployment: two servers on one database refuse an address, or a key prefix, at the limit in total
(not twice over), a valid key is never refused, the window ends, and a database out of reach never
turns a failure into a 5xx."""

from __future__ import annotations

import asyncio
import json

import httpx2
from sqlalchemy import text

from memory_mcp.core.database import PreparedDatabase
from memory_mcp.embedder.client import Embedder
from memory_mcp.store.auth_failures import DATABASE_RETRY_S
from memory_mcp.store.db import Database
from tests.server.conftest import RunningServer, run_server
from tests.server.test_hardening import error_of, from_address, log_lines, retry_after, writer_key  # noqa: F401
from tests.test_outages import external  # noqa: F401 - the fixture: a PostgreSQL the test can stop

LIMIT = 4
# Tokens not shaped like a key (no prefix: counted by address alone) wherever a prefix is not the
# point: failures of key-shaped tokens also spend the process's budget of warning lines per reason
# (identity.FAILURE_LOG_LINES a minute), which other tests read.
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def fail(http: httpx2.AsyncClient, base: str, n: int, token: str) -> httpx2.Response:
    """One failed authentication with ``token``, on REST, MCP or the OAuth back channel by turn."""
    bearer = {"Authorization": f"Bearer {token}"}
    match n % 3:
        case 0:
            return await http.get(f"{base}/v1/whoami", headers=bearer)
        case 1:
            return await http.post(f"{base}/mcp", json=TOOLS_LIST, headers={**bearer, **MCP_HEADERS})
        case _:
            return await http.post(f"{base}/revoke", data={"token": token})


def refused(response: httpx2.Response) -> bool:
    """A 429 with its Retry-After, in the shape of its path (RFC 6749 JSON on /revoke)."""
    if response.status_code != 429:
        assert response.status_code in (200, 401), response.text  # /revoke answers 200 to any token
        return False
    if response.request.url.path == "/revoke":
        assert response.json()["error"] == "slow_down" and int(response.headers["retry-after"]) >= 1
    else:
        retry_after(response)
    return True


async def stored_counts(db: Database) -> dict[tuple[str, str], int]:
    async with db.transaction() as conn:
        rows = await conn.execute(
            text("SELECT what, subject, count AS n FROM auth_failure_counts WHERE window_ends_at > now()")
        )
        return {(row.what, row.subject): row.n for row in rows}


async def test_failures_split_across_two_servers_are_refused_at_the_limit_in_total(
    db_urls: tuple[str, str],
    embedder: Embedder,
    log_lines: list[str],  # noqa: F811 - the fixture
) -> None:
    settings = {"auth_failure_limit": LIMIT, "auth_failure_window_s": 600}
    async with (
        run_server(db_urls[0], embedder, **settings) as one,
        run_server(db_urls[0], embedder, **settings) as two,
    ):
        servers = (one.base, two.base)
        key = await writer_key(one)
        prefix = key.split("_")[1]

        # One address, its failures taking turns between the servers and between REST, MCP and
        # /revoke: the first LIMIT are answered as ever, every later one is refused, on both.
        async with from_address("127.0.0.2") as http:
            answers = [await fail(http, servers[n % 2], n, f"not-a-key-{n}") for n in range(LIMIT + 6)]
            assert [refused(a) for a in answers] == [False] * LIMIT + [True] * 6
            # Refusals learnt from the database are kept by each server: hammering on costs no write.
            assert (await stored_counts(one.db))[("address", "127.0.0.2")] <= LIMIT + 2
            # A valid key from the same address is served by both, over REST and MCP.
            for base in servers:
                me = await http.get(f"{base}/v1/whoami", headers={"Authorization": f"Bearer {key}"})
                assert me.status_code == 200 and me.json()["key"]["prefix"] == prefix
                listed = await http.post(
                    f"{base}/mcp", json=TOOLS_LIST, headers={"Authorization": f"Bearer {key}", **MCP_HEADERS}
                )
                assert listed.status_code == 200, listed.text

        # One key prefix guessed at from a new address each time, on both servers: refused at the
        # limit in total, while its owner keeps working and other keys' failures stay plain 401s.
        guesses = []
        for n in range(LIMIT + 2):
            async with from_address(f"127.0.1.{n + 1}") as http:
                guesses.append(await fail(http, servers[n % 2], 0, f"mmk_{prefix}_guess-{n}"))
        assert [refused(g) for g in guesses] == [False] * LIMIT + [True] * 2
        async with from_address("127.0.1.99") as http:
            for base in servers:
                error_of(await fail(http, base, 0, "mmk_9999999999_someone-else"), 401)
                owner = await http.get(f"{base}/v1/whoami", headers={"Authorization": f"Bearer {key}"})
                assert owner.status_code == 200

    # Going over the limit is logged once per subject and window for the deployment, not per server.
    throttled = [e for e in map(json.loads, log_lines) if e.get("throttled_by")]
    assert sorted(e["throttled_by"] for e in throttled) == ["address", "key_prefix"]


async def test_the_window_ends_on_every_server_and_past_windows_are_swept(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    window_s = 2.0
    settings = {"auth_failure_limit": LIMIT, "auth_failure_window_s": window_s}
    async with (
        run_server(db_urls[0], embedder, **settings) as one,
        run_server(db_urls[0], embedder, **settings) as two,
        from_address("127.0.0.3") as http,
    ):
        servers = (one.base, two.base)
        answers = [await fail(http, servers[n % 2], 0, "not-a-key") for n in range(LIMIT + 2)]
        assert [refused(a) for a in answers] == [False] * LIMIT + [True] * 2  # both servers refuse
        assert int(answers[-1].headers["retry-after"]) <= window_s

        await asyncio.sleep(window_s + 0.5)
        # A new window: each server answers a failure as a failure again, and counts it afresh.
        for base in servers:
            error_of(await fail(http, base, 0, "not-a-key"), 401)
        assert (await stored_counts(one.db))[("address", "127.0.0.3")] == 2

        # Rows whose window ended are deleted by a later failure's sweep: the table stays bounded.
        async with from_address("127.0.0.4") as other:
            error_of(await fail(other, one.base, 0, "not-a-key"), 401)
        await asyncio.sleep(window_s + 0.5)
        async with from_address("127.0.0.5") as other:
            for base in servers:
                error_of(await fail(other, base, 0, "not-a-key"), 401)
        async with one.db.transaction() as conn:
            rows = (await conn.execute(text("SELECT what, subject FROM auth_failure_counts"))).all()
        assert {(r.what, r.subject) for r in rows} == {("address", "127.0.0.5")}


async def test_failures_are_still_refused_by_each_server_while_the_database_is_out_of_reach(
    external: PreparedDatabase,  # noqa: F811 - the fixture imported above
    log_lines: list[str],  # noqa: F811 - the fixture imported above
) -> None:
    assert external.embedded is not None
    async with (
        run_server(external.app_url, None, auth_failure_limit=LIMIT, auth_failure_window_s=600) as server,
        from_address("127.0.0.6", base_url=server.base) as http,
    ):
        external.embedded.stop()
        # A malformed key is refused without the database; its count falls back to this process.
        answers = [
            await http.get("/v1/whoami", headers={"Authorization": "Bearer not-a-key"})
            for _ in range(LIMIT + 2)
        ]
        assert [a.status_code for a in answers] == [401] * LIMIT + [429] * 2, [a.text for a in answers]
        external.embedded.start()
        await asyncio.sleep(DATABASE_RETRY_S + 0.5)
        # Back in the database: a new address's failures are counted there again.
        await counted_in_database(server, "127.0.0.7")

    fallbacks = [e for e in map(json.loads, log_lines) if "counted in this process" in e["message"]]
    assert len(fallbacks) == 1, fallbacks
    assert not [e for e in map(json.loads, log_lines) if "exception" in e]


async def counted_in_database(server: RunningServer, address: str) -> None:
    async with from_address(address, base_url=server.base) as http:
        for _ in range(2):
            error_of(await http.get("/v1/whoami", headers={"Authorization": "Bearer not-a-key"}), 401)
    assert (await stored_counts(server.db))[("address", address)] == 2
