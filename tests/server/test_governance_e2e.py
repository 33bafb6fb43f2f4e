"""The review flow, quotas and rate limits through real MCP and REST clients and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx2

from memory_mcp.store import apikeys, ratelimit
from memory_mcp.store.access import Access, Role, effective_access
from memory_mcp.store.db import Database
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session, serve_process


async def _team(server: RunningServer, **space: object) -> tuple[str, str]:
    """A Review space 'policies' with a writer's key (for the agent) and a curator's key."""
    await make_space(server.db, "policies", write_policy="Review", **space)
    writer = await make_key(
        server.db, await make_user(server.db, "wanda"), {"policies": "ReadWrite"}, "policies"
    )
    curator = await make_key(
        server.db, await make_user(server.db, "carl"), {"policies": "Curate"}, "policies"
    )
    return writer, curator


def _rest(server: RunningServer, key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}, timeout=30)


async def _audit(db: Database, action: str) -> int:
    async with db.autocommit() as pg:
        cur = await pg.execute("SELECT count(*) FROM audit_events WHERE action = %s", (action,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_review_space_end_to_end_over_mcp_and_rest(server: RunningServer) -> None:
    writer, curator = await _team(server)
    async with mcp_session(server, writer) as agent:
        tools = {t.name for t in (await agent.client.list_tools()).tools}
        assert not {name for name in tools if "accept" in name or "reject" in name or "review" in name}
        saved = await agent.ok("add_memory", content="Expense reports are due on the 5th.")
        assert saved["status"] == "proposed" and saved["memory"]["status"] == "proposed"
        short = saved["memory"]["id"][:8]
        assert saved["message"].startswith(f"Proposed for review in space 'policies' (id {short})")
        found = await agent.ok("search_memory", query="when are expense reports due", keyword="Expense")
        # A proposal is not searchable; nothing matched, so the answer carries nothing else (no profile).
        assert found["results"] == [] and found.get("profile") is None
        profile = await agent.client.read_resource("memory-mcp://profile")
        assert "Expense" not in profile.contents[0].text  # type: ignore[union-attr]
        listed = await agent.ok("listMemories", status="proposed")
        assert [(m["id"], m["proposal"], m["proposedBy"]) for m in listed["memories"]] == [
            (saved["memory"]["id"], "save", "Wanda")
        ]
        assert (await agent.ok("listMemories"))["memories"] == []
        recent = await agent.client.read_resource("memory-mcp://memories")
        assert "Expense" not in recent.contents[0].text  # type: ignore[union-attr]

    async with _rest(server, writer) as http:
        refused = await http.post(f"/v1/memories/{short}/accept")
        assert refused.status_code == 403 and "Curate" in refused.json()["message"]
    async with _rest(server, curator) as http:
        pending = (await http.get("/v1/memories", params={"status": "proposed"})).json()
        assert [m["id"] for m in pending["memories"]] == [saved["memory"]["id"]]
        accepted = await http.post(f"/v1/memories/{short}/accept")
        assert accepted.status_code == 200, accepted.text
        body = accepted.json()
        assert (body["decision"], body["already"], body["memory"]["status"]) == ("accepted", False, "live")
        assert body["memory"]["acceptedBy"] == "Carl"
        again = (await http.post(f"/v1/memories/{saved['memory']['id']}/accept")).json()
        assert again["already"] is True and again["memory"]["status"] == "live"
        conflict = await http.post(f"/v1/memories/{short}/reject", json={"reason": "too late"})
        assert conflict.status_code == 409
    assert await _audit(server.db, "memory.accepted") == 1

    async with mcp_session(server, writer) as agent:
        found = await agent.ok("search_memory", query="when are expense reports due")
        assert [h["id"] for h in found["results"]][:1] == [saved["memory"]["id"]]
        # A forget under Review is a proposal: the memory stays live until a curator accepts it.
        forget = await agent.ok("add_memory", action="forget", content=saved["memory"]["id"])
        assert forget["status"] == "forget_proposed"
        assert "stays live" in forget["message"]
        assert [h["id"] for h in (await agent.ok("search_memory", keyword="Expense"))["results"]] == [
            saved["memory"]["id"]
        ]
        rejected_save = await agent.ok("add_memory", content="The office closes at noon on Fridays.")
    async with _rest(server, curator) as http:
        forgot = (await http.post(f"/v1/memories/{short}/accept")).json()
        assert (forgot["proposal"], forgot["memory"]["status"]) == ("forget", "forgotten")
        rejected = await http.post(
            f"/v1/memories/{rejected_save['memory']['id']}/reject", json={"reason": "not our policy"}
        )
        assert rejected.status_code == 200
        assert rejected.json()["memory"]["status"] == "rejected"
        assert rejected.json()["memory"]["reviewReason"] == "not our policy"
        history = (await http.get("/v1/memories", params={"status": "rejected"})).json()
        assert [m["rejectedBy"] for m in history["memories"]] == ["Carl"]
    async with mcp_session(server, writer) as agent:
        assert (await agent.ok("search_memory", keyword="Expense"))["results"] == []
        assert (await agent.ok("search_memory", keyword="noon"))["results"] == []


async def test_curate_across_role_and_grant_over_rest(server: RunningServer) -> None:
    writer, _ = await _team(server)
    async with mcp_session(server, writer) as agent:
        proposal = (await agent.ok("add_memory", content="Laptops are replaced every 3 years."))["memory"][
            "id"
        ]
    for role in Role:
        for grant in Access:
            key = await make_key(server.db, await make_user(server.db, role=role), {"policies": grant})
            async with _rest(server, key) as http:
                who = (await http.get("/v1/whoami")).json()
                assert who["grants"][0]["granted"] == grant.value
                answer = await http.post(f"/v1/memories/{proposal}/reject")
            may_curate = role is Role.WRITER and grant is Access.CURATE
            assert who["grants"][0]["effective"] == effective_access(role, grant).value
            if not may_curate:
                assert answer.status_code == 403, (role, grant)
                expected = "Reader role" if role is Role.READER else "Curate grant"
                assert expected in answer.json()["message"]
            else:
                assert answer.status_code == 200 and answer.json()["memory"]["status"] == "rejected"
    assert await _audit(server.db, "memory.rejected") == 1  # the second curator found it rejected


async def test_list_spaces_reports_curate_and_the_write_policy(server: RunningServer) -> None:
    _, curator = await _team(server)
    async with mcp_session(server, curator) as s:
        spaces = (await s.ok("listSpaces"))["spaces"]
        assert [(x["key"], x["access"], x["writePolicy"]) for x in spaces] == [
            ("policies", "Curate", "Review")
        ]
        who = await s.ok("whoAmI")
        assert who["grants"] == [{"space": "policies", "granted": "Curate", "effective": "Curate"}]


async def test_a_quota_at_its_boundary_over_mcp(server: RunningServer) -> None:
    await make_space(server.db, "small", max_bytes=30)
    key = await make_key(server.db, await make_user(server.db), {"small": "ReadWrite"}, "small")
    async with mcp_session(server, key) as s:
        await s.ok("add_memory", content="Exactly fifteen")
        await s.ok("add_memory", content="bytes, twice!!!")  # 30 of 30 bytes
        error = await s.error("add_memory", content="one more")
        assert "quota of 30 bytes (maxBytes): 30 in use" in error
        listed = await s.ok("listMemories", status="all")
        assert listed["pagination"]["total"] == 2  # nothing half-written
    async with _rest(server, key) as http:
        refused = await http.post("/v1/memories", json={"content": "one more"})
        assert refused.status_code == 409 and refused.json()["error"] == "QuotaExceeded"


# --- rate limits, shared by two server processes on one database ------------------------------


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def test_rate_limit_is_shared_by_two_server_processes(
    server: RunningServer, db_urls: tuple[str, str]
) -> None:
    await make_space(server.db, "team")
    await make_user(server.db, "rita")
    # One request a minute refills, four at once: every refusal below is certain, whatever the timing.
    _, key = await apikeys.create_key(
        server.db,
        "rita-agent",
        "rita",
        [apikeys.GrantSpec("team", Access.READ)],
        "team",
        rate_limit=ratelimit.RateLimit(1, 4),
    )
    unlimited = await make_key(server.db, "rita", {"team": "Read"}, "team")
    auth = {"Authorization": f"Bearer {key}"}
    with serve_process(db_urls[0]) as first, serve_process(db_urls[0]) as second:
        one, two = first.base, second.base
        statuses = []
        for base in (one, two, one, two):
            statuses.append(httpx2.get(f"{base}/v1/whoami", headers=auth, timeout=30).status_code)
        assert statuses == [200, 200, 200, 200]
        rest = httpx2.get(f"{one}/v1/whoami", headers=auth, timeout=30)
        assert rest.status_code == 429
        assert rest.json()["error"] == "RateLimited" and "1 requests a minute" in rest.json()["message"]
        assert 1 <= int(rest.headers["Retry-After"]) <= 60
        mcp = httpx2.post(f"{two}/mcp", headers={**auth, **MCP_HEADERS}, json=TOOLS_LIST, timeout=30)
        assert mcp.status_code == 429 and 1 <= int(mcp.headers["Retry-After"]) <= 60
        # Another key of the same user is not limited by this one's budget.
        free = httpx2.get(f"{two}/v1/whoami", headers={"Authorization": f"Bearer {unlimited}"}, timeout=30)
        assert free.status_code == 200
        metrics = httpx2.get(f"{one}/metrics", timeout=30).text
        assert "memory_mcp_rate_limited_total 1.0" in metrics


# --- the command line, as a curator runs it ---------------------------------------------------


def review_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "memory_mcp.cli", "review", *args, "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "MEMORY_MCP_LOG_FORMAT": "text", "COLUMNS": "200"},
    )
    # The console wraps long lines: compare words, not line breaks.
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, " ".join(done.stderr.split()))


async def test_review_from_the_command_line(server: RunningServer, db_urls: tuple[str, str]) -> None:
    writer, _ = await _team(server)
    async with mcp_session(server, writer) as agent:
        first = (await agent.ok("add_memory", content="Visitors sign in at reception."))["memory"]["id"]
        second = (await agent.ok("add_memory", content="Badges are returned on the last day."))["memory"][
            "id"
        ]
        third = (await agent.ok("add_memory", content="Parking is free after 18:00."))["memory"]["id"]

    listed = review_cli(db_urls[0], "list", "--space", "policies", "--as", "carl", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {row["id"] for row in json.loads(listed.stdout)} == {first, second, third}
    refused = review_cli(db_urls[0], "accept", first[:8], "--space", "policies", "--as", "wanda")
    assert refused.returncode == 1 and "Curate grant" in refused.stderr

    accepted = review_cli(db_urls[0], "accept", first[:8], "--space", "policies", "--as", "carl")
    assert accepted.returncode == 0, accepted.stderr
    twice = review_cli(db_urls[0], "accept", first, "--space", "policies", "--as", "carl")
    assert twice.returncode == 0 and "already accepted" in twice.stderr
    rejected = review_cli(
        db_urls[0], "reject", second[:8], "--space", "policies", "--as", "carl", "--reason", "obsolete"
    )
    assert rejected.returncode == 0, rejected.stderr
    bulk = review_cli(db_urls[0], "accept", "--all", "--space", "policies", "--as", "carl")
    assert bulk.returncode == 0 and third[:8] in bulk.stderr
    assert await _audit(server.db, "memory.accepted") == 2 and await _audit(server.db, "memory.rejected") == 1

    async with mcp_session(server, writer) as agent:
        live = {m["id"] for m in (await agent.ok("listMemories"))["memories"]}
        assert live == {first, third}
        assert (await agent.ok("listMemories", status="rejected"))["memories"][0]["id"] == second


async def test_a_long_text_over_mcp_in_a_review_space_is_proposed(server: RunningServer) -> None:
    writer, _ = await _team(server)
    text = "\n\n".join(
        f"Rule {n}: meeting rooms are booked at most {n + 2} weeks ahead. " * 4 for n in range(10)
    )
    async with mcp_session(server, writer) as agent:
        saved = await agent.ok("add_memory", content=text)
        assert saved["status"] == "proposed" and saved["message"].startswith(
            "Proposed for review as document"
        )
        assert (await agent.ok("search_memory", keyword="meeting rooms"))["results"] == []
        assert (await agent.ok("listMemories", status="proposed"))["pagination"]["total"] > 1
