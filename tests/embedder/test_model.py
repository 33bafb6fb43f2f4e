"""The model module: offline loading, unit vectors of the declared width, meaningful similarity."""

from __future__ import annotations

import numpy as np
import pytest
from memory_mcp.embedder.model import EmbeddingModelNotFound, encode, load_model, model_dim, model_name

from tests.embedder.support import SENTENCES


def test_vectors_are_unit_length_float32_of_model_dim(model):
    vectors = encode(model, SENTENCES[:5])
    assert model_dim(model) == 384
    assert vectors.shape == (5, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_similar_sentences_score_higher_than_unrelated_ones(model):
    eating, bread, baby, weather = encode(
        model,
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
            "Heavy rain is expected in the mountains tomorrow.",
        ],
    )
    assert eating @ bread > eating @ baby + 0.3
    assert eating @ bread > eating @ weather + 0.3


def test_empty_input_gives_an_empty_matrix_of_the_right_width(model):
    assert encode(model, []).shape == (0, 384)


def test_missing_model_path_is_named_in_the_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(EmbeddingModelNotFound, match="no-such-model"):
        load_model(str(missing), "cpu")


def test_model_name_is_the_packaged_name_or_the_folder_name(tmp_path):
    assert model_name(None) == "all-MiniLM-L6-v2"
    assert model_name(str(tmp_path / "e5-small")) == "e5-small"
