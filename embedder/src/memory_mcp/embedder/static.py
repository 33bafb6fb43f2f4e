"""The static embedding: a token-vector table distilled from the packaged MiniLM (model2vec).

Search's third signal beside MiniLM's cosine and full text. It is its own vector space (its own
column and index) and needs no torch to encode: a text's vector is the mean of its tokens' rows,
about 11,000 texts/s on one core. Added as a third leg to BM25 + MiniLM in plain reciprocal rank
fusion it lifted LoCoMo hit@10 from 0.663 to 0.708; PCA to 256 dimensions lost about 4 points, so
all 384 stay (docs/performance.md).

The table is made once per machine and shared by every data dir, ``serve`` and every command
(:mod:`.static_cache`: where it lives, the lock, the distillation in a child process).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from .daemon import in_daemon_thread
from .model import resolve_model_path
from .static_cache import (
    StaticModelUnavailable,
    StaticTableNotReady,
    default_threads,
    distill_in_child,
    distill_into,
    distill_lock,
    distill_lock_async,
    find_table,
    table_folder,
    teacher_checksum,
)

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings

__all__ = [
    "STATIC_DIM",
    "StaticModel",
    "StaticModelUnavailable",
    "StaticTableNotReady",
    "load_static_model",
    "load_table",
    "static_model_for",
]

log = logging.getLogger(__name__)

STATIC_DIM = 384


# Words whose vectors are kept for word matching (``StaticModel.best_matches``; the default of its
# ``word_table_size``): 384 float32 each, so about 31 MB when full, and the rows of as many texts. A
# full table starts over (a space's vocabulary is read again in tens of ms).
WORD_TABLE_SIZE = 20_000


class _WordTable:
    """Word vectors kept between calls, each word's row, and each text's rows (its words looked up
    once). Row 0 is zeros: the row of every word that matches nothing. ``seen`` and ``place``, a
    flag and a number per row, are scratch space for :meth:`distinct`."""

    def __init__(self, size: int, dim: int, ignore: frozenset[str]) -> None:
        self.vectors = np.zeros((size + 1, dim), dtype=np.float32)
        self.rows: dict[str, int] = {}  # the words held, in rows 1 to len(rows)
        self.texts: dict[str, NDArray[np.int64]] = {}
        self.ignore = ignore
        self.seen = np.zeros(size + 1, dtype=bool)  # all False between calls
        self.place = np.zeros(size + 1, dtype=np.int64)

    def distinct(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The distinct ``rows`` in order, and each of ``rows``' place among them: a flag per row
        of the table instead of a sort, and a number per row instead of a search."""
        self.seen[rows] = True
        distinct = np.flatnonzero(self.seen)
        self.seen[distinct] = False
        self.place[distinct] = np.arange(len(distinct))
        return distinct, self.place[rows]

    def clear(self) -> None:
        self.rows.clear()
        self.texts.clear()


def _rows_of(words: Sequence[str], rows: dict[str, int]) -> NDArray[np.int64]:
    """Each word's row; a word without one matches nothing (row 0)."""
    return np.fromiter((rows.get(w, 0) for w in words), np.int64, len(words))


def _new_words(words: list[str], ignore: frozenset[str], known: dict[str, int]) -> list[str]:
    """The distinct ``words`` not ``known`` that match at all: not in ``ignore``, of two characters
    or more."""
    return [w for w in dict.fromkeys(words) if w not in known and len(w) > 1 and w not in ignore]


@dataclass(frozen=True)
class StaticModel:
    """A loaded table: encodes texts into unit-length float32 rows, ``dim`` wide."""

    model: Any  # model2vec.StaticModel
    dim: int
    path: Path
    word_table_size: int = WORD_TABLE_SIZE
    _kept: list[_WordTable] = field(default_factory=list, compare=False, repr=False)

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

    def best_matches(
        self, words: Sequence[str], texts: Sequence[str], ignore: frozenset[str] = frozenset()
    ) -> NDArray[np.float32]:
        """For each text (its words, separated by spaces), every one of ``words``' highest cosine
        similarity to a word of that text: a row per text, a column per word. 1.0 for the word
        itself, less for a related one ("cars" and "car", "broke" and "damage"). A word of the text
        in ``ignore``, or of one character, matches nothing (0.0), as does a text without words.
        Word vectors, and the texts' words looked up, are kept between calls (``word_table_size``
        of each)."""
        if not words or not texts:
            return np.zeros((len(texts), len(words)), dtype=np.float32)
        table, query, rows = self._lookup(words, texts, ignore)
        # The distinct rows' vectors once; each text's rows side by side, and the maximum over
        # each text's run of them. Every text has a row (an empty one row 0). The product is the
        # distinct words' by the query's: this order takes half the time of the other.
        distinct, places = table.distinct(np.concatenate(rows))
        similarity = table.vectors[distinct] @ table.vectors[query].T
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        best: NDArray[np.float32] = np.maximum.reduceat(similarity[places], np.cumsum(lengths) - lengths)
        return best

    def soft_matches(
        self,
        words: Sequence[str],
        weights: Sequence[float],
        texts: Sequence[str],
        floor: float,
        ignore: frozenset[str] = frozenset(),
    ) -> list[float]:
        """For each text, the weight of ``words`` it matches by :meth:`best_matches`: a word counts
        nothing at a similarity of ``floor`` or less, fully at 1 (the word itself), linearly
        between. Search's soft word match (store/search.py)."""
        best = self.best_matches(words, texts, ignore).astype(np.float64)
        credit = np.clip((best - floor) / (1 - floor), 0.0, 1.0)
        matched: list[float] = (credit @ np.asarray(weights, dtype=np.float64)).tolist()
        return matched

    def _lookup(
        self, words: Sequence[str], texts: Sequence[str], ignore: frozenset[str]
    ) -> tuple[_WordTable, NDArray[np.int64], list[NDArray[np.int64]]]:
        """A table of vectors, the rows of ``words`` in it and the rows of each text's words: the
        kept table (encoding the words it lacks), started over when they would not fit beside what
        it holds, or a table of their own when they are more than it holds at all."""
        table = self._table(ignore)
        rows = [table.texts.get(text) for text in texts]
        misses = [n for n, found in enumerate(rows) if found is None]
        if not misses and all(w in table.rows for w in words):  # the common case: all seen before
            return table, _rows_of(words, table.rows), cast("list[NDArray[np.int64]]", rows)
        split = {n: texts[n].split(" ") for n in misses}
        new = _new_words([*words, *(w for n in misses for w in split[n])], ignore, table.rows)
        if len(table.rows) + len(new) > self.word_table_size:
            split = {n: text.split(" ") for n, text in enumerate(texts)}
            new = _new_words([*words, *(w for each in split.values() for w in each)], ignore, {})
            if len(new) > self.word_table_size:
                own = _WordTable(len(new), self.dim, ignore)
                own.vectors[1:] = self.encode(new)
                own.rows.update(zip(new, range(1, len(new) + 1), strict=True))
                return own, _rows_of(words, own.rows), [_rows_of(each, own.rows) for each in split.values()]
            table.clear()
        if new:
            start = len(table.rows) + 1
            table.vectors[start : start + len(new)] = self.encode(new)
            table.rows.update(zip(new, range(start, start + len(new)), strict=True))
        if len(table.texts) + len(split) > self.word_table_size:
            table.texts.clear()
        for n, each in split.items():
            rows[n] = table.texts[texts[n]] = _rows_of(each, table.rows)
        return table, _rows_of(words, table.rows), cast("list[NDArray[np.int64]]", rows)

    def _table(self, ignore: frozenset[str]) -> _WordTable:
        """The kept word table, made on first use and started over for another ``ignore``."""
        if not self._kept:
            self._kept.append(_WordTable(self.word_table_size, self.dim, ignore))
        table = self._kept[0]
        if table.ignore is not ignore:
            if table.ignore != ignore:
                table.clear()
            table.ignore = ignore  # an equal set: the next call compares by identity
        return table


def load_table(folder: Path) -> StaticModel:
    """The table in ``folder`` (a valid one: :func:`~.static_cache.find_table`), ready to encode."""
    try:
        from model2vec import StaticModel as Model2Vec
    except ImportError as exc:
        raise StaticModelUnavailable(f"model2vec is not installed ({exc})") from exc
    model = Model2Vec.from_pretrained(str(folder))
    dim = int(model.dim)
    if dim != STATIC_DIM:
        raise StaticModelUnavailable(f"the static model at {folder} is {dim} wide, not {STATIC_DIM}")
    _blas_on_one_thread()
    return StaticModel(model, dim, folder)


def load_static_model(cache_dir: Path, teacher_path: str | None = None) -> StaticModel:
    """The static model distilled from ``teacher_path`` (None: the packaged MiniLM), from the cache
    under ``cache_dir`` or distilled into it first, in this process (the image's build, benchmarks
    and tests; ``serve`` and the commands use :func:`static_model_for`).

    Raises :class:`StaticModelUnavailable` when it can be neither read nor distilled.
    """
    teacher = resolve_model_path(teacher_path)
    teacher_sum = teacher_checksum(teacher)
    folder = find_table([cache_dir], teacher_sum)
    if folder is None:
        with distill_lock(cache_dir):
            folder = find_table([cache_dir], teacher_sum)
            if folder is None:
                folder = table_folder(cache_dir, teacher_sum)
                log.info("distilling the static embedding from %s into %s", teacher, folder)
                distill_into(folder, teacher, teacher_sum)
    return load_table(folder)


def _blas_on_one_thread() -> None:
    """Run numpy's BLAS on one thread in this process. The word matches' products are small (a few
    words by a few hundred), and OpenBLAS's second thread spins between calls: while searches came
    in it kept a whole core busy (9.6 s of CPU in 10 s), a core the database and the other requests
    need. Torch's threads (the MiniLM) are its own and keep their number."""
    threadpool_limits(limits=1, user_api="blas")


async def static_model_for(
    settings: Settings, *, build: bool = True, say: Callable[[str], None] | None = None
) -> StaticModel | None:
    """The static model the settings ask for, or None when ``static_embedding`` is off.

    Read from the machine's cache (``static_embedding_dir``, else ``cache_dir``), or from a table a
    data dir kept before tables were shared. Missing, it is distilled there in a child process
    (:func:`~.static_cache.distill_in_child`; a minute or more), once: a process that finds
    another distilling waits for it. With ``build`` off (an import, which must not wait minutes)
    a missing table raises :class:`StaticTableNotReady` instead. ``say`` also gets the notes about
    distilling and waiting that are logged. Raises :class:`StaticModelUnavailable`.
    """
    if not settings.static_embedding:
        return None
    teacher_setting = settings.static_embedding_teacher
    teacher = resolve_model_path(None if teacher_setting is None else str(teacher_setting))
    # Daemon threads (.daemon): a stop does not wait for a checksum over the teacher's 90 MB.
    teacher_sum = await in_daemon_thread(teacher_checksum, teacher, name="static-table")
    root = settings.static_embedding_cache_dir
    folder = await in_daemon_thread(find_table, [root, settings.data_dir], teacher_sum, name="static-table")
    if folder is None:
        if not build:
            raise StaticTableNotReady(
                f"the static table is not made on this machine yet (in {root}); `memory-mcp serve` "
                "or `memory-mcp backfill` makes it once and fills in these vectors"
            )
        threads = settings.static_distill_threads or default_threads()
        try:
            folder = await _distill(root, teacher, teacher_sum, threads, say)
        except OSError as exc:
            raise StaticModelUnavailable(
                f"cannot make the static table in {root}: {exc.strerror or exc} "
                "(set MEMORY_MCP_STATIC_EMBEDDING_DIR to a writable folder)"
            ) from exc
    return await in_daemon_thread(load_table, folder, name="static-table")


async def _distill(
    root: Path, teacher: Path, teacher_sum: str, threads: int, say: Callable[[str], None] | None
) -> Path:
    """Distil the table into ``root`` unless another process did while this one waited for the lock."""

    def note(message: str) -> None:
        log.info("%s", message)
        if say is not None:
            say(message)

    async with distill_lock_async(root, on_wait=note):
        folder = await in_daemon_thread(find_table, [root], teacher_sum, name="static-table")
        if folder is not None:
            return folder
        folder = table_folder(root, teacher_sum)
        plural = "s" if threads > 1 else ""
        note(
            f"distilling the static embedding into {folder} (once for this machine; {threads} thread{plural})"
        )
        started = time.monotonic()
        await distill_in_child(folder, teacher, teacher_sum, threads)
        note(f"distilled the static embedding in {time.monotonic() - started:.0f} s")
        return folder
