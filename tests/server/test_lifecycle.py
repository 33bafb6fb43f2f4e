"""A memory's life through the MCP tools and REST: idempotent saves, folded duplicates, forget by id."""

from __future__ import annotations

import asyncio

import httpx2

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
