"""The static model: distilled from the packaged MiniLM, cached with checksums, encoded without torch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

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
