"""Short forward passes through ONNX Runtime: the model's ONNX file, made once per machine, and the
parity check that decides whether it is used.

A search's question (or a single save) is one forward pass of a few tokens on one thread. There
ONNX Runtime spent 5.6-6.4 ms of CPU a question against torch's 12.5-15.5, for the same vector to
1e-7 (``bench/onnx_query.py``); in batches of 16 the two were within 10 %, so longer batches keep
torch with all its threads.

The whole sentence-transformers pipeline (transformer, pooling, normalisation) is exported as one
graph, so any pooling sentence-transformers can trace is covered, and tokenising stays
sentence-transformers' own. The file is kept like the static table (:mod:`.static_cache`): in a
folder named by the model's checksum, with a manifest of the file's checksum, written to a staging
folder and renamed into place under a lock of its own, so two processes never export at once and
no one reads half a file. A file that no longer matches its manifest is exported again (or, in a
read-only folder, passed over). Before a file is used its vectors are compared with torch's on
probe texts; a file that differs by more than :data:`MAX_PARITY_DIFFERENCE` is not used.

A question's vector can also come from an int8 copy of the graph (:data:`QUERY_FILE`: the matrix
products' weights quantized per output channel, made with the export): a question is a few tokens,
so its pass is bound by reading the weights, and a quarter of the bytes made it 6.95 -> 3.81 ms of
CPU on one thread. Its vectors are not torch's: they are at a cosine of 0.986 or more from them
(0.994 on average over LoCoMo's 760 dev questions), and the store's ranking found the same memories
with them (hit@1/5/10 0.466/0.757/0.839 against 0.468/0.759/0.839; ``bench/onnx_query.py``,
docs/performance.md). Only questions take it: every vector that is stored comes from the exact
graph, so stored vectors are the same whichever way they were made. It is used when its vectors
are within :data:`MIN_QUERY_COSINE` of torch's on the probe texts.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .checksum import files_checksum
from .precision import PROBE_TEXTS
from .static_cache import (
    CHILD_STOP_S,
    cached_folder_is_valid,
    child_environment,
    distill_lock,
    exit_when_orphaned,
    write_staged,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from memory_mcp.core.settings import Settings

log = logging.getLogger(__name__)

FORMAT = 2  # bumped when the way the files are exported changes (2: the int8 copy for questions)
ONNX_FILE = "model.onnx"
QUERY_FILE = "query-int8.onnx"
FOLDER_PREFIX = "onnx"
LOCK_FILE = ".onnx-export.lock"
STAGING_PREFIX = ".onnx-staging-"
FILES = (ONNX_FILE, QUERY_FILE)
OPSET = 17
# The largest difference allowed in any coordinate between ONNX Runtime's unit vectors and torch's
# for the probe texts. MiniLM measured 1.5e-7 (alone and in a padded batch).
MAX_PARITY_DIFFERENCE = 1e-5
# Each alone (the short passes' shape) and all together (padding): about 0.3 s of torch.
PARITY_TEXTS: tuple[str, ...] = PROBE_TEXTS[::4]
# The lowest cosine allowed between the int8 copy's vector of a probe text and torch's. MiniLM
# measured 0.986 at the least over LoCoMo's 760 dev questions and 0.987 on the probe texts.
MIN_QUERY_COSINE = 0.98

Encode = Callable[[list[str]], NDArray[np.float32]]


class OnnxUnavailable(Exception):
    """The ONNX file could not be made, opened or trusted: short passes stay on torch."""


@dataclass(frozen=True)
class OnnxEncoder:
    """An ONNX Runtime session on one thread, fed by sentence-transformers' own tokenising."""

    session: Any  # onnxruntime.InferenceSession
    inputs: tuple[str, ...]
    preprocess: Callable[[list[str]], Mapping[str, Any]]

    def encode(self, texts: list[str]) -> NDArray[np.float32]:
        """Unit-length float32 rows for ``texts``, in one forward pass."""
        features = self.preprocess(texts)
        feed = {name: np.asarray(features[name]) for name in self.inputs}
        pooled = np.asarray(self.session.run(None, feed)[0], dtype=np.float32)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        rows: NDArray[np.float32] = pooled / norms
        return rows


def model_checksum(source: Path) -> str:
    """One checksum over the model's weight and tokenizer files and the export's format."""
    return files_checksum(source, f"onnx format {FORMAT}\n")


def onnx_roots(settings: Settings) -> list[Path]:
    """Where the ONNX file is looked for, in order, and made in the first that can be written:
    beside the static table (the image ships both in its read-only folder), then the machine's cache."""
    return list(dict.fromkeys((settings.static_embedding_cache_dir, settings.cache_dir)))


def onnx_folder(root: Path, source_sum: str) -> Path:
    """The folder under ``root`` that this model's ONNX file is kept in."""
    return root / f"{FOLDER_PREFIX}-{source_sum[:16]}"


def find_onnx(roots: Sequence[Path], source_sum: str) -> Path | None:
    """The first folder under ``roots`` holding this model's ONNX file as its manifest says."""
    for root in roots:
        folder = onnx_folder(root, source_sum)
        if cached_folder_is_valid(folder, source_sum, FILES):
            return folder
    return None


def preprocess_of(model: SentenceTransformer) -> Callable[[list[str]], Mapping[str, Any]]:
    """The model's tokenising, as its ``encode`` does it (``tokenize`` before sentence-transformers 5.2)."""
    found: Callable[[list[str]], Mapping[str, Any]] = getattr(model, "preprocess", None) or model.tokenize
    return found


def export_into(folder: Path, model: SentenceTransformer, source: Path, source_sum: str) -> None:
    """Export ``model``'s whole pipeline to ``folder`` (staged, with its manifest); the caller holds
    the export lock. Runs in the export's own process (:func:`export_in_child`). Raises
    :class:`OnnxUnavailable` when the ``onnx`` package is missing."""
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
        import torch
    except ImportError as exc:
        raise OnnxUnavailable(f"{exc.name} is not installed") from exc
    sample = preprocess_of(model)(["a sample sentence to trace"])
    names = [name for name, value in sample.items() if isinstance(value, torch.Tensor)]

    class Pipeline(torch.nn.Module):
        """The sentence embedding from positional tensors (what the exporter traces)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            features: dict[str, Any] = dict(zip(names, tensors, strict=True))
            for module in self.model:
                features = module(features)
            return features["sentence_embedding"]

    def make(staging: Path) -> None:
        axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}
        # The tracer warns about branches it fixes (masks of the traced shape); the parity check
        # compares the result on other shapes, a padded batch included.
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Pipeline(), tuple(sample[name] for name in names), str(staging / ONNX_FILE),
                input_names=names, output_names=["embedding"], dynamic_axes=axes,
                opset_version=OPSET, dynamo=False,
            )  # fmt: skip
        quantize_for_queries(staging / ONNX_FILE, staging / QUERY_FILE)

    write_staged(folder, source, source_sum, FILES, make, STAGING_PREFIX)


def quantize_for_queries(exact: Path, into: Path) -> None:
    """The int8 copy of ``exact`` that questions take: the weights of its matrix products in int8,
    one scale per output channel (one scale per matrix moved vectors by up to 0.04 in cosine),
    activations quantized as they come; everything else as it was."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        exact, into, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"]
    )


def open_encoder(path: Path, model: SentenceTransformer) -> OnnxEncoder:
    """A session on ``path``, on one intra-op and one inter-op thread (see ``ONE_THREAD_TEXTS``)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise OnnxUnavailable(f"{exc.name} is not installed") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime raises its own classes for a file it cannot read
        raise OnnxUnavailable(f"ONNX Runtime cannot open {path}: {exc}") from exc
    return OnnxEncoder(session, tuple(node.name for node in session.get_inputs()), preprocess_of(model))


def parity_difference(encoder: OnnxEncoder, reference: Encode) -> float:
    """The largest difference between ``encoder``'s vectors and ``reference``'s on :data:`PARITY_TEXTS`,
    each alone and all in one batch."""
    batches = [[text] for text in PARITY_TEXTS] + [list(PARITY_TEXTS)]
    return max(float(np.abs(encoder.encode(texts) - reference(texts)).max()) for texts in batches)


def export_in_child(folder: Path, source: Path, source_sum: str) -> None:
    """Run :func:`export_into` in a process of its own (this module's ``__main__``, one thread,
    low priority); the caller holds the export lock.

    Not in a thread of the caller: torch's tracer is native code, and a process that ends while a
    thread of its own is inside it aborts ("terminate called without an active exception"), so a
    command that finished before the export did would die with SIGABRT. The child is stopped when
    this process exits (it removes its staging folder on the way out) and ends itself when this
    process is killed. Raises :class:`OnnxUnavailable` with the child's last words when it fails.
    """
    child = subprocess.Popen(
        [sys.executable, "-m", __name__, "--into", str(folder), "--source", str(source), "--sum", source_sum],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **child_environment(1)},
    )
    stop = functools.partial(_stop_child, child)
    atexit.register(stop)
    try:
        _, err = child.communicate()
    finally:
        atexit.unregister(stop)
    if child.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise OnnxUnavailable(f"the export failed: {last[0]}")


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """Ask the export to stop (it removes its staging folder), kill it after :data:`CHILD_STOP_S`."""
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(CHILD_STOP_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _find_or_export(source: Path, source_sum: str, roots: Sequence[Path]) -> Path:
    """This model's ONNX folder: found under ``roots``, or exported into the first root that can
    be written. A process that finds another exporting waits for it and takes its file."""
    found = find_onnx(roots, source_sum)
    if found is not None:
        return found
    failures = []
    for root in roots:
        try:
            with distill_lock(root, LOCK_FILE):
                found = find_onnx([root], source_sum)
                if found is not None:
                    return found
                folder = onnx_folder(root, source_sum)
                started = time.monotonic()
                export_in_child(folder, source, source_sum)
                log.info(
                    "exported the embedding model %s to ONNX into %s in %.1f s",
                    source,
                    folder,
                    time.monotonic() - started,
                )
                return folder
        except OSError as exc:
            failures.append(f"{root}: {exc.strerror or exc}")
    raise OnnxUnavailable(f"no folder to export it into ({'; '.join(failures)})")


def query_cosine(encoder: OnnxEncoder, reference: Encode) -> float:
    """The lowest cosine between ``encoder``'s vector of each of :data:`PARITY_TEXTS`, alone, and
    ``reference``'s (both unit length)."""
    return min(float(encoder.encode([text])[0] @ reference([text])[0]) for text in PARITY_TEXTS)


@dataclass(frozen=True)
class OnnxEncoders:
    """The exact graph, for every short pass, and the int8 copy for questions when it may be used."""

    exact: OnnxEncoder
    queries: OnnxEncoder | None


def prepare_encoders(
    model: SentenceTransformer,
    source: Path,
    roots: Sequence[Path],
    reference: Encode,
    *,
    int8_queries: bool,
    min_query_cosine: float = MIN_QUERY_COSINE,
) -> OnnxEncoders:
    """``model`` (loaded from ``source``) through ONNX Runtime: its files found or exported under
    ``roots``, the exact graph opened and checked against ``reference`` (the same model through
    torch); with ``int8_queries`` the int8 copy for questions too, None (with one log line saying
    why) when it cannot be opened or its vectors are under ``min_query_cosine`` from torch's.

    Raises :class:`OnnxUnavailable` saying why the exact graph cannot be used.
    """
    if not roots:
        raise OnnxUnavailable("no cache folder to keep the ONNX file in")
    source_sum = model_checksum(source)
    try:
        folder = _find_or_export(source, source_sum, roots)
    except OnnxUnavailable:
        raise
    except Exception as exc:  # anything else on the way (starting the export's process): torch stays
        raise OnnxUnavailable(f"the export failed: {type(exc).__name__}: {exc}") from exc
    encoder = open_encoder(folder / ONNX_FILE, model)
    difference = parity_difference(encoder, reference)
    if difference > MAX_PARITY_DIFFERENCE:
        raise OnnxUnavailable(
            f"its vectors differ from torch's by up to {difference:.1e} "
            f"(more than {MAX_PARITY_DIFFERENCE:.0e}) on the probe texts"
        )
    queries = None
    if int8_queries:
        try:
            queries = open_encoder(folder / QUERY_FILE, model)
            cosine = query_cosine(queries, reference)
            if cosine < min_query_cosine:
                raise OnnxUnavailable(
                    f"its vectors are at a cosine of {cosine:.4f} from torch's on the probe texts "
                    f"(under {min_query_cosine})"
                )
        except OnnxUnavailable as exc:
            log.warning("questions take the exact graph: its int8 copy is not usable (%s)", exc)
            queries = None
    return OnnxEncoders(encoder, queries)


def _child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Export the embedding model to ONNX (a child process)")
    parser.add_argument("--into", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sum", required=True)
    args = parser.parse_args(argv)
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    # A stop from the parent unwinds the export, so write_staged removes its staging folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with contextlib.suppress(OSError):
        os.nice(10)  # the parent's requests come first
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    export_into(args.into, SentenceTransformer(str(args.source), device="cpu"), args.source, args.sum)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
