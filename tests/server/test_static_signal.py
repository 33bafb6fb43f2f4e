"""The static embedding in a running server: loaded off the request path, then given to every save."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from memory_mcp.store.db import Database
from tests.server.conftest import RunningServer, mcp_session
from tests.server.test_tools import writer_key


async def static_missing(db: Database) -> list[str]:
    """The contents of memories that have no static vector yet."""
    async with db.transaction() as conn:
        spaces = list((await conn.execute(text("SELECT id FROM spaces"))).scalars())
    async with db.transaction(spaces) as conn:
        rows = await conn.execute(text("SELECT content FROM memories WHERE static_embedding IS NULL"))
        return [row.content for row in rows]


async def all_static(db: Database) -> None:
    """Wait (up to a minute) until every memory has its static vector: the model is loaded."""
    for _ in range(600):
        if not await static_missing(db):
            break
        await asyncio.sleep(0.1)
    assert await static_missing(db) == []


async def test_saves_get_their_static_vector_once_the_model_is_loaded(server: RunningServer) -> None:
    key = await writer_key(server)
    async with mcp_session(server, key) as mcp:
        await mcp.ok("add_memory", content="The deploy window is Tuesday 10:00 to 12:00 UTC.")
        # The first save may come before the model is loaded: the background job then fills it in.
        await all_static(server.db)
        # Now loaded: a save and the pieces of a long text get theirs as they are written.
        await mcp.ok("add_memory", content="Ada owns the billing service and its on-call rota.")
        long_text = " ".join(
            f"Section {i}: the release checklist asks for a changelog entry, a migration note and "
            f"a rollback plan before step {i} of the rollout begins."
            for i in range(30)
        )
        saved = await mcp.ok("add_memory", content=long_text)
        assert saved["document"] is not None
        assert await static_missing(server.db) == []
        found = await mcp.ok("search_memory", query="who is on call for billing?")
        assert found["results"][0]["content"].startswith("Ada owns the billing service")


async def test_an_answer_ranks_above_the_question_it_answers(server: RunningServer) -> None:
    """Over MCP, with the static model loaded (its vectors and the soft word match in the ranking):
    the question saved just before its answer repeats the search's words, yet the answer comes first."""
    key = await writer_key(server)
    async with mcp_session(server, key) as mcp:
        await mcp.ok("add_memory", content="Ada, did you have a favourite book as a child?")
        await mcp.ok("add_memory", content="Ada: my favourite book as a child was Charlotte's Web.")
        await all_static(server.db)
        found = await mcp.ok("search_memory", query="What was Ada's favourite book as a child?")
        assert [r["content"] for r in found["results"][:2]] == [
            "Ada: my favourite book as a child was Charlotte's Web.",
            "Ada, did you have a favourite book as a child?",
        ]
