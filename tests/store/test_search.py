"""Hybrid search against real PostgreSQL and the real embedding model: modes, fusion, filters, spaces."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import uuid
from collections import Counter, namedtuple

import pytest
from sqlalchemy import text

from memory_mcp.embedder.client import Embedder
from memory_mcp.embedder.static import StaticModel
from memory_mcp.server.backfill import backfill, backfill_static
from memory_mcp.store import documents, identity, intent, memories, pipeline, profile, search, spaces
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.extractors.base import Extracted, Section
from memory_mcp.store.models import Memory, SpaceContext
from tests.factories import make_key, make_space, make_user


async def writer(db: Database, space: str = "team") -> SpaceContext:
    if await spaces.get_space(db, space) is None:
        await make_space(db, space)
    caller = await identity.authenticate(
        db, await make_key(db, await make_user(db), {space: Access.READ_WRITE})
    )
    return identity.resolve_space(caller, space)


async def save(
    db: Database, ctx: SpaceContext, embedder: Embedder | None, content: str, category: str | None = None
) -> Memory:
    vector = (await embedder.embed([content]))[0] if embedder is not None else None
    return (await memories.save_memory(db, ctx, content, category, vector)).memory


async def save_vector(db: Database, ctx: SpaceContext, content: str, vector: list[float]) -> Memory:
    return (await memories.save_memory(db, ctx, content, None, vector)).memory


async def save_all(
    db: Database, ctx: SpaceContext, embedder: Embedder, contents: list[str], category: str | None = None
) -> list[Memory]:
    vectors = await embedder.embed(contents)
    return [
        (await memories.save_memory(db, ctx, c, category, v)).memory
        for c, v in zip(contents, vectors, strict=True)
    ]


async def find(
    db: Database,
    ctx: SpaceContext,
    embedder: Embedder | None,
    query: str | None = None,
    keyword: str | None = None,
    category: str | None = None,
    limit: int = 10,
    params: search.SearchParams | None = None,
) -> search.SearchResult:
    vector = await embedder.embed_query(query) if embedder is not None and query else None
    return await search.search_memories(db, ctx, query, keyword, category, vector, limit, params)


def contents(result: search.SearchResult) -> list[str]:
    return [h.memory.content for h in result.hits]


FILLER = [
    "The coffee machine on the third floor is descaled on Mondays.",
    "Quarterly planning happens in the Atlas room.",
    "The staging cluster runs three nodes.",
    "Holiday requests go through the HR portal.",
    "The office plants are watered on Thursdays.",
    "Our design reviews happen every other Wednesday.",
]


async def test_semantic_search_finds_a_paraphrase_that_shares_no_words(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    target = await save(db, ctx, embedder, "Priya is vegetarian, so book restaurants with meat-free dishes.")
    question = "Any dietary needs when taking her out to dinner?"
    assert not set(question.lower().split()) & set(target.content.lower().split())
    result = await find(db, ctx, embedder, question)
    assert result.hits[0].memory.id == target.id
    assert "semantic" in result.hits[0].modes and "semantic" in result.modes
    assert result.hits[0].similarity is not None and result.hits[0].similarity > 0.3


async def test_full_text_search_matches_words_and_splits_codes_like_the_stored_text(db: Database) -> None:
    ctx = await writer(db)
    for content in FILLER:
        await save(db, ctx, None, content)
    incident = await save(
        db, ctx, None, "Postmortem INC-61839: E_LOCK_TIMEOUT in checkout after a schema migration."
    )
    await save(db, ctx, None, "Postmortem INC-61893: ERR_DNS_TIMEOUT in billing after a failover.")
    result = await find(db, ctx, None, "What do we know about INC-61839?")
    assert result.modes == ("fulltext",)
    assert result.hits[0].memory.id == incident.id  # both ids share 'inc'; only one holds '-61839'
    assert await find(db, ctx, None, "what is the") == search.SearchResult([], ("fulltext",), intent="fact")


async def test_keyword_finds_codes_and_partial_words_literally(db: Database, embedder: Embedder) -> None:
    ctx = await writer(db)
    code = await save(db, ctx, embedder, "INC-20431: checkout timed out for 50 minutes.")
    await save(db, ctx, embedder, "INC-21043: billing returned errors after a deploy.")
    word = await save(db, ctx, embedder, "Ledger reconciliation runs every night.")
    percent = await save(db, ctx, embedder, "The error budget is 0.5% per month.")
    underscore = await save(db, ctx, embedder, "Set FEATURE_X to true in staging.")
    await save(db, ctx, embedder, "Set FEATUREXX to false in production.")

    assert [h.memory.id for h in (await find(db, ctx, embedder, keyword="INC-204")).hits] == [code.id]
    assert [h.memory.id for h in (await find(db, ctx, embedder, keyword="reconcil")).hits] == [word.id]
    assert [h.memory.id for h in (await find(db, ctx, embedder, keyword="5%")).hits] == [percent.id]
    # '%' and '_' are literal characters, not LIKE wildcards.
    assert (await find(db, ctx, embedder, keyword="INC-%31")).hits == []
    assert [h.memory.id for h in (await find(db, ctx, embedder, keyword="FEATURE_X")).hits] == [underscore.id]
    # With a question, the keyword still restricts every mode, and its match is always ranked.
    result = await find(db, ctx, embedder, "What happened during the outage?", keyword="INC-204")
    assert [h.memory.id for h in result.hits] == [code.id]
    assert set(result.hits[0].modes) >= {"semantic", "keyword"}


async def test_category_filter_restricts_and_alone_lists_newest_first(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    decision = await save(db, ctx, embedder, "Decision: the order service stays on PostgreSQL.", "decision")
    await save(
        db,
        ctx,
        embedder,
        "Meeting note: we discussed moving the order service to PostgreSQL.",
        "meeting-note",
    )
    later = await save(db, ctx, embedder, "Decision: new services are written in Go.", "decision")
    result = await find(db, ctx, embedder, "Which database does the order service use?", category="decision")
    assert {h.memory.category for h in result.hits} == {"decision"}
    assert result.hits[0].memory.id == decision.id and "category" in result.hits[0].modes
    listed = await find(db, ctx, embedder, category="Decision")
    assert [h.memory.id for h in listed.hits] == [later.id, decision.id]


async def test_a_memory_matched_by_both_modes_outranks_one_matched_by_one(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    both = await save(db, ctx, embedder, "The payout worker retries failed transfers three times.")
    words_only = await save(db, ctx, embedder, "Worker badges are printed at reception.")
    meaning_only = await save(
        db, ctx, embedder, "Failed bank transfers are attempted again up to three times."
    )
    result = await find(db, ctx, embedder, "payout worker retries", limit=3)
    by_id = {h.memory.id: h for h in result.hits}
    assert set(by_id[both.id].modes) == {"semantic", "fulltext"}
    assert by_id[both.id].score > max(by_id[words_only.id].score, by_id[meaning_only.id].score)
    assert result.hits[0].memory.id == both.id


async def test_fused_score_is_similarity_plus_weighted_full_text_plus_recency(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    full = await save(db, ctx, embedder, "Grafana dashboards live in the observability folder.")
    partial = await save(db, ctx, embedder, "The folder of printed invoices is in the cellar.")
    # A memory's own score, without the share of its neighbours' (the two were saved one after the
    # other; test_a_reply_is_found_through_the_turn_its_writer_saved_before_it has that share).
    params = search.SearchParams(context=False)
    result = await find(db, ctx, embedder, "grafana dashboards folder", limit=5, params=params)
    by_id = {h.memory.id: h for h in result.hits}
    assert [h.memory.id for h in result.hits] == [full.id, partial.id]
    best, other = by_id[full.id], by_id[partial.id]
    assert best.similarity is not None and other.similarity is not None
    # Holding every query word, the first has the best full-text score: the whole lexical weight.
    assert best.score == pytest.approx(best.similarity + params.lexical_weight, abs=2e-4)
    # The second holds one word of three: a share of the weight, by how rare "folder" is.
    share = (other.score - other.similarity) / params.lexical_weight
    assert 0.05 < share < 0.6
    assert best.modes == other.modes == ("semantic", "fulltext")


async def test_a_query_word_no_memory_holds_still_counts_in_the_querys_weight(db: Database) -> None:
    """A memory holding only the one query word the space knows covers a share of the query, not all.

    Full text alone (no vector), so a score is exactly the share of the query's weight a memory
    holds; each word weighs its BM25 inverse document frequency, a word no memory holds the most.
    """
    ctx = await writer(db)
    for content in FILLER:
        await save(db, ctx, None, content)
    grafana = await save(db, ctx, None, "Grafana dashboards live in the observability folder.")
    n = len(FILLER) + 1
    known = math.log(1 + (n - 1 + 0.5) / (1 + 0.5))
    unseen = math.log(1 + (n + 0.5) / 0.5)
    own = search.SearchParams(context=False)  # its own score, no share of its neighbours'
    result = await find(db, ctx, None, "grafana zeppelin", params=own)
    assert [h.memory.id for h in result.hits] == [grafana.id]
    assert result.hits[0].score == pytest.approx(known / (known + unseen), abs=2e-4)
    assert (await find(db, ctx, None, "grafana", params=own)).hits[0].score == pytest.approx(1.0)


@pytest.mark.parametrize(("df_cap", "rows_per_term"), [(10, 2), (2, 4)])
async def test_full_text_reads_each_words_first_matches_and_counts_them_up_to_the_cap(
    db: Database, df_cap: int, rows_per_term: int
) -> None:
    """Each query word brings its first ``rows_per_term`` matches (in the table's order) as
    candidates and weighs its count of matches up to ``df_cap``, also when the first is the larger:
    what any rewrite of the full-text list has to keep."""
    ctx = await writer(db)
    alpha = [await save(db, ctx, None, f"Alpharetta note number {n} of six.") for n in range(6)]
    beta = await save(db, ctx, None, "Betelgeuse is the only one here.")
    n = len(alpha) + 1
    idf = {df: math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in (1, min(len(alpha), df_cap))}
    alpha_idf, beta_idf = idf[min(len(alpha), df_cap)], idf[1]
    own = search.SearchParams(context=False, df_cap=df_cap, rows_per_term=rows_per_term)
    result = await find(db, ctx, None, "alpharetta betelgeuse", params=own)
    assert {h.memory.id for h in result.hits} == {beta.id} | {m.id for m in alpha[:rows_per_term]}
    scores = {h.memory.id: h.score for h in result.hits}
    assert scores[beta.id] == pytest.approx(beta_idf / (alpha_idf + beta_idf), abs=2e-4)
    for memory in alpha[:rows_per_term]:
        assert scores[memory.id] == pytest.approx(alpha_idf / (alpha_idf + beta_idf), abs=2e-4)


async def test_counts_that_reached_their_caps_are_not_made_again_until_their_time_passes(
    db: Database,
) -> None:
    """A space's size and a word's count that reached ``space_cap`` and ``df_cap`` are remembered
    for ``capped_ttl_s``: the weights they give stay exact while memories are added, and are only
    stale (the capped counts' weights) when the space shrinks under a cap within that time. Once
    it passes, the counts are made again."""
    ctx = await writer(db)
    alpha = [await save(db, ctx, None, f"Alpharetta note number {n} of six.") for n in range(6)]
    beta = await save(db, ctx, None, "Betelgeuse is the only one here.")

    def idf(n: int, df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def scores(result: search.SearchResult) -> dict[uuid.UUID, float]:
        return {h.memory.id: h.score for h in result.hits}

    ttl = 0.5
    caps = search.SearchParams(context=False, space_cap=5, df_cap=3, capped_ttl_s=ttl)
    exact = dataclasses.replace(caps, capped_ttl_s=0)  # counts every time
    question = "alpharetta betelgeuse"
    capped_alpha, capped_beta = idf(5, 3), idf(5, 1)  # 7 memories counted to 5, six alphas to 3
    first = scores(await find(db, ctx, None, question, params=caps))
    assert first[beta.id] == pytest.approx(capped_beta / (capped_alpha + capped_beta), abs=2e-4)
    assert first == scores(await find(db, ctx, None, question, params=exact))  # nothing changed: the same
    alpha.append(await save(db, ctx, None, "Alpharetta note number 6, one more."))  # added: still capped
    added = scores(await find(db, ctx, None, question, params=caps))
    assert added == scores(await find(db, ctx, None, question, params=exact))
    assert added[beta.id] == pytest.approx(first[beta.id], abs=1e-4)
    for memory in alpha[2:]:  # three memories are left: both caps are out of reach now
        await memories.forget_memory(db, ctx, "", memory_id=memory.id)
    now_alpha, now_beta = idf(3, 2), idf(3, 1)
    stale = scores(await find(db, ctx, None, question, params=caps))
    assert stale[beta.id] == pytest.approx(capped_beta / (capped_alpha + capped_beta), abs=2e-4)
    made = scores(await find(db, ctx, None, question, params=exact))
    assert made[beta.id] == pytest.approx(now_beta / (now_alpha + now_beta), abs=2e-4)
    assert made[beta.id] != pytest.approx(stale[beta.id], abs=1e-3)
    await asyncio.sleep(ttl + 0.1)
    assert scores(await find(db, ctx, None, question, params=caps)) == made


async def test_a_searchs_statements_run_on_their_generic_plan_from_the_first_prepared_run(
    db_urls: tuple[str, str],
) -> None:
    """PostgreSQL plans a prepared statement's first five runs with their values and then keeps its
    generic plan only when that looks no dearer; in a big space it never did, and every search was
    planned again. The search's transaction asks for the generic plan, so no run is planned anew."""
    single = Database(db_urls[0], pool_size=1)  # one connection: its prepared statements
    try:
        ctx = await writer(single)
        for content in FILLER:
            await save(single, ctx, None, content)
        for _ in range(12):  # the driver prepares a statement after its fifth run
            assert (await find(single, ctx, None, "design reviews on Wednesday")).hits
        async with single.driver_transaction() as pg:
            plans = await (
                await pg.execute(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement LIKE '%%ranked AS MATERIALIZED%%'"
                )
            ).fetchall()
    finally:
        await single.close()
    [(generic, custom)] = plans
    assert generic > 0 and custom == 0


async def test_results_come_back_in_score_order(db: Database, embedder: Embedder) -> None:
    """No rule reorders by age: two restatements of one fact stay in score order, both visible."""
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    old = await save(db, ctx, embedder, "The daily standup is at 9:30 in the Atlas room.")
    new = await save(db, ctx, embedder, "The daily standup is at 9:45 in the Atlas room!")
    for query in ("When is the daily standup in the Atlas room at 9:30?", "dashboards", "who owns billing"):
        result = await find(db, ctx, embedder, query)
        scores = [h.score for h in result.hits]
        assert len(scores) > 3 and scores == sorted(scores, reverse=True)
    ranked = [h.memory.id for h in (await find(db, ctx, embedder, "daily standup at 9:30 Atlas room")).hits]
    assert ranked.index(old.id) < ranked.index(new.id)  # the older one says 9:30: it matches better


async def test_a_nonsense_query_gets_no_matching_result(db: Database, embedder: Embedder) -> None:
    """Below the relevance floor a result is only the closest there is, never a match."""
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    nonsense = await find(db, ctx, embedder, "quantum chromodynamics lattice gauge theory")
    assert nonsense.hits and nonsense.matching == 0
    assert all(
        h.similarity is not None and h.similarity < search.SearchParams().min_similarity
        for h in nonsense.hits
    )
    real = await find(db, ctx, embedder, FILLER[0])
    assert real.hits[0].matching and real.matching >= 1


async def test_the_static_signal_adds_to_the_score_of_the_other_lists_candidates(
    db: Database, static_model: StaticModel
) -> None:
    """A candidate of the full-text list gains the static weight times its static similarity; a
    memory neither other list finds is not brought in by the static vector (it scans no index)."""
    ctx = await writer(db)
    query = "Which vegetables does the kitchen garden grow?"
    target_text = "The kitchen garden has tomatoes, courgettes and beans beside the greenhouse."
    unmatched_text = "Tomatoes, courgettes and beans are planted beside the greenhouse."
    saved = {}
    for text_ in (target_text, unmatched_text, *FILLER):
        saved[text_] = (
            await memories.save_memory(db, ctx, text_, static_embedding=static_model.vectors([text_])[0])
        ).memory
    static_query = static_model.vectors([query])[0]

    async def found(params: search.SearchParams) -> dict[uuid.UUID, float]:
        result = await search.search_memories(
            db, ctx, query, limit=5, params=params, static_embedding=static_query
        )
        return {hit.memory.id: hit.score for hit in result.hits}

    on, off = (
        await found(search.SearchParams(static_weight=0.7, context=False)),
        await found(search.SearchParams(static=False, context=False)),
    )
    target = saved[target_text].id
    similarity = float(static_model.encode([query])[0] @ static_model.encode([target_text])[0])
    assert similarity > 0.2
    assert on[target] - off[target] == pytest.approx(0.7 * similarity, abs=2e-3)
    assert saved[unmatched_text].id not in on and saved[unmatched_text].id not in off


async def test_a_rare_category_keeps_semantic_recall(db: Database, embedder: Embedder) -> None:
    """Most of the space is other categories; the ANN scan must keep going until the filter is met."""
    ctx = await writer(db)
    await save_all(
        db, ctx, embedder, [f"{sentence} (note {i})" for i in range(30) for sentence in FILLER], "chatter"
    )
    target = await save(db, ctx, embedder, "The VPN gateway for contractors is vpn2.example.com.", "howto")
    await save(db, ctx, embedder, "Expense claims are submitted through Pleo.", "howto")
    # Both paths: the exact search a selective filter gets by default, and the HNSW scan (forced with
    # exact_below=0) with a small ef_search, so one scan step returns far fewer rows than the filter
    # needs and only the iterative scan reaches the match.
    question = "How do external people connect to the network?"
    for params in (
        search.SearchParams(fulltext=False),
        search.SearchParams(ef_search=10, exact_below=0, fulltext=False),
    ):
        result = await find(db, ctx, embedder, question, category="howto", params=params)
        assert result.hits and result.hits[0].memory.id == target.id
        assert {h.memory.category for h in result.hits} == {"howto"}


async def test_only_latest_unforgotten_memories_are_returned(db: Database, embedder: Embedder) -> None:
    ctx = await writer(db)
    old = await save(db, ctx, embedder, "The deploy freeze starts on the 20th.")
    vector = (await embedder.embed(["The deploy freeze starts on the 18th."]))[0]
    new = (
        await memories.save_memory(
            db, ctx, "The deploy freeze starts on the 18th.", None, vector, supersedes_id=old.id
        )
    ).memory
    gone = await save(db, ctx, embedder, "The deploy freeze is announced in #releases.")
    await memories.forget_memory(db, ctx, gone.content)
    for query, keyword in (("When does the deploy freeze start?", None), (None, "deploy freeze")):
        hits = (await find(db, ctx, embedder, query, keyword)).hits
        assert [h.memory.id for h in hits] == [new.id]
        assert hits[0].memory.is_latest and hits[0].memory.forgotten_at is None


async def test_without_an_embedding_search_answers_from_full_text_and_says_why(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    target = await save(db, ctx, embedder, "Backups of the ledger database are restored every Friday.")
    await save(db, ctx, embedder, "The ledger team sits on the fourth floor.")
    reason = "semantic search unavailable: embedder down; results come from full-text search only"
    result = await search.search_memories(db, ctx, "ledger backups restored", fallback=reason)
    assert result.fallback == reason and result.modes == ("fulltext",)
    assert result.hits[0].memory.id == target.id and result.hits[0].similarity is None


async def test_a_memory_saved_without_a_vector_is_found_by_full_text_then_embedded_by_backfill(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    await save(db, ctx, embedder, "The staging cluster runs three nodes.")
    pending = await save(db, ctx, None, "Contractors connect through the vpn2 gateway.")
    assert not pending.has_embedding
    question = "How do external people reach our network?"
    before = await find(db, ctx, embedder, question)
    assert pending.id not in [h.memory.id for h in before.hits if "semantic" in h.modes]
    words = await find(db, ctx, embedder, "vpn2 gateway")
    assert words.hits[0].memory.id == pending.id and words.hits[0].modes == ("fulltext",)
    assert await backfill(db, embedder) == 1
    after = await find(db, ctx, embedder, question)
    assert after.hits[0].memory.id == pending.id and "semantic" in after.hits[0].modes


async def test_the_static_backfill_fills_every_missing_vector_in_resumable_batches(
    db: Database, static_model: StaticModel
) -> None:
    """Rows saved before the static model existed get its vector, batch by batch (a stopped run
    leaves committed batches done and the next run finishes the rest), the same one a save gives."""
    ctx = await writer(db)
    other = await writer(db, "other")
    texts = [f"{filler} (note {i})" for i, filler in enumerate(FILLER)]
    for i, content in enumerate(texts):
        await memories.save_memory(db, ctx if i % 2 else other, content)
    assert await memories.count_missing_embeddings(db, "static_embedding") == len(texts)
    batches: list[int] = []
    first = await memories.missing_embeddings(db, 2, column="static_embedding")
    await memories.store_embeddings(
        db,
        [(s, m, v) for (s, m, _), v in zip(first, static_model.vectors([c for *_, c in first]), strict=True)],
        column="static_embedding",
    )
    assert await backfill_static(db, static_model, batch_size=2, progress=batches.append) == len(texts) - 2
    assert batches == [2, 2]
    assert await memories.count_missing_embeddings(db, "static_embedding") == 0
    assert await backfill_static(db, static_model) == 0
    query = static_model.vectors([texts[1]])[0]
    own = search.SearchParams(context=False)  # its own score, no share of its neighbours'
    found = await search.search_memories(db, ctx, texts[1], limit=1, params=own, static_embedding=query)
    # No model vector: full text holds every word (weight 1) and the static vector is the text's own.
    assert found.hits[0].memory.content == texts[1]
    assert found.hits[0].score == pytest.approx(1 + search.SearchParams().static_weight, abs=2e-3)


async def test_a_stronger_match_in_another_space_is_never_returned(db: Database, embedder: Embedder) -> None:
    ours = await writer(db, "ours")
    theirs = await writer(db, "theirs")
    exact = "The payout worker retries failed transfers three times."
    secret = await save(db, theirs, embedder, exact)
    mine = await save(db, ours, embedder, "Payouts are sent on Fridays.")
    for query, keyword in ((exact, None), (None, "payout worker"), (exact, "retries")):
        result = await find(db, ours, embedder, query, keyword)
        ids = {h.memory.id for h in result.hits}
        assert secret.id not in ids
        assert ids <= {mine.id}
    assert [h.memory.id for h in (await find(db, ours, embedder, exact)).hits] == [mine.id]


async def test_recording_recalls_leaves_the_memories_rows_alone(db: Database) -> None:
    """Recall counts change with every batch of searches; they are kept beside the memories
    (``memory_recalls``), so no batch writes a new version of a memory's row, its text and vectors
    (which would dirty its page, and off the page add an entry to every index, the HNSW graph
    included). A memory deleted before its batch is written is skipped, not an error."""
    ctx = await writer(db)
    rng = random.Random(11)
    saved = [
        await save_vector(
            db, ctx, f"Fact number {i} about the deploy pipeline.", [rng.random() for _ in range(384)]
        )
        for i in range(100)
    ]
    recalled: Counter[uuid.UUID] = Counter()
    for _ in range(20):  # each batch: the ten memories a few searches returned
        batch = rng.sample(saved, 10)
        recalled.update(m.id for m in batch)
        await search.record_recalls(db, {(ctx.space.id, m.id): 1 for m in batch})
    await search.record_recalls(db, {(ctx.space.id, uuid.uuid4()): 3})  # a memory gone meanwhile
    async with db.transaction([ctx.space.id]) as conn:
        counts = {
            row.memory_id: row.recall_count
            for row in await conn.execute(text("SELECT memory_id, recall_count FROM memory_recalls"))
        }
        await conn.execute(text("SELECT pg_stat_force_next_flush()"))  # this backend's counters
    assert counts == dict(recalled)
    written, memories_updated = 0, -1
    for _ in range(50):  # the statistics arrive asynchronously
        async with db.transaction() as conn:
            await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            rows = {
                row.relname: row.written
                for row in await conn.execute(
                    text(
                        "SELECT relname, n_tup_ins + n_tup_upd AS written FROM pg_stat_user_tables"
                        " WHERE relname IN ('memories', 'memory_recalls')"
                    )
                )
            }
        written = rows.get("memory_recalls", 0)
        memories_updated = rows.get("memories", 0) - len(saved)  # its inserts are the saves
        if written >= 200:
            break
        await asyncio.sleep(0.2)
    assert written == 200
    assert memories_updated == 0


async def test_profile_stays_within_budget_and_separates_stable_from_recent(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    saved = await save_all(
        db, ctx, embedder, [f"{sentence} (fact {i})" for i in range(4) for sentence in FILLER]
    )
    long = await save(db, ctx, None, "A very long meeting summary. " * 60)
    recalled = saved[0]
    await search.record_recalls(db, {(ctx.space.id, recalled.id): 5})
    for budget in (50, 120, 400):
        p = await profile.build_profile(db, ctx, budget)
        assert p.tokens <= budget
        lines = [*p.stable, *p.recent]
        assert p.tokens == profile.HEADING_TOKENS + sum(
            profile.estimate_tokens(m.content) + profile.LINE_TOKENS for m in lines
        )
        assert not {m.id for m in p.stable} & {m.id for m in p.recent}
    p = await profile.build_profile(db, ctx, 400)
    assert p.stable[0].id == recalled.id  # the most recalled fact leads the stable part
    newest = [m.id for m in saved[-3:]]
    assert set(newest) <= {m.id for m in p.recent}  # the newest facts are the recent part
    assert long.id not in {m.id for m in [*p.stable, *p.recent]}  # too long for this budget, skipped


async def test_the_stable_profile_is_the_most_recalled_then_the_oldest(db: Database) -> None:
    """Most recalled first, the older first among equal counts, and statements never recalled
    after every recalled one, oldest first: in a space of more statements than the profile reads."""
    ctx = await writer(db)
    saved = [await save(db, ctx, None, f"Statement {i} about the release train.") for i in range(60)]
    await search.record_recalls(db, {(ctx.space.id, m.id): n for m, n in ((saved[50], 3), (saved[20], 1))})
    await search.record_recalls(db, {(ctx.space.id, saved[5].id): 3})
    p = await profile.build_profile(db, ctx, 4000)
    assert [m.id for m in p.stable[:6]] == [
        m.id for m in (saved[5], saved[50], saved[20], saved[0], saved[1], saved[2])
    ]


async def test_the_profile_is_made_of_saved_statements_not_pieces_of_documents(
    db: Database, embedder: Embedder
) -> None:
    ctx = await writer(db)
    saved = await save_all(db, ctx, embedder, FILLER[:3])
    manual = "\n\n".join(
        f"Step {i}: restart worker {i} of the billing queue, then check its lag." for i in range(300)
    )
    stored, made = await documents.save_text(db, ctx, None, pipeline.prepare_text(manual))
    assert made > 3
    async with db.transaction([ctx.space.id]) as conn:
        pieces = (
            await conn.execute(
                text("SELECT id FROM memories WHERE document_id = :d"), {"d": stored.document.id}
            )
        ).scalars()
        await search.record_recalls(db, {(ctx.space.id, piece): 9 for piece in list(pieces)[:2]})
    p = await profile.build_profile(db, ctx, 400)
    assert {m.id for m in [*p.stable, *p.recent]} == {m.id for m in saved}


async def test_a_reply_is_found_through_the_turn_its_writer_saved_before_it(
    db: Database, embedder: Embedder
) -> None:
    """Memories a writer saves one after another carry context for each other: a reply that shares
    no word with the question gains a share of the score of the turn it answers, saved just before
    it by the same writer, and so moves above weaker matches. Another writer's memory saved in
    between is no neighbour of either: it gets its context from its own writer's memories."""
    ctx, other = await writer(db), await writer(db)
    await save_all(db, other, embedder, FILLER)
    asked = await save(db, ctx, embedder, "Sam: Did you and Alex go anywhere nice for your honeymoon?")
    between = await save(db, other, embedder, "Travel expenses are reimbursed within two weeks of the trip.")
    reply = await save(db, ctx, embedder, "Alex: Yes, Lisbon! We had pastries by the river every morning.")
    offsite, *weaker = await save_all(
        db,
        other,
        embedder,
        [
            "Alex booked the team offsite at a hotel by the lake.",
            "Sam's favourite holiday destination is the mountains in autumn.",
        ],
    )
    question = "Where did Sam and Alex go on their honeymoon?"
    weight = search.SearchParams().for_intent(intent.classify(question)).context_weight
    off = await find(db, ctx, embedder, question, params=search.SearchParams(context=False))
    on = await find(db, ctx, embedder, question)
    score_off = {h.memory.id: h.score for h in off.hits}
    score_on = {h.memory.id: h.score for h in on.hits}
    rank_off, rank_on = list(score_off), list(score_on)

    # The turn asked a question: its shown score lost the question penalty, its own score did not.
    asked_own = score_off[asked.id] + search.SearchParams().question_penalty
    assert score_on[reply.id] - score_off[reply.id] == pytest.approx(weight * asked_own, abs=2e-3)
    assert rank_off.index(reply.id) > rank_off.index(offsite.id) > rank_off.index(weaker[0].id)
    assert rank_on.index(reply.id) < min(rank_on.index(offsite.id), rank_on.index(weaker[0].id))
    # Its writer's neighbour is the offsite memory saved after it, not the question saved before.
    gain = score_on[between.id] - score_off[between.id]
    assert gain == pytest.approx(weight * score_off[offsite.id], abs=2e-3)
    assert gain < weight * asked_own / 2


async def test_a_piece_of_a_document_gets_context_from_the_pieces_beside_it(
    db: Database, embedder: Embedder
) -> None:
    """The pieces of one document are written together (one time for all of them), so their
    neighbours are the pieces beside them by position: the answer after a question gains a share of
    its score and passes memories that matched it better alone; the piece two places further gets
    the share of its own neighbours only."""
    ctx = await writer(db)
    await save_all(db, ctx, embedder, FILLER)
    # Saved by writers of their own: no neighbours, so the same score both ways.
    weaker = [
        await save(db, await writer(db), embedder, t)
        for t in ("Payroll is paid on the 25th.", "Files of the finance team are on the shared drive.")
    ]
    texts = [
        "Q: Where do the monthly payroll files end up?",
        "A: In the finance bucket, uploaded at six in the morning and kept for seven years.",
        "Q: Who approves a new laptop?",
        "A: Your team lead, in the equipment form.",
    ]
    contents = pipeline.prepare(Extracted(sections=[Section(t, separate=True) for t in texts]))
    assert [p.text for p in contents.pieces] == texts
    contents = dataclasses.replace(contents, vectors=await embedder.embed(texts))
    await documents.save_text(db, ctx, None, contents)
    question = "Where do the monthly payroll files end up?"
    weight = search.SearchParams().for_intent(intent.classify(question)).context_weight

    async def scores(params: search.SearchParams) -> dict[str, float]:
        return {
            h.memory.content: h.score
            for h in (await find(db, ctx, embedder, question, limit=20, params=params)).hits
        }

    # The questions' penalty off: their shown scores are then their own, the context's source.
    plain = search.SearchParams(question_penalty=0)
    off, on = await scores(dataclasses.replace(plain, context=False)), await scores(plain)
    assert on[texts[1]] - off[texts[1]] == pytest.approx(weight * off[texts[0]], abs=2e-3)
    assert on[texts[3]] - off[texts[3]] == pytest.approx(weight * off[texts[2]], abs=2e-3)
    above = [m.content for m in weaker]
    assert all(list(off).index(m) < list(off).index(texts[1]) for m in above)
    assert all(list(on).index(m) > list(on).index(texts[1]) for m in above)


async def test_the_soft_word_match_credits_related_words_that_full_text_misses(
    db: Database, static_model: StaticModel
) -> None:
    """ "repair" and "vehicles" are not in the first memory, "fixed" and "cars" are: only the soft
    match sees them. Its share joins the memory's own score; a memory of unrelated words gains
    little, and without the static model's words the scores are the plain ones."""
    ctx = await writer(db)
    related = "Ada fixed two cars and a truck yesterday."
    unrelated = "Ada booked the quarterly budget review for Friday."
    for content in (related, unrelated):
        await memories.save_memory(db, ctx, content, static_embedding=static_model.vectors([content])[0])
    question = "Which vehicles did Ada repair?"
    own = search.SearchParams(context=False, question_penalty=0)

    async def scores(word_matches: search.WordMatches | None) -> dict[str, float]:
        found = await search.search_memories(
            db,
            ctx,
            question,
            params=own,
            static_embedding=static_model.vectors([question])[0],
            word_matches=word_matches,
        )
        return {h.memory.content: h.score for h in found.hits}

    plain, soft = await scores(None), await scores(static_model.soft_matches)
    assert set(plain) == set(soft) == {related, unrelated}
    gain = {content: soft[content] - plain[content] for content in plain}
    assert gain[related] > 0.05
    assert gain[related] > gain[unrelated] + 0.03
    off = await search.search_memories(
        db,
        ctx,
        question,
        params=dataclasses.replace(own, soft=False),
        static_embedding=static_model.vectors([question])[0],
        word_matches=static_model.soft_matches,
    )
    assert {h.memory.content: h.score for h in off.hits} == plain


async def test_a_memory_that_tells_before_it_asks_is_not_penalised(db: Database, embedder: Embedder) -> None:
    """A memory ending in a question that also states something (a sentence of
    ``statement_words`` words or more) keeps its whole score; a bare question or a short greeting
    before it does not."""
    ctx = await writer(db)
    tells = "I follow a strict gluten-free and dairy-free diet since last spring, so snacks are hard. What should I pack?"
    greets = "Hey Ada, good to see you! What should I pack?"
    await save_all(db, ctx, embedder, [tells, greets])
    question = "What snacks should I pack for the trip?"
    plain = await find(db, ctx, embedder, question, params=search.SearchParams(question_penalty=0))
    ranked = await find(db, ctx, embedder, question)
    score = {h.memory.content: h.score for h in ranked.hits}
    before = {h.memory.content: h.score for h in plain.hits}
    assert score[tells] == pytest.approx(before[tells], abs=1e-3)
    assert score[greets] == pytest.approx(before[greets] - search.SearchParams().question_penalty, abs=1e-3)
    never = await find(db, ctx, embedder, question, params=search.SearchParams(statement_words=255))
    assert {h.memory.content: h.score for h in never.hits}[tells] == pytest.approx(
        before[tells] - search.SearchParams().question_penalty, abs=1e-3
    )


async def test_a_memory_that_asks_ranks_below_the_answer_it_resembles(
    db: Database, embedder: Embedder
) -> None:
    """A question saved beside its answer repeats a later search's words; it loses
    ``question_penalty`` when relevance ranks, and nothing when a bare keyword does."""
    ctx = await writer(db)
    asks = "Ada, what was your favourite book as a child?"
    answer = "Ada: my favourite book as a child was Charlotte's Web."
    await save_all(db, ctx, embedder, [asks, answer])
    question = "What was Ada's favourite book as a child?"
    plain = await find(db, ctx, embedder, question, params=search.SearchParams(question_penalty=0))
    ranked = await find(db, ctx, embedder, question)
    assert contents(plain)[0] == asks  # it holds every word of the question
    assert contents(ranked)[0] == answer
    score = {h.memory.content: h.score for h in ranked.hits}
    before = {h.memory.content: h.score for h in plain.hits}
    assert score[asks] == pytest.approx(before[asks] - search.SearchParams().question_penalty, abs=1e-3)
    assert score[answer] == pytest.approx(before[answer], abs=1e-3)
    by_keyword = await find(db, ctx, None, keyword="Ada")
    unpenalised = await find(db, ctx, None, keyword="Ada", params=search.SearchParams(question_penalty=0))
    assert [(h.memory.id, h.score) for h in by_keyword.hits] == [
        (h.memory.id, h.score) for h in unpenalised.hits
    ]


def test_the_ranking_reads_each_neighbour_pair_both_ways() -> None:
    """The fusion statement sends the neighbour pairs once, as two lists of places on the first row:
    each side of a pair gains the context weight times the other's own score, a pair found from both
    sides counts once, and a memory without neighbours keeps its own score."""
    columns = ("r", "own", "asks", "words", "cov", "near_a", "near_b", "qwords", "qidf", "total")
    Row = namedtuple("Row", columns)  # the driver's rows are named tuples too
    blank = dict(
        asks=False, words=None, cov=0.0, near_a=None, near_b=None, qwords=None, qidf=None, total=None
    )
    rows = [
        Row(**{**blank, "r": 1, "own": 0.9, "near_a": [1, 3, 3], "near_b": [3, 1, 2]}),
        Row(**{**blank, "r": 2, "own": 0.5}),
        Row(**{**blank, "r": 3, "own": 0.4}),
        Row(**{**blank, "r": 4, "own": 0.3}),
    ]
    params = search.SearchParams()
    w = params.context_weight
    fused = {row.r: score for row, score in search._rank(rows, params, None, relevance=True)}
    assert fused[1] == pytest.approx(0.9 + w * 0.4)
    assert fused[2] == pytest.approx(0.5 + w * 0.4)
    assert fused[3] == pytest.approx(0.4 + w * 0.9)
    assert fused[4] == 0.3
