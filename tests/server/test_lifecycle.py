"""A memory's life through the MCP tools and REST: idempotent saves, folded duplicates, expiry, and
forgets with a reason or as a dry run."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import httpx2

from memory_mcp.store import audit
from tests.server.conftest import RunningServer, mcp_session
from tests.server.test_tools import writer_key


async def test_a_retried_save_with_its_idempotency_key_stores_nothing_new(server: RunningServer) -> None:
    key = await writer_key(server)
    async with mcp_session(server, key) as s:
        first = await s.ok(
            "add_memory", content="The staging database is pg-stage-2.", idempotencyKey="req-1"
        )
        assert first["status"] == "saved" and "replayed" not in first
        # The retry after a timeout, reworded by the model: the first result, flagged, nothing stored.
        retry = await s.ok("add_memory", content="Staging DB: pg-stage-2.", idempotencyKey="req-1")
        assert retry["replayed"] is True and retry["status"] == "saved"
        assert retry["memory"]["id"] == first["memory"]["id"] and "nothing new was stored" in retry["message"]
        # Racing repeats of one new key: one memory.
        racing = await asyncio.gather(
            *(
                s.ok("add_memory", content=f"Freeze starts on the {n}th.", idempotencyKey="req-2")
                for n in range(4)
            )
        )
        assert len({r["memory"]["id"] for r in racing}) == 1
        assert "idempotencyKey" in await s.error("add_memory", content="x", idempotencyKey="k" * 256)
        # Identical text but for spacing and case is the live memory, not a copy.
        same = await s.ok("add_memory", content="the STAGING database is  pg-stage-2.")
        assert same["status"] == "already_exists" and same["memory"]["id"] == first["memory"]["id"]
        assert (await s.ok("listMemories"))["pagination"]["total"] == 2


async def test_rest_saves_take_the_key_in_the_body_or_the_idempotency_key_header(
    server: RunningServer,
) -> None:
    key = await writer_key(server)
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        body = {"content": "Invoices go out on the 1st."}
        first = await http.post("/v1/memories", json=body, headers={"Idempotency-Key": "inv-1"})
        assert first.status_code == 200 and first.json()["status"] == "saved"
        again = await http.post(
            "/v1/memories",
            json={**body, "content": "Invoices: the 1st."},
            headers={"Idempotency-Key": "inv-1"},
        )
        assert (
            again.json()["replayed"] is True and again.json()["memory"]["id"] == first.json()["memory"]["id"]
        )
        in_body = await http.post("/v1/memories", json={**body, "idempotencyKey": "inv-1"})
        assert in_body.json()["memory"]["id"] == first.json()["memory"]["id"]
        too_long = await http.post("/v1/memories", json={**body, "idempotencyKey": "k" * 256})
        assert too_long.status_code == 422 and too_long.json()["field"] == "idempotencyKey"
        listed = await http.get("/v1/memories")
        assert listed.json()["pagination"]["total"] == 1


async def test_expiry_dry_runs_and_reasons_through_mcp_and_rest(server: RunningServer) -> None:
    key = await writer_key(server)
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    async with mcp_session(server, key) as s:
        saved = await s.ok("add_memory", content="The cafeteria is closed this week.", expiresAt=later)
        assert saved["memory"]["expiresAt"].startswith(later[:19]) and "live until" in saved["message"]
        assert "expiresAt: must be in the future" in await s.error(
            "add_memory", content="Yesterday's news.", expiresAt="2020-01-01T00:00:00Z"
        )
        dry = await s.ok("add_memory", action="forget", memoryId=saved["memory"]["id"], dryRun=True)
        assert dry["status"] == "would_forget" and dry["memory"]["status"] == "live"
        assert (await s.ok("listMemories"))["pagination"]["total"] == 1
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        exported = await http.get("/v1/spaces/team/export")
        (line,) = [json.loads(x) for x in exported.text.splitlines() if x.strip()]
        assert line["expiresAt"].startswith(later[:19])
        gone = await http.post(
            "/v1/memories/forget", json={"memoryId": saved["memory"]["id"], "reason": "the week is over"}
        )
        assert gone.json()["status"] == "forgotten"
        bad = await http.post("/v1/memories", json={"content": "x y z", "expiresAt": "not a date"})
        assert bad.status_code == 422 and bad.json()["field"] == "expiresAt"
    (event,) = await audit.list_events(server.db, action="memory.forgotten")
    assert event.details["reason"] == "the week is over"


async def test_a_close_restatement_is_stored_and_names_the_memory_it_may_replace(
    server: RunningServer,
) -> None:
    key = await writer_key(server)
    async with mcp_session(server, key) as s:
        first = (await s.ok("add_memory", content="Staging deploys run every Friday at 17:00."))["memory"]
        later = await s.call("add_memory", content="Staging deploys now run every Thursday at 17:00.")
        saved = later.structured_content
        assert saved is not None and saved["status"] == "saved" and saved["similar"]["id"] == first["id"]
        assert f"memoryId={first['id'][:8]}" in saved["message"]
        assert "Similar live memory" in later.content[0].text  # type: ignore[union-attr]
        unrelated = await s.ok("add_memory", content="The coffee machine on floor 3 takes oat milk.")
        assert "similar" not in unrelated
        # Told how, the client replaces the old fact: both steps leave one live memory about deploys.
        await s.ok("add_memory", action="forget", memoryId=first["id"][:8])
        live = {m["id"] for m in (await s.ok("listMemories"))["memories"]}
        assert live == {saved["memory"]["id"], unrelated["memory"]["id"]}
