"""Time in recall: dates read from memories and questions, the search time range, and the kinds of
question that weigh the signals differently, against real PostgreSQL and the real model."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest
from sqlalchemy import text

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import dates, intent, memories, search
from memory_mcp.store.db import Database
from memory_mcp.store.errors import ValidationError
from tests.store.test_search import FILLER, find, save, save_all, writer

D = dt.date


@pytest.mark.parametrize(
    ("content", "span"),
    [
        # A text that carries its own date reads its relative words from it.
        ("Caroline (8 May, 2023): I went to a support group yesterday.", (D(2023, 5, 7), D(2023, 5, 8))),
        ("Melanie (25 May, 2023): we went camping last weekend.", (D(2023, 5, 20), D(2023, 5, 25))),
        (
            "Release 4.2 shipped on 2024-03-05; the hotfix followed on March 7.",
            (D(2024, 3, 5), D(2024, 3, 7)),
        ),
        ("Ada joined in June 2021.", (D(2021, 6, 1), D(2021, 6, 30))),
        ("The office moved in 2019.", (D(2019, 1, 1), D(2019, 12, 31))),
        ("Am 3. Februar 2025 war die Migration.", (D(2025, 2, 3), D(2025, 2, 3))),
        # Read from the day it was saved (here 6 December 2026).
        ("The deploy failed yesterday.", (D(2026, 12, 5), D(2026, 12, 5))),
        ("Two weeks ago the cache was rebuilt.", (D(2026, 11, 16), D(2026, 11, 28))),
        ("In May we painted the office.", (D(2026, 5, 1), D(2026, 5, 31))),
        # No date: "may" the verb, a version, a count.
        ("We may move the standup to 10.", None),
        ("Upgrade to version 2.14 and keep 30 replicas.", None),
    ],
)
def test_the_time_of_a_memory_is_the_span_of_the_dates_it_mentions(
    content: str, span: tuple[dt.date, dt.date] | None
) -> None:
    found = dates.memory_time(content, D(2026, 12, 6))
    assert (found.start, found.end) == span if found else span is None


def test_a_question_s_dates_become_a_time_and_leave_its_words() -> None:
    span, words = dates.query_time("What did Caroline paint in May 2023?", D(2026, 12, 6))
    assert span == dates.Span(D(2023, 5, 1), D(2023, 5, 31))
    assert "May" not in words and "2023" not in words and "Caroline paint" in words
    # A question asks about what has been: "May 4th" asked in December is the last 4 May, not the next.
    span, _ = dates.query_time("On May 4th, what did I read?", D(2026, 12, 6))
    assert span == dates.Span(D(2026, 5, 4), D(2026, 5, 4))
    span, _ = dates.query_time("what broke last week?", D(2026, 12, 6))  # a Sunday
    assert span == dates.Span(D(2026, 11, 23), D(2026, 11, 29))
    assert dates.query_time("When did Melanie paint a sunrise?", D(2026, 12, 6)) == (
        None,
        "When did Melanie paint a sunrise?",
    )


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When did Caroline go to the LGBTQ support group?", "temporal"),
        ("How long has Mel been married?", "temporal"),
        ("Wann war die letzte Migration?", "temporal"),
        ("What are Melanie's hobbies?", "trait"),
        ("Would Caroline likely pursue writing as a career?", "trait"),
        ("What is John's favourite band?", "trait"),
        ("What are some immersive RPGs you'd recommend for me?", "trait"),
        ("Can you suggest some great hotels for my trip to Las Vegas?", "trait"),
        ("Welches Restaurant empfiehlst du mir?", "trait"),
        ("What did Melanie suggest Caroline should try?", "fact"),
        ("What activities has Melanie done with her family?", "several"),
        ("Which cities have both of them visited?", "several"),
        ("What is the error code of INC-61839?", "fact"),
        ("Where does Kate work?", "fact"),
    ],
)
def test_a_question_is_read_as_one_kind(question: str, kind: str) -> None:
    assert intent.classify(question) == kind


def test_each_kind_gets_its_own_weights_and_intent_off_gives_one_blend() -> None:
    params = search.SearchParams(
        by_intent="temporal:lexical_weight=0.9; several:candidates=80, context_weight=0.4"
    )
    assert params.for_intent("temporal").lexical_weight == 0.9
    several = params.for_intent("several")
    assert (several.candidates, several.context_weight, several.lexical_weight) == (
        80,
        0.4,
        params.lexical_weight,
    )
    assert params.for_intent("fact") == params
    off = dataclasses.replace(params, intent_aware=False)
    assert off.for_intent("temporal") == off
    for bad in ("often:lexical_weight=1", "fact:by_intent=x", "fact:no_such=1"):
        with pytest.raises(ValueError, match="by_intent"):
            search.SearchParams(by_intent=bad).for_intent("fact")


async def _saved_on(db: Database, space_id: uuid.UUID, memory_id: uuid.UUID, day: dt.date) -> None:
    async with db.transaction([space_id]) as conn:
        await conn.execute(
            text("UPDATE memories SET created_at = :at WHERE id = :id"),
            {"at": dt.datetime.combine(day, dt.time(12), dt.UTC), "id": memory_id},
        )


async def test_a_time_range_keeps_the_memories_of_those_days_by_their_dates_else_their_save_day(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    march = await save(
        db, ctx, embedder, "The payments outage on 4 March 2025 came from an expired certificate."
    )
    april = await save(db, ctx, embedder, "The payments outage on 9 April 2025 came from a full disk.")
    undated = await save(db, ctx, embedder, "A payments outage once came from a bad deploy.")
    await _saved_on(db, ctx.space.id, undated.id, D(2025, 3, 20))  # no date in its text: its save day counts
    query = "why was there a payments outage?"
    vector = await embedder.embed_query(query)

    async def ids(since: dt.date | None, until: dt.date | None) -> list[uuid.UUID]:
        found = await search.search_memories(db, ctx, query, query_embedding=vector, since=since, until=until)
        return [h.memory.id for h in found.hits]

    in_march = await ids(D(2025, 3, 1), D(2025, 3, 31))
    assert march.id in in_march and undated.id in in_march and april.id not in in_march
    assert await ids(D(2025, 4, 1), D(2025, 12, 31)) == [april.id]
    assert set(await ids(None, None)) >= {march.id, april.id, undated.id}
    with pytest.raises(ValidationError) as refused:
        await search.search_memories(db, ctx, query, since=D(2025, 4, 1), until=D(2025, 3, 1))
    assert refused.value.field == "until"


async def test_a_question_that_names_a_time_puts_the_memories_of_that_time_first(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    april = await save(db, ctx, embedder, "Ravi (9 April, 2025): I painted a lake at sunrise.")
    may = await save(db, ctx, embedder, "Ravi (14 May, 2025): I painted a lake at sunset.")
    result = await find(db, ctx, embedder, "What did Ravi paint in May 2025?")
    assert result.hits[0].memory.id == may.id and result.intent == "fact"
    unboosted = search.SearchParams(time_weight=0)
    plain = await find(db, ctx, embedder, "What did Ravi paint in May 2025?", params=unboosted)
    top = {h.memory.id: h.score for h in plain.hits[:2]}
    boosted = {h.memory.id: h.score for h in result.hits[:2]}
    assert set(top) == {april.id, may.id}
    assert boosted[may.id] - top[may.id] > boosted[april.id] - top[april.id]


async def test_a_result_is_named_by_the_shortest_id_prefix_no_other_memory_of_the_space_shares(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    first = await save(db, ctx, embedder, "The blue team owns the billing service.")
    second = await save(db, ctx, embedder, "The green team owns the search service.")
    found = await find(db, ctx, embedder, "who owns the billing service?")
    refs = {h.memory.id: h.ref for h in found.hits}
    assert refs[first.id] == str(first.id)[:4] and refs[second.id] == str(second.id)[:4]
    # Another memory whose id starts with the same 4 (then 6) digits: the answer tells them apart.
    for digits, expected in ((4, 6), (6, 8)):
        twin = uuid.UUID(str(first.id)[:digits] + str(uuid.uuid4()).replace("-", "")[digits:])
        async with db.transaction([ctx.space.id]) as conn:
            await conn.execute(
                text("UPDATE memories SET id = :twin WHERE id = :id"), {"twin": twin, "id": second.id}
            )
        second = dataclasses.replace(second, id=twin)
        found = await find(db, ctx, embedder, "who owns the billing service?")
        refs = {h.memory.id: h.ref for h in found.hits}
        assert refs[first.id] == str(first.id)[:expected] and refs[twin] == str(twin)[:expected]
    # Every tool takes the shortest form back.
    forgotten = await memories.forget_memory(db, ctx, refs[first.id])
    assert forgotten.forgotten is not None and forgotten.forgotten.id == first.id
