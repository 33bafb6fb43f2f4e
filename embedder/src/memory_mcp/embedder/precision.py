"""bfloat16 where it pays: timed and checked against fp32 on a fixed probe set when the model loads.

On one CPU of this kind (AMX tiles, AVX512-BF16) MiniLM in bf16 embedded 451 short texts/s against
171 in fp32 (2.6x), with vectors at cosine 0.9999 to fp32's, so nothing stored needs re-embedding.
On another (AVX512-BF16 without AMX) bf16 was slower (0.8-0.9x), and CPUs with AVX2 only emulate
it. Neither the flags nor the vendor predict it well enough, so the model is timed both ways on the
machine at hand, and bf16 runs only when it is both faster and equal (docs/performance.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from memory_mcp.core.metrics import EMBEDDER_PRECISION

log = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16"]

# Short texts of the kind saved most (one fact each) and a few longer ones: a fixed set, so every
# start compares the same work.
PROBE_TEXTS: tuple[str, ...] = tuple(
    f"{subject} {fact}"
    for subject in ("The deploy pipeline", "Maria from the data team", "Our staging cluster", "The Q3 report")
    for fact in (
        "moved to the new runners last week and now finishes in about twelve minutes.",
        "prefers short written summaries over meetings, and answers mail in the morning.",
        "runs PostgreSQL 16 with pgvector; backups are taken nightly at two o'clock UTC.",
        "is due on the fifteenth; the numbers come from the finance export, not the dashboard.",
        "was rolled back after the memory leak in the image resizer caused restarts under load, "
        "and the fix landed two days later together with a regression test and an alert.",
        "uses feature flags for every risky change so that a release can be undone without a deploy.",
        "had an incident (INC-4821) on a Friday evening; the on-call engineer paged the database owner.",
        "keeps its runbooks in the operations folder; each alert links to the page that explains it.",
    )
)
# The mean cosine similarity between the probe texts' bf16 and fp32 vectors for bf16 to count as
# equal. On a CPU that emulates bf16 (AVX2 only) it measured 0.9992 mean, 0.998 for the worst text.
MIN_PARITY = 0.999
# How much faster bf16 must be to be worth it: timing noise on a busy machine is a few percent.
MIN_SPEEDUP = 1.1


@dataclass(frozen=True)
class PrecisionChoice:
    """What the probe found and what runs: ``mode`` is ``bf16`` or ``fp32``."""

    mode: Literal["fp32", "bf16"]
    reason: str
    speedup: float | None = None  # bf16 texts/s over fp32 texts/s on the probe set
    parity: float | None = None  # mean cosine between the probe texts' bf16 and fp32 vectors


def decide(speedup: float, parity: float) -> PrecisionChoice:
    """bf16 when it is faster by at least :data:`MIN_SPEEDUP` and equal to fp32 (cosine at least
    :data:`MIN_PARITY`); fp32 otherwise, saying why."""
    if parity < MIN_PARITY:
        reason = f"bf16 vectors differ from fp32 (cosine {parity:.4f} < {MIN_PARITY})"
        return PrecisionChoice("fp32", reason, speedup, parity)
    if speedup < MIN_SPEEDUP:
        reason = f"bf16 is not faster here ({speedup:.2f}x fp32 on the probe set)"
        return PrecisionChoice("fp32", reason, speedup, parity)
    reason = f"bf16 is {speedup:.2f}x fp32 on the probe set, vectors at cosine {parity:.4f}"
    return PrecisionChoice("bf16", reason, speedup, parity)


Encode = Callable[[list[str]], NDArray[np.float32]]


def _rates(encoders: list[Encode], texts: list[str], rounds: int) -> list[tuple[float, NDArray[np.float32]]]:
    """Texts per second of each encoder, the best of ``rounds`` timed passes (after one untimed
    warm-up pass each), with its vectors. The passes take turns (A, B, A, B...): on a shared machine
    a burst of other work then slows both sides, not the one that happened to run during it."""
    vectors = [encode(texts) for encode in encoders]
    best = [float("inf")] * len(encoders)
    for _ in range(rounds):
        for at, encode in enumerate(encoders):
            started = time.perf_counter()
            encode(texts)
            best[at] = min(best[at], time.perf_counter() - started)
    return [(len(texts) / seconds, found) for seconds, found in zip(best, vectors, strict=True)]


def probe(
    encode_fp32: Encode,
    encode_bf16: Encode,
    *,
    rounds: int = 3,
    forced: tuple[float, float] | None = None,
) -> PrecisionChoice:
    """Time both encoders on :data:`PROBE_TEXTS` and compare their vectors, then :func:`decide`.

    ``forced`` (speedup, parity) replaces what was measured once both have run: for tests that
    must reach both outcomes whatever the machine.
    """
    texts = list(PROBE_TEXTS)
    (fp32_rate, fp32_vectors), (bf16_rate, bf16_vectors) = _rates([encode_fp32, encode_bf16], texts, rounds)
    # Normalised again: bf16 rows are unit length only to bf16's precision.
    norms = np.linalg.norm(fp32_vectors, axis=1) * np.linalg.norm(bf16_vectors, axis=1)
    cosines = np.sum(fp32_vectors * bf16_vectors, axis=1) / norms
    speedup, parity = bf16_rate / fp32_rate, float(np.mean(cosines))
    log.info(
        "precision probe: fp32 %.0f texts/s, bf16 %.0f texts/s (%.2fx); cosine to fp32 mean %.5f, min %.5f",
        fp32_rate,
        bf16_rate,
        speedup,
        parity,
        float(np.min(cosines)),
    )
    return decide(*(forced or (speedup, parity)))


def report(choice: PrecisionChoice) -> None:
    """Log the mode that runs and set the ``memory_mcp_embedder_precision`` gauge to it."""
    for mode in ("fp32", "bf16"):
        EMBEDDER_PRECISION.labels(mode=mode).set(1 if mode == choice.mode else 0)
    log.info("embedding model runs in %s: %s", choice.mode, choice.reason)
