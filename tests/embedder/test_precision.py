"""bf16 only where it pays: the start-up choice, with the real model in both number formats."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from prometheus_client import REGISTRY

from memory_mcp.embedder.model import SentenceTransformerModel, encode, load_model
from memory_mcp.embedder.precision import MIN_PARITY, MIN_SPEEDUP, PROBE_TEXTS, decide

TEXTS = ["The deploy window is Tuesday morning.", "Ada prefers tabs over spaces in Python files."]


def gauge(mode: str) -> float | None:
    return REGISTRY.get_sample_value("memory_mcp_embedder_precision", {"mode": mode})


@pytest.mark.parametrize(
    ("speedup", "parity", "mode"),
    [
        (2.6, 0.9999, "bf16"),  # faster and equal
        (0.85, 0.9999, "fp32"),  # equal but slower (AVX512-BF16 without AMX)
        (MIN_SPEEDUP - 0.01, 0.9999, "fp32"),  # within timing noise
        (2.6, MIN_PARITY - 0.001, "fp32"),  # faster but not equal
    ],
)
def test_bf16_is_chosen_only_when_faster_and_equal(speedup: float, parity: float, mode: str) -> None:
    choice = decide(speedup, parity)
    assert choice.mode == mode
    assert f"{speedup:.2f}x" in choice.reason or f"{parity:.4f}" in choice.reason


def test_the_real_model_switches_format_by_the_comparison_and_keeps_its_vectors() -> None:
    """Both outcomes on the real model: the probe runs both formats for real, and the comparison
    it acts on is forced through the parameter (the machine decides nothing here)."""
    loaded = load_model(None, "cpu")
    assert isinstance(loaded, SentenceTransformerModel)
    reference = encode(loaded, TEXTS)

    faster = loaded.choose_precision("auto", forced=(2.0, 0.9999))
    assert faster.mode == "bf16" and loaded.precision is faster
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    in_bf16 = encode(loaded, TEXTS)
    assert in_bf16.dtype == np.float32
    assert float(np.min(np.sum(reference * in_bf16, axis=1))) > 0.99
    assert gauge("bf16") == 1 and gauge("fp32") == 0

    slower = loaded.choose_precision("auto", forced=(0.8, 0.9999))
    assert slower.mode == "fp32"
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert np.allclose(encode(loaded, TEXTS), reference, atol=1e-6)
    assert gauge("bf16") == 0 and gauge("fp32") == 1


def test_the_unforced_probe_measures_both_formats_and_acts_on_what_it_measured() -> None:
    loaded = load_model(None, "cpu", precision="auto")
    assert isinstance(loaded, SentenceTransformerModel)
    choice = loaded.precision
    assert choice.speedup is not None and choice.speedup > 0
    assert choice.parity is not None and 0.99 < choice.parity <= 1 + 1e-6
    assert decide(choice.speedup, choice.parity).mode == choice.mode
    wanted = torch.bfloat16 if choice.mode == "bf16" else torch.float32
    assert next(loaded.model.parameters()).dtype == wanted
    assert len(PROBE_TEXTS) >= 16


def test_a_fixed_format_is_used_without_a_probe() -> None:
    loaded = load_model(None, "cpu", precision="bf16")
    assert loaded.precision.mode == "bf16" and loaded.precision.speedup is None
    assert isinstance(loaded, SentenceTransformerModel)
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
