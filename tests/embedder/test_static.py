"""The static model: distilled from the packaged MiniLM, cached with checksums, encoded without torch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from memory_mcp.embedder.model import resolve_model_path
from memory_mcp.embedder.static import (
    CACHE_FOLDER,
    MANIFEST,
    STATIC_DIM,
    StaticModel,
    _cache_is_valid,
    teacher_checksum,
)


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
    copy = tmp_path / CACHE_FOLDER
    shutil.copytree(static_model.path, copy)
    assert _cache_is_valid(copy, teacher_sum)
    assert not _cache_is_valid(copy, "0" * 64)  # distilled from another teacher

    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert not _cache_is_valid(copy, teacher_sum)

    shutil.copytree(static_model.path, copy, dirs_exist_ok=True)
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["files"]["tokenizer.json"]
    (copy / MANIFEST).write_text(json.dumps(manifest))
    assert not _cache_is_valid(copy, teacher_sum)


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
    """A word matches itself fully, a related word partly and an unrelated one little; a text with
    no words matches nothing; the answers follow the texts' order, whatever the word table held."""
    texts = [["my", "car", "broke", "down"], [], ["sunny", "weather", "today"], ["car"]]
    first = static_model.best_matches(["car", "vehicle"], texts)
    assert len(first) == 4 and all(len(row) == 2 for row in first)
    assert first[0][0] == pytest.approx(1.0, abs=1e-3) and first[3][0] == pytest.approx(1.0, abs=1e-3)
    assert first[1] == [0.0, 0.0]
    assert first[0][1] > first[2][1] + 0.1  # "vehicle" is nearer to a car than to the weather
    assert static_model.best_matches(["car", "vehicle"], texts) == first  # read from the word table
    assert static_model.best_matches([], texts) == [[], [], [], []]
    assert static_model.best_matches(["car"], []) == []


def test_the_word_table_starts_over_when_full(static_model: StaticModel) -> None:
    fresh = StaticModel(static_model.model, static_model.dim, static_model.path, word_table_size=3)
    assert fresh.best_matches(["car"], [["car", "bus"]])[0][0] == pytest.approx(1.0, abs=1e-3)
    assert len(fresh._words) == 2
    # Three new words do not fit beside the two held: the table starts over with these.
    again = fresh.best_matches(["train"], [["car", "train", "plane"]])
    assert again[0][0] == pytest.approx(1.0, abs=1e-3)
    assert set(fresh._words) == {"train", "car", "plane"}
