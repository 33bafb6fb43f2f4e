"""What a question's embedding would cost through ONNX Runtime instead of torch: CPU per question
and how far the vectors move.

A search with a question it has not seen spends most of its CPU on MiniLM's forward pass (14-18 ms
on two busy cores, docs/performance.md, "Where each millisecond goes"). This exports the default
model to ONNX in a temporary folder (``torch.onnx.export``, which needs the ``onnx`` package:
``pip install onnx``; ONNX Runtime itself is already installed with faster-whisper), then encodes
the same questions both ways on one thread, alternating, and prints CPU ms a question and the
largest difference between the two vectors (mean pooling and normalisation as sentence-transformers
does them). Nothing in the product uses the ONNX model yet: this measures whether it should.

    python -m bench.onnx_query [--calls 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine
from memory_mcp.embedder.model import resolve_model_path

QUESTIONS = [
    "What did Caroline research for her art project last month?",
    "Which database does the billing team use now?",
    "When did Melanie paint a sunrise?",
    "Who owns the deploy pipeline?",
    "How long has the on-call rotation been weekly?",
    "What does Jon like to cook on weekends?",
]


def _cpu_ms(encode: Callable[[str], Any], calls: int) -> float:
    for q in QUESTIONS:
        encode(q)
    started = time.process_time()
    for i in range(calls):
        encode(QUESTIONS[i % len(QUESTIONS)])
    return (time.process_time() - started) / calls * 1000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="questions encoded each way, per round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
        import onnxruntime as ort
    except ImportError as e:
        print(f"bench.onnx_query: {e.name} is not installed (pip install onnx)", file=sys.stderr)
        return 2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(resolve_model_path(None)), device="cpu")
    tokenizer, bert = model.tokenizer, model[0].auto_model.eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class Hidden(torch.nn.Module):
        """The model's last hidden states, from positional inputs (what the exporter traces)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        sample = tokenizer(QUESTIONS[:1], return_tensors="pt")
        axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "hidden"]}
        torch.onnx.export(
            Hidden(), tuple(sample[n] for n in names), str(path), input_names=names,
            output_names=["hidden"], dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def onnx_vector(question: str) -> np.ndarray:
        tokens = tokenizer([question], return_tensors="np", truncation=True)
        hidden = session.run(None, {n: tokens[n] for n in names})[0]
        mask = tokens["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))

    def torch_vector(question: str) -> np.ndarray:
        return np.asarray(model.encode([question], normalize_embeddings=True, show_progress_bar=False))

    moved = max(float(np.abs(onnx_vector(q) - torch_vector(q)).max()) for q in QUESTIONS)
    print(f"machine: {machine()}")
    print(f"largest difference between the two vectors of a question: {moved:.1e}")
    for n in range(args.rounds):
        torch_ms, onnx_ms = _cpu_ms(torch_vector, args.calls), _cpu_ms(onnx_vector, args.calls)
        print(
            f"round {n + 1}: CPU ms a question, one thread: torch {torch_ms:.1f}, ONNX Runtime {onnx_ms:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
