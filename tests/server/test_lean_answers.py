"""Search answers stay lean over MCP: a floor, a token budget, passages, and numbers in order."""

from __future__ import annotations

import datetime as dt
import re

import bpe_openai
from sqlalchemy import text

from memory_mcp.store import spaces
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session
from tests.server.test_documents_rest import client, finished, upload, writer_key

ENC = bpe_openai.get_encoding("cl100k_base")

BILLING = "\n\n".join(
    f"## Billing step {n}\n\n"
    + " ".join(
        f"Invoice batch {n}-{i} is reconciled against the ledger before the charge run starts."
        for i in range(14)
    )
    + (" The ledger worker writes its checkpoints to the table ledger_checkpoints." if n == 3 else "")
    + " ".join(f" Refunds of batch {n}-{i} wait for the finance review." for i in range(6))
    for n in range(6)
)
TRAVEL = "\n\n".join(
    f"## Travel rule {n}\n\n"
    + " ".join(
        f"Trips of type {n}-{i} are booked second class and approved by the team lead." for i in range(16)
    )
    for n in range(6)
)


async def test_answers_drop_weak_results_keep_a_budget_and_show_passages(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        for name, text in (("billing.md", BILLING), ("travel.md", TRAVEL)):
            queued = await upload(http, name, text.encode())
            assert (await finished(http, queued.json()["id"]))["status"] == "done"
    async with mcp_session(docs_server, key) as s:
        # Nothing in the space is about this: the answer says so, in a few lines, with no "closest".
        nothing = await s.call("search_memory", query="quantum chromodynamics lattice gauge theory")
        text = nothing.content[0].text  # type: ignore[union-attr]
        assert nothing.structured_content is not None
        assert nothing.structured_content["results"] == [] and nothing.structured_content["matching"] == 0
        assert "No memory in space 'docs' matches." in text and len(text) <= 1000, len(text)

        # A long piece is shown by the passage that matches, not whole.
        found = await s.ok("search_memory", query="Which table holds the ledger worker checkpoints?")
        top = found["results"][0]
        assert "ledger_checkpoints" in top["content"] and "…" in top["content"]
        assert len(top["content"]) <= 500 and top["source"]["charEnd"] - top["source"]["charStart"] > 1000

        # The budget: results beyond it are counted, not printed, and the answer stays within it.
        wide = await s.call("search_memory", query="invoice batch ledger charge run", limit=20, maxTokens=300)
        wide_text = wide.content[0].text  # type: ignore[union-attr]
        assert wide.structured_content is not None
        more = wide.structured_content["matching"] - wide.structured_content["count"]
        assert more > 0 and wide.structured_content["count"] >= 1
        assert f"{more} more matching memor" in wide_text and "maxTokens" in wide_text
        assert len(ENC.encode(wide_text)) <= 300 * 1.1
        roomy = await s.call(
            "search_memory", query="invoice batch ledger charge run", limit=20, maxTokens=5000
        )
        assert roomy.structured_content is not None
        assert roomy.structured_content["count"] > wide.structured_content["count"]

        # The lines are in the order of the scores (in the structured content), best first; the
        # text spends no tokens on the numbers.
        roomy_text = roomy.content[0].text  # type: ignore[union-attr]
        shown = re.findall(r"^([0-9a-f]{4,8}) ", roomy_text, re.M)
        results = roomy.structured_content["results"]
        scores = [r["score"] for r in results]
        assert len(shown) > 2 and scores == sorted(scores, reverse=True)
        # Each line's id is the shortest prefix of the memory's id that no other memory shares.
        assert shown == [r["shortId"] for r in results] and all(
            r["id"].startswith(r["shortId"]) for r in results
        )
        assert len(set(shown)) == len(shown)
        assert "not instructions" in roomy_text.splitlines()[0]
        assert not re.search(r"^[0-9a-f]{4,8} \.\d\d ", roomy_text, re.M)
        # A document is named once; its later pieces do not repeat it.
        assert roomy_text.count("[doc ") <= 2 < len(shown)
        assert "maxTokens: must be at least 200" in await s.error("search_memory", query="x", maxTokens=10)


async def test_a_search_with_no_match_over_rest_lists_nothing(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        await http.post("/v1/memories", json={"content": "The coffee machine is descaled every Monday."})
        empty = (
            await http.get("/v1/search", params={"query": "quantum chromodynamics lattice gauge"})
        ).json()
        assert empty["results"] == [] and empty["matching"] == 0
        hit = (await http.get("/v1/search", params={"query": "When is the coffee machine descaled?"})).json()
        assert [r["content"] for r in hit["results"]] == ["The coffee machine is descaled every Monday."]
        bad = await http.get("/v1/search", params={"query": "coffee", "maxTokens": 50_000})
        assert bad.status_code == 422 and bad.json()["field"] == "maxTokens"


async def _saved_on(server: RunningServer, space: str, memory_id: str, day: dt.date) -> None:
    found = await spaces.get_space(server.db, space)
    assert found is not None
    async with server.db.transaction([found.id]) as conn:
        await conn.execute(
            text("UPDATE memories SET created_at = :at WHERE id = :id"),
            {"at": dt.datetime.combine(day, dt.time(12), dt.UTC), "id": memory_id},
        )


async def test_a_line_names_only_the_author_or_day_it_does_not_share_with_the_others(
    server: RunningServer,
) -> None:
    await make_space(server.db, "office")
    ann = await make_key(server.db, await make_user(server.db, "ann"), {"office": "ReadWrite"}, "office")
    ben = await make_key(server.db, await make_user(server.db, "ben"), {"office": "ReadWrite"}, "office")
    now = dt.datetime.now(dt.UTC)
    today = f"{now.day} {now:%b} {now.year}"  # "7 Dec 2026": fewer tokens than an ISO date

    async def answer(key: str) -> tuple[str, list[str]]:
        async with mcp_session(server, key) as s:
            result = await s.call("search_memory", query="Lisbon office hours", includeProfile=False)
        lead, *lines = result.content[0].text.splitlines()  # type: ignore[union-attr]
        return lead, lines

    async with mcp_session(server, ann) as s:
        opens = (await s.ok("add_memory", content="The Lisbon office opens at nine."))["memory"]
        await s.ok("add_memory", content="The Lisbon office closes at six.")
    lead, lines = await answer(ann)
    assert lead.endswith(f" by Ann, {today} (not instructions):") and len(lines) == 2
    assert all(re.fullmatch(r"[0-9a-f]{4,8}", line.split(" > ")[0]) for line in lines)  # all said once, above

    # One author over two days of one year: the author and the year once, a day a line.
    await _saved_on(
        server, "office", opens["id"], dt.date(now.year, 1, 5) if now.month > 1 else dt.date(now.year, 2, 5)
    )
    lead, lines = await answer(ann)
    assert lead.endswith(f" by Ann in {now.year} (not instructions):") and today not in lead
    day = today.rsplit(" ", 1)[0]
    other = "5 Jan" if now.month > 1 else "5 Feb"
    assert sorted(line.split(" > ")[0].split(" ", 1)[1] for line in lines) == sorted([other, day])

    # Two years: the lead names none, each line its full day.
    await _saved_on(server, "office", opens["id"], dt.date(2025, 1, 5))
    lead, lines = await answer(ann)
    assert lead.endswith(" by Ann (not instructions):")
    assert sorted(line.split(" > ")[0].split(" ", 1)[1] for line in lines) == sorted(["5 Jan 2025", today])

    # Two authors: each line names its own, with its day.
    async with mcp_session(server, ben) as s:
        await s.ok("add_memory", content="The Lisbon office hours change in August.")
    lead, lines = await answer(ben)
    assert " by " not in lead and "saved" not in lead
    marks = {line.split(" > ")[0].split(" ", 1)[1] for line in lines}
    assert marks == {"Ann, 5 Jan 2025", f"Ann, {today}", f"Ben, {today}"}
