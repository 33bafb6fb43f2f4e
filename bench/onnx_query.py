"""A question's embedding through ONNX Runtime against torch, as the embedder runs them: CPU per
question, how far the vectors move, and what making and opening the ONNX file costs.

The embedder runs a short forward pass (a search's question, a single save) through ONNX Runtime
once MiniLM's ONNX file is ready and checked, torch before that and for long batches
(``memory_mcp.embedder.onnx_model``). This loads the packaged MiniLM twice through
``load_model``: once with torch alone, once with its ONNX file in a new temporary folder (timing
the export, the session and the parity check, which run in the background while a server serves)
and again from that folder (what every later start pays). Then it encodes the same questions one
at a time both ways through ``encode``, alternating, and prints CPU ms a question and the largest
difference between the two vectors of a question. The int8 copy that a server's questions take
(``embedding_int8_queries``) is timed in the same rounds, with the lowest cosine between its vector
of a question and torch's.

    python -m bench.onnx_query [--calls 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import machine
from memory_mcp.embedder.model import EmbeddingModel, encode, load_model

QUESTIONS = [
    "What did Caroline research for her art project last month?",
    "Which database does the billing team use now?",
    "When did Melanie paint a sunrise?",
    "Who owns the deploy pipeline?",
    "How long has the on-call rotation been weekly?",
    "What does Jon like to cook on weekends?",
]


def _cpu_ms(model: EmbeddingModel, calls: int) -> float:
    for question in QUESTIONS:
        encode(model, [question], "query")
    started = time.process_time()
    for i in range(calls):
        encode(model, [QUESTIONS[i % len(QUESTIONS)]], "query")
    return (time.process_time() - started) / calls * 1000


def _settled(folder: Path, int8_queries: bool = False) -> tuple[EmbeddingModel, float, float]:
    """The model with its short passes' runtime settled from ``folder``, and the wall and CPU
    seconds that took after the model itself had loaded."""
    wall, cpu = time.perf_counter(), time.process_time()
    model = load_model(None, "cpu", onnx_roots=[folder], int8_queries=int8_queries)
    loaded_wall, loaded_cpu = time.perf_counter() - wall, time.process_time() - cpu
    model.short_runtime_settled.wait()
    return model, time.perf_counter() - wall - loaded_wall, time.process_time() - cpu - loaded_cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="questions encoded each way, per round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    torch_model = load_model(None, "cpu")
    with tempfile.TemporaryDirectory() as folder:
        _, made_s, made_cpu = _settled(Path(folder))
        onnx_model, opened_s, opened_cpu = _settled(Path(folder))
        int8_model, _, _ = _settled(Path(folder), int8_queries=True)
    if onnx_model.short_runtime != "onnxruntime" or not int8_model.queries_differ:
        print("bench.onnx_query: the ONNX model is not used (see the log line above)", file=sys.stderr)
        return 1
    print(
        f"after the model loads, in the background: a new ONNX file (export, session, parity check) "
        f"{made_s:.1f} s ({made_cpu:.1f} s of CPU); an existing one (checksum, session, parity check) "
        f"{opened_s:.1f} s ({opened_cpu:.1f} s of CPU)"
    )
    moved = max(
        float(np.abs(encode(onnx_model, [q], "query") - encode(torch_model, [q], "query")).max())
        for q in QUESTIONS
    )
    print(f"largest difference between the two vectors of a question: {moved:.1e}")
    cosine = min(
        float(encode(int8_model, [q], "query")[0] @ encode(torch_model, [q], "query")[0]) for q in QUESTIONS
    )
    print(f"lowest cosine between the int8 copy's vector of a question and torch's: {cosine:.4f}")
    for n in range(args.rounds):
        torch_ms, onnx_ms = _cpu_ms(torch_model, args.calls), _cpu_ms(onnx_model, args.calls)
        int8_ms = _cpu_ms(int8_model, args.calls)
        print(
            f"round {n + 1}: CPU ms a question: torch {torch_ms:.1f}, ONNX Runtime {onnx_ms:.1f}, "
            f"its int8 copy {int8_ms:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
