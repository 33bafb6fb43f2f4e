"""The static embedding: a token-vector table distilled from the packaged MiniLM (model2vec).

Search's third signal beside MiniLM's cosine and full text. It is its own vector space (its own
column and index) and needs no torch to encode: a text's vector is the mean of its tokens' rows,
about 11,000 texts/s on one core. Added as a third leg to BM25 + MiniLM in plain reciprocal rank
fusion it lifted LoCoMo hit@10 from 0.663 to 0.708; PCA to 256 dimensions lost about 4 points, so
all 384 stay (docs/performance.md).

The table is distilled from the teacher on the first start (seconds on an idle machine, minutes on
a busy one) and cached in the data directory beside a manifest: the teacher's checksum and the
table's own. A cache whose table no longer matches its checksum, or that was distilled from
another teacher, is distilled again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .model import resolve_model_path

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings

log = logging.getLogger(__name__)

STATIC_DIM = 384
CACHE_FOLDER = "static-embedding"
MANIFEST = "manifest.json"
# The teacher's files whose bytes decide the table: weights, vocabulary and tokenizer settings.
TEACHER_FILES = ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "config.json")
TABLE_FILES = ("model.safetensors", "tokenizer.json", "config.json")
FORMAT = 1  # bumped when the way the table is distilled changes


class StaticModelUnavailable(Exception):
    """The static model could not be loaded or distilled (model2vec missing, teacher missing)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def teacher_checksum(teacher: Path) -> str:
    """One checksum over the teacher's weight and tokenizer files (and the distillation format)."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    for name in TEACHER_FILES:
        path = teacher / name
        if path.is_file():
            digest.update(f"{name} {_sha256(path)}\n".encode())
    return digest.hexdigest()


# Words whose vectors are kept for word matching (``StaticModel.best_matches``; the default of its
# ``word_table_size``): 384 float32 each, so about 31 MB when full; a full table starts over (a
# space's vocabulary is read again in tens of ms).
WORD_TABLE_SIZE = 20_000


@dataclass(frozen=True)
class StaticModel:
    """A loaded table: encodes texts into unit-length float32 rows, ``dim`` wide."""

    model: Any  # model2vec.StaticModel
    dim: int
    path: Path
    word_table_size: int = WORD_TABLE_SIZE
    _words: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    _table: list[NDArray[np.float32]] = field(default_factory=list, compare=False, repr=False)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(list(texts), show_progress_bar=False)
        rows = np.asarray(vectors, dtype=np.float32)
        # model2vec normalises, but a text of unknown tokens only is all zeros: leave it at zero.
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        unit: NDArray[np.float32] = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
        return unit

    def vectors(self, texts: Sequence[str]) -> list[list[float]]:
        """:meth:`encode` as plain lists, the form the store takes."""
        result: list[list[float]] = self.encode(texts).tolist()
        return result

    def best_matches(self, words: Sequence[str], texts: Sequence[Sequence[str]]) -> list[list[float]]:
        """For each text (given as its words), every one of ``words``' highest cosine similarity to
        a word of that text: 1.0 for the word itself, less for a related one ("cars" and "car",
        "broke" and "damage"). Search's soft word match (store/search.py). A text with no words
        matches nothing (0.0). Word vectors are kept between calls (``word_table_size`` of them)."""
        if not words or not texts:
            return [[0.0] * len(words) for _ in texts]
        present = [n for n, text in enumerate(texts) if text]
        out = [[0.0] * len(words) for _ in texts]
        if not present:
            return out
        flat = [*words, *(w for n in present for w in texts[n])]
        table, index = self._word_table(flat)
        # The distinct words' vectors once; each text's columns side by side, and the maximum over
        # each text's run of them.
        rows = np.fromiter((index[w] for w in flat), np.int64, len(flat))
        distinct, columns = np.unique(rows, return_inverse=True)
        similarity = table[rows[: len(words)]] @ table[distinct].T
        starts = np.cumsum([0, *(len(texts[n]) for n in present[:-1])])
        best = np.maximum.reduceat(similarity[:, columns[len(words) :]], starts, axis=1).T.tolist()
        for n, values in zip(present, best, strict=True):
            out[n] = values
        return out

    def _word_table(self, words: list[str]) -> tuple[NDArray[np.float32], dict[str, int]]:
        """A table holding every one of ``words`` and each word's row in it: the kept word table
        (encoding the words it lacks), started over when they would not fit beside what it holds,
        or a table of their own when they are more than it holds at all."""
        distinct = list(dict.fromkeys(words))
        if len(distinct) > self.word_table_size:
            return self.encode(distinct), {w: n for n, w in enumerate(distinct)}
        if not self._table:
            self._table.append(np.zeros((self.word_table_size, self.dim), dtype=np.float32))
        missing = [w for w in distinct if w not in self._words]
        if len(self._words) + len(missing) > self.word_table_size:
            self._words.clear()
            missing = distinct
        if missing:
            start = len(self._words)
            self._table[0][start : start + len(missing)] = self.encode(missing)
            self._words.update((w, start + i) for i, w in enumerate(missing))
        return self._table[0], self._words


def _cache_is_valid(folder: Path, teacher_sum: str) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("teacher") != teacher_sum:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != set(TABLE_FILES):
        return False
    return all((folder / name).is_file() and _sha256(folder / name) == sha for name, sha in files.items())


def distill_into(folder: Path, teacher: Path, teacher_sum: str) -> None:
    """Distil the table from ``teacher`` and write it, with its manifest, to ``folder``.

    Written beside the folder first and moved in place at the end, so a start that is stopped
    halfway leaves no half-written cache behind.
    """
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise StaticModelUnavailable(f"model2vec with its distill extra is not installed ({exc})") from exc
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".static-", dir=folder.parent))
    try:
        model = distill(str(teacher), pca_dims=None)
        model.save_pretrained(str(staging))
        files = {name: _sha256(staging / name) for name in TABLE_FILES}
        manifest = {"teacher": teacher_sum, "teacher_path": str(teacher), "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def load_static_model(cache_dir: Path, teacher_path: str | None = None) -> StaticModel:
    """The static model distilled from ``teacher_path`` (None: the packaged MiniLM), from the cache
    under ``cache_dir`` or distilled into it first.

    Raises :class:`StaticModelUnavailable` when it can be neither read nor distilled.
    """
    try:
        from model2vec import StaticModel as Model2Vec
    except ImportError as exc:
        raise StaticModelUnavailable(f"model2vec is not installed ({exc})") from exc
    teacher = resolve_model_path(teacher_path)
    teacher_sum = teacher_checksum(teacher)
    folder = cache_dir / CACHE_FOLDER
    if not _cache_is_valid(folder, teacher_sum):
        log.info("distilling the static embedding from %s into %s", teacher, folder)
        distill_into(folder, teacher, teacher_sum)
    model = Model2Vec.from_pretrained(str(folder))
    dim = int(model.dim)
    if dim != STATIC_DIM:
        raise StaticModelUnavailable(f"the static model at {folder} is {dim} wide, not {STATIC_DIM}")
    return StaticModel(model, dim, folder)


async def static_model_for(settings: Settings) -> StaticModel | None:
    """The static model the settings ask for, read or first distilled in a thread (minutes on a busy
    machine), or None when ``static_embedding`` is off. Raises :class:`StaticModelUnavailable`."""
    if not settings.static_embedding:
        return None
    return await asyncio.to_thread(load_static_model, settings.static_embedding_cache_dir)
