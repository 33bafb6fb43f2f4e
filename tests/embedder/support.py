"""Helpers for the embedder tests."""

from __future__ import annotations

import socket

import numpy as np


def free_port() -> int:
    """A loopback port nobody listens on (the kernel picks one, we release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


SENTENCES = [
    f"note {i}: the {topic} team discussed {thing} during the weekly meeting"
    for i, (topic, thing) in enumerate(
        (t, s)
        for t in ("search", "storage", "billing", "design")
        for s in ("latency", "indexes", "invoices", "colours", "backups", "alerts", "releases", "quotas")
    )
]


# One meaning in English, German and Italian, and an English sentence about something else.
SAME_MEANING = {
    "en": "The train to Munich leaves at eight in the morning.",
    "de": "Der Zug nach München fährt um acht Uhr morgens ab.",
    "it": "Il treno per Monaco parte alle otto del mattino.",
}
UNRELATED = "Our quarterly budget review found several invoices that were paid twice."


def make_small_teacher(folder) -> None:
    """A teacher for the static table that distils in about a second: a one-layer BERT, 384 wide
    like the packaged MiniLM, with random weights and a vocabulary of a few hundred words."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = sorted(
        {w for s in SENTENCES for w in s.replace(":", " ").split()} | set(SAME_MEANING["en"].split())
    )
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *(f"word{i}" for i in range(200))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(str(folder))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=384,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(folder))
