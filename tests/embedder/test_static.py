"""The static model: distilled from the packaged MiniLM, cached with checksums, encoded without torch."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from memory_mcp.embedder.model import resolve_model_path
from memory_mcp.embedder.static import STATIC_DIM, StaticModel
from memory_mcp.embedder.static_cache import MANIFEST, cached_folder_is_valid, table_folder, teacher_checksum


def test_static_vectors_are_unit_length_and_rank_the_related_text_first(static_model: StaticModel) -> None:
    texts = [
        "The database backups run every night at two.",
        "Ada prefers green tea in the afternoon.",
        "Our quarterly budget review is next Friday.",
    ]
    vectors = static_model.encode(texts)
    assert vectors.shape == (3, STATIC_DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    query = static_model.encode(["When are the nightly database backups?"])[0]
    assert int(np.argmax(vectors @ query)) == 0
    # Deterministic: the same text, the same vector.
    assert np.array_equal(static_model.encode(texts[:1]), vectors[:1])


def test_a_damaged_or_foreign_cache_is_not_trusted(static_model: StaticModel, tmp_path: Path) -> None:
    teacher_sum = teacher_checksum(resolve_model_path(None))
    copy = table_folder(tmp_path, teacher_sum)
    shutil.copytree(static_model.path, copy)
    assert cached_folder_is_valid(copy, teacher_sum)
    assert not cached_folder_is_valid(copy, "0" * 64)  # distilled from another teacher

    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert not cached_folder_is_valid(copy, teacher_sum)

    shutil.copytree(static_model.path, copy, dirs_exist_ok=True)
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["files"]["tokenizer.json"]
    (copy / MANIFEST).write_text(json.dumps(manifest))
    assert not cached_folder_is_valid(copy, teacher_sum)


def test_the_teacher_checksum_follows_the_teachers_files(tmp_path: Path) -> None:
    teacher = resolve_model_path(None)
    copy = tmp_path / "teacher"
    copy.mkdir()
    for item in teacher.iterdir():
        (copy / item.name).symlink_to(item)
    assert teacher_checksum(copy) == teacher_checksum(teacher)
    (copy / "config.json").unlink()
    (copy / "config.json").write_text((teacher / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert teacher_checksum(copy) != teacher_checksum(teacher)


def test_best_matches_score_each_query_word_against_each_texts_words(static_model: StaticModel) -> None:
    """A word matches itself fully, a related word partly and an unrelated one little; a word in
    ``ignore``, a single letter and a text without words match nothing; the answers follow the
    texts' order, whatever the word table held."""
    model = StaticModel(static_model.model, static_model.dim, static_model.path)
    texts = ["my car broke down", "", "sunny weather today", "car", "the x"]
    ignore = frozenset({"the"})
    first = model.best_matches(["car", "vehicle"], texts, ignore)
    assert first.shape == (5, 2)
    assert first[0][0] == pytest.approx(1.0, abs=1e-3) and first[3][0] == pytest.approx(1.0, abs=1e-3)
    assert first[1].tolist() == [0.0, 0.0] and first[4].tolist() == [0.0, 0.0]
    assert first[0][1] > first[2][1] + 0.1  # "vehicle" is nearer to a car than to the weather
    np.testing.assert_array_equal(model.best_matches(["car", "vehicle"], texts, frozenset(ignore)), first)
    assert model.best_matches([], texts).shape == (5, 0)
    assert model.best_matches(["car"], []).shape == (0, 1)
    # Without the ignore list "the" is a word like another (the table starts over for it).
    assert model.best_matches(["car"], ["the"])[0][0] != 0.0


def test_best_matches_are_each_query_words_highest_cosine_over_calls_in_a_row(
    static_model: StaticModel,
) -> None:
    """Each entry equals the highest cosine of the query word's vector with the text's words' ones,
    computed directly; calls in a row whose texts share words (the table's flags and places for the
    distinct words used again) agree with it, and leave no row flagged."""
    model = StaticModel(static_model.model, static_model.dim, static_model.path)
    calls = [
        (["car", "road"], ["car bus road", "red car"]),
        (["bus"], ["red car", "train bus bus", "plane"]),
        (["road", "plane"], ["plane road car", "car bus road"]),
    ]
    for words, texts in calls:
        vectors = {w: model.encode([w])[0] for w in {*words, *" ".join(texts).split()}}
        expected = [
            [max(float(vectors[q] @ vectors[t]) for t in text.split()) for q in words] for text in texts
        ]
        np.testing.assert_allclose(model.best_matches(words, texts), expected, atol=1e-5)
        assert not model._kept[0].seen.any()


def test_soft_matches_count_each_word_from_the_floor_to_itself(static_model: StaticModel) -> None:
    """A word's weight counts nothing at the floor or below, fully for the word itself, linearly
    between: the soft word match search adds to a memory's score."""
    texts = ["my car broke down", "sunny weather today", ""]
    words, weights = ["car", "vehicle"], [2.0, 1.0]
    best = static_model.best_matches(words, texts).tolist()
    expected = [
        sum(w * min(max((b - 0.4) / 0.6, 0.0), 1.0) for w, b in zip(weights, row, strict=True))
        for row in best
    ]
    matched = static_model.soft_matches(words, weights, texts, 0.4)
    assert matched == pytest.approx(expected)
    assert 2.0 < matched[0] < 3.0 and matched[2] == 0.0  # "car" fully, "vehicle" in part


def test_the_word_table_starts_over_when_full(static_model: StaticModel) -> None:
    model = StaticModel(static_model.model, static_model.dim, static_model.path, word_table_size=3)
    assert model.best_matches(["car"], ["car bus"])[0][0] == pytest.approx(1.0, abs=1e-3)
    table = model._kept[0]
    assert set(table.rows) == {"car", "bus"} and list(table.texts) == ["car bus"]
    # Three new words do not fit beside the two held: the table starts over with these.
    again = model.best_matches(["train"], ["car train plane"])
    assert again[0][0] == pytest.approx(1.0, abs=1e-3)
    assert set(table.rows) == {"train", "car", "plane"} and list(table.texts) == ["car train plane"]
    # More words than the table holds at all are matched in a table of their own; the kept one stays.
    many = model.best_matches(["red"], ["red green blue yellow"])
    assert many[0][0] == pytest.approx(1.0, abs=1e-3)
    assert set(table.rows) == {"train", "car", "plane"}
    # So many texts' words are kept as words: past that, the texts start over.
    for text in ("car", "plane", "train car"):
        model.best_matches(["car"], [text])
    assert list(table.texts) == ["train car"]


def test_loading_the_model_runs_numpys_blas_on_one_thread(static_model: StaticModel) -> None:
    """OpenBLAS's second thread spins between the word matches' small products, taking a core from
    the database; OpenMP's threads (torch's, for the MiniLM) keep their number."""
    pools = threadpool_info()
    blas = [pool for pool in pools if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas)
    openmp = [pool for pool in pools if pool["user_api"] == "openmp"]
    assert (os.cpu_count() or 1) == 1 or all(pool["num_threads"] > 1 for pool in openmp)
