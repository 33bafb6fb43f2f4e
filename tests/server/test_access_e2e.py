"""The access rules through the real MCP surface, authentication failures, and stateless pods."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import apikeys, users
from memory_mcp.store.access import Access, Role, effective_access
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session, run_server

SPACES = ("red", "green", "blue", "gold")
# Each user's grants: red ReadWrite, green Read, blue none, gold Curate.
GRANTS = {"red": "ReadWrite", "green": "Read", "gold": "Curate"}


@pytest.mark.parametrize("role", list(Role))
async def test_two_users_three_spaces(server: RunningServer, role: Role) -> None:
    for space in SPACES:
        await make_space(server.db, space)
    keys = {}
    for name in (f"{role.value.lower()}-one", f"{role.value.lower()}-two"):
        user = await make_user(server.db, name, role=role)
        keys[name] = await make_key(server.db, user, GRANTS, default="red")  # type: ignore[arg-type]
    # A Writer with ReadWrite on every space seeds each one, so reads have something to find.
    seeder = await make_key(server.db, await make_user(server.db), dict.fromkeys(SPACES, "ReadWrite"), "red")
    async with mcp_session(server, seeder) as s:
        for space in SPACES:
            await s.ok("add_memory", content=f"Seed fact of {space}.", containerTag=space)

    for name, key in keys.items():
        async with mcp_session(server, key) as s:
            for space in SPACES:
                grant = GRANTS.get(space)
                if grant is None:
                    for tool, args in (
                        ("listMemories", {}),
                        ("listDocuments", {}),
                        ("search_memory", {"query": "seed"}),
                        ("add_memory", {"content": "x"}),
                    ):
                        assert await s.error(tool, containerTag=space, **args) == (
                            f"Error executing tool {tool}: space '{space}' not found"
                        )
                    continue
                listed = await s.ok("listMemories", containerTag=space, status="all")
                assert {m["content"] for m in listed["memories"]} >= {f"Seed fact of {space}."}
                found = await s.ok("search_memory", query="seed fact", containerTag=space)
                assert found["space"] == space
                everything = await s.ok("listMemories", containerTag=space, status="all", limit=50)
                here = {m["id"] for m in everything["memories"]}
                assert {h["id"] for h in found["results"]} <= here  # nothing crosses spaces
                can_write = effective_access(role, Access(grant)).can_write
                write = await s.call("add_memory", content=f"{name} writes in {space}.", containerTag=space)
                forget = await s.call(
                    "add_memory", action="forget", content=f"Seed fact of {space}.", containerTag=space
                )
                if can_write:
                    assert not write.is_error and write.structured_content["memory"]["createdBy"]  # type: ignore[index]
                    assert not forget.is_error
                else:
                    for result in (write, forget):
                        assert result.is_error
                        text = result.content[0].text  # type: ignore[union-attr]
                        expected = "Reader role" if role is Role.READER else f"Read access to space '{space}'"
                        assert expected in text
            spaces = await s.ok("listSpaces")
            effective = {sp["key"]: sp["access"] for sp in spaces["spaces"]}
            assert effective == {
                "red": "ReadWrite" if role is Role.WRITER else "Read",
                "green": "Read",
                "gold": "Curate" if role is Role.WRITER else "Read",
            }


async def post_mcp(server: RunningServer, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(
            server.mcp_url,
            headers={"Accept": "application/json, text/event-stream", **headers},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )


async def test_refused_keys_get_401_with_www_authenticate(server: RunningServer) -> None:
    await make_space(server.db, "team")
    user = await make_user(server.db, "dora")
    good = await make_key(server.db, user, {"team": "Read"})
    expired = await make_key(
        server.db, user, {"team": "Read"}, expires_at=datetime.now(UTC) - timedelta(minutes=1)
    )
    revoked = await make_key(server.db, user, {"team": "Read"}, name="revoked-one")
    await apikeys.revoke_key(server.db, "revoked-one")
    other = await make_user(server.db, "eve")
    deactivated = await make_key(server.db, other, {"team": "Read"})
    await users.upsert_user(server.db, other, "eve@example.com", "Eve", Role.WRITER, active=False)

    async with mcp_session(server, good) as s:
        assert (await s.ok("whoAmI"))["user"]["displayName"] == "Dora"
    cases = {
        "missing": {},
        "unknown": {"Authorization": "Bearer mmk_0123456789_not-a-real-key"},
        "garbage": {"Authorization": "Bearer hello"},
        "expired": {"Authorization": f"Bearer {expired}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "deactivated": {"Authorization": f"Bearer {deactivated}"},
    }
    async with httpx2.AsyncClient() as http:
        for case, headers in cases.items():
            r = await post_mcp(server, headers)
            assert r.status_code == 401, case
            assert r.headers["www-authenticate"].startswith("Bearer"), case
            rest = await http.get(f"{server.base}/v1/whoami", headers=headers)
            assert rest.status_code == 401, case
            assert rest.headers["www-authenticate"].startswith("Bearer"), case


async def test_active_space_shared_by_two_server_processes(
    db_urls: tuple[str, str], embedder: Embedder, server: RunningServer
) -> None:
    key = await make_key(
        server.db,
        await make_user(server.db),
        {
            await make_space(server.db, "first"): "ReadWrite",
            await make_space(server.db, "second"): "ReadWrite",
        },
        "first",
    )
    async with run_server(db_urls[0], embedder) as other:
        async with mcp_session(server, key) as s:
            await s.ok("select-space", space="second")
        async with mcp_session(other, key) as s:
            assert (await s.ok("whoAmI"))["activeSpace"] == "second"
            saved = await s.ok("add_memory", content="Written through the second pod.")
            assert saved["space"] == "second"
        async with mcp_session(server, key) as s:
            listed = await s.ok("listMemories")
            assert listed["space"] == "second"
            assert [m["content"] for m in listed["memories"]] == ["Written through the second pod."]


async def test_concurrent_duplicate_saves_return_one_memory(server: RunningServer) -> None:
    import asyncio

    key = await make_key(
        server.db, await make_user(server.db), {await make_space(server.db, "dup"): "ReadWrite"}
    )
    async with mcp_session(server, key) as s:
        results = await asyncio.gather(
            *(s.ok("add_memory", content="Same fact, many callers.") for _ in range(6))
        )
        ids = {r["memory"]["id"] for r in results}
        assert len(ids) == 1
        assert sorted(r["status"] for r in results).count("saved") == 1
        assert (await s.ok("listMemories"))["pagination"]["total"] == 1


def test_every_role_grant_pair_is_covered() -> None:
    pairs = set(itertools.product(Role, [None, *Access]))
    covered = {(role, Access(GRANTS[s]) if s in GRANTS else None) for role in Role for s in SPACES}
    assert covered == pairs
