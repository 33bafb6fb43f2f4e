"""Checksums of a model's files: what the static table and the precision verdicts are keyed by."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

# The files whose bytes decide a model's vectors: weights, vocabulary and tokenizer settings.
MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "config.json")

# Each file's checksum by (path, size, modification time): a process that needs a checksum twice
# (the static table's teacher and the precision verdict are the same MiniLM) reads its 90 MB once.
_known: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _known:
        digest = hashlib.sha256()
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _known[key] = digest.hexdigest()
    return _known[key]


def files_checksum(folder: Path, header: str, names: Iterable[str] = MODEL_FILES) -> str:
    """One checksum over ``header`` and those of ``names`` that are files in ``folder``."""
    digest = hashlib.sha256(header.encode())
    for name in names:
        path = folder / name
        if path.is_file():
            digest.update(f"{name} {sha256_file(path)}\n".encode())
    return digest.hexdigest()
