"""Which saves should supersede a live memory: false and missed merges of candidate rules, measured.

A labelled set of pairs (an earlier memory, a later save into the same space):

- **same fact** (a merge is right): every correction of the generated benchmark
  (``bench/retrieval_dataset.py``: the later memory supersedes the earlier one), in English, German
  and Italian;
- **different facts** (a merge loses one): each memory of the generated benchmark with its nearest
  other memory of the same space by the model's cosine (look-alikes such as the VPN gateway of
  contractors and of employees), and, with the LoCoMo path given, each dialog turn of the dev
  conversations with its nearest other turn of the same conversation (turns are distinct statements).

For each rule the false-merge rate (different-fact pairs it would merge) and the missed-merge rate
(same-fact pairs it would not) are printed. Signals: the model's cosine (MiniLM), the static
embedding's cosine, and the share of the later text's words that the earlier one lacks.

    python -m bench.restatements [LOCOMO_PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import machine
from bench.locomo import load_locomo, select
from bench.retrieval_dataset import build_dataset
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import make_embedder
from memory_mcp.embedder.static import load_static_model

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Pair:
    earlier: str
    later: str
    same_fact: bool
    source: str
    cosine: float = 0.0
    static: float = 0.0
    new_words: float = 0.0  # share of the later text's words missing from the earlier


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def new_words(earlier: str, later: str) -> float:
    words = _words(later)
    return len(words - _words(earlier)) / max(len(words), 1)


def _nearest_pairs(texts: Sequence[str], vectors: np.ndarray, source: str) -> list[Pair]:
    """Each text with its nearest other text (by cosine), as a different-fact pair."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -1.0)
    return [Pair(texts[int(sims[i].argmax())], texts[i], False, source) for i in range(len(texts))]


def generated_pairs(vectors: dict[str, np.ndarray]) -> list[Pair]:
    data = build_dataset()
    pairs = [
        Pair(data.by_key[m.supersedes].content, m.content, True, "generated correction")
        for m in data.memories
        if m.supersedes
    ]
    linked = {(p.earlier, p.later) for p in pairs} | {(p.later, p.earlier) for p in pairs}
    for space in data.spaces:
        texts = [m.content for m in data.memories if m.space == space]
        pairs += [
            p
            for p in _nearest_pairs(texts, np.stack([vectors[t] for t in texts]), "generated look-alike")
            if (p.earlier, p.later) not in linked
        ]
    return pairs


def locomo_pairs(path: Path, vectors: dict[str, np.ndarray]) -> list[Pair]:
    pairs: list[Pair] = []
    for conversation in select(load_locomo(path), "dev", 0):
        texts = list(dict.fromkeys(t.text for t in conversation.turns))
        pairs += _nearest_pairs(texts, np.stack([vectors[t] for t in texts]), "LoCoMo dev neighbour")
    return pairs


Rule = Callable[[Pair], bool]


def rules() -> list[tuple[str, Rule]]:
    out: list[tuple[str, Rule]] = []
    for t in (0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6):
        out.append((f"cosine >= {t}", lambda p, t=t: p.cosine >= t))
    for t in (0.95, 0.9, 0.85, 0.8):
        out.append((f"static >= {t}", lambda p, t=t: p.static >= t))
    for t in (0.9, 0.85, 0.8):
        out.append((f"cosine and static >= {t}", lambda p, t=t: min(p.cosine, p.static) >= t))
    for t, w in ((0.8, 0.5), (0.8, 0.3), (0.7, 0.3), (0.7, 0.2)):
        out.append(
            (f"cosine >= {t}, new words <= {w}", lambda p, t=t, w=w: p.cosine >= t and p.new_words <= w)
        )
    return out


def report(pairs: Sequence[Pair]) -> None:
    same = [p for p in pairs if p.same_fact]
    different = [p for p in pairs if not p.same_fact]
    for source in sorted({p.source for p in pairs}):
        cos = [p.cosine for p in pairs if p.source == source]
        print(
            f"{source}: {len(cos)} pairs, cosine median {np.median(cos):.3f} (p10 {np.percentile(cos, 10):.3f}, p90 {np.percentile(cos, 90):.3f})"
        )
    print(f"\n{len(same)} same-fact pairs, {len(different)} different-fact pairs")
    print(f"{'rule':34} {'false merges':>13} {'missed merges':>14}")
    for name, rule in rules():
        false = sum(rule(p) for p in different) / len(different)
        missed = sum(not rule(p) for p in same) / len(same)
        print(f"{name:34} {false:13.1%} {missed:14.1%}")


async def run(locomo: Path | None) -> None:
    settings = Settings(embedder="local")
    print(f"machine: {machine()}")
    data = build_dataset()
    texts = [m.content for m in data.memories]
    if locomo is not None:
        texts += [t.text for c in select(load_locomo(locomo), "dev", 0) for t in c.turns]
    texts = list(dict.fromkeys(texts))
    embedder = await make_embedder(settings)
    try:
        model = []
        for start in range(0, len(texts), 64):
            model.extend(await embedder.embed(texts[start : start + 64]))
    finally:
        await embedder.aclose()
    vectors = {t: np.asarray(v, dtype=np.float32) for t, v in zip(texts, model, strict=True)}
    static_model = load_static_model(settings.static_embedding_cache_dir)
    statics = {t: v for t, v in zip(texts, static_model.encode(texts), strict=True)}
    pairs = generated_pairs(vectors) + (locomo_pairs(locomo, vectors) if locomo is not None else [])

    def unit(v: np.ndarray) -> np.ndarray:
        return v / max(float(np.linalg.norm(v)), 1e-9)

    scored = [
        Pair(
            p.earlier,
            p.later,
            p.same_fact,
            p.source,
            cosine=float(unit(vectors[p.earlier]) @ unit(vectors[p.later])),
            static=float(unit(statics[p.earlier]) @ unit(statics[p.later])),
            new_words=new_words(p.earlier, p.later),
        )
        for p in pairs
    ]
    report(scored)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", nargs="?", type=Path, help="locomo10.zip (or its folder or JSON); optional")
    args = parser.parse_args()
    asyncio.run(run(args.locomo))


if __name__ == "__main__":
    main()
