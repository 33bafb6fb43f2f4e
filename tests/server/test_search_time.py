"""A search's time range over real HTTP: MCP's search_memory and REST's /v1/search keep the memories
of those days, and a bad range is a validation error naming the field, never a 5xx."""

from __future__ import annotations

from tests.server.conftest import RunningServer, mcp_session
from tests.server.test_documents_rest import client, writer_key

NOTES = [
    "The payments outage on 4 March 2025 came from an expired certificate.",
    "The payments outage on 9 April 2025 came from a full disk.",
    "The payments outage in June 2025 came from a bad deploy.",
]


async def test_search_keeps_the_memories_of_a_time_range_over_mcp_and_rest(server: RunningServer) -> None:
    key = await writer_key(server)
    async with mcp_session(server, key) as s:
        for note in NOTES:
            await s.ok("add_memory", content=note)
        found = await s.ok(
            "search_memory",
            query="payments outage cause",
            since="2025-04-01",
            until="2025-04-30",
            includeProfile=False,
        )
        assert [r["content"] for r in found["results"]] == [NOTES[1]]
        # The answer names it by a short id the tools take back.
        short = found["results"][0]["shortId"]
        assert 4 <= len(short) <= 8 and found["results"][0]["id"].startswith(short)
        assert (
            f"{short} > {NOTES[1]}"
            in (
                await s.call(
                    "search_memory",
                    query="payments outage cause",
                    since="2025-04-01",
                    until="2025-04-30",
                    includeProfile=False,
                )
            )
            .content[0]
            .text
        )  # type: ignore[union-attr]
        spring = await s.ok(
            "search_memory", query="payments outage cause", until="2025-05-31", includeProfile=False
        )
        assert {r["content"] for r in spring["results"]} == set(NOTES[:2])
        assert "until" in await s.error(
            "search_memory", query="outage", since="2025-05-01", until="2025-04-01"
        )
        assert "since" in await s.error("search_memory", query="outage", since="last tuesday")

    async with client(server, key) as http:
        june = await http.get("/v1/search", params={"query": "payments outage cause", "since": "2025-06-01"})
        assert june.status_code == 200, june.text
        assert [r["content"] for r in june.json()["results"]] == [NOTES[2]]
        for params in (
            {"since": "2025-05-01", "until": "2025-04-01"},
            {"since": "yesterday"},
            {"until": "2025-13-01"},
        ):
            refused = await http.get("/v1/search", params={"query": "outage", **params})
            assert 400 <= refused.status_code < 500, (params, refused.text)
