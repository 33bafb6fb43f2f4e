"""The precision probe's verdicts, kept per model and CPU: the probe runs once on a machine, not at
every start (it took seconds of a start that the model itself loads in a few).

A verdict is keyed by the model's checksum, the CPU (its model name and flags), torch's version
(which decides the bf16 kernels), the device and the probe's own thresholds: any of them changing
measures again. The file is one JSON object in the machine's cache; it is written whole to a
temporary file and renamed, so a reader never sees half of it, and deleting it only costs a probe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import tempfile
from dataclasses import asdict
from pathlib import Path

from .checksum import files_checksum
from .precision import MIN_PARITY, MIN_SPEEDUP, PrecisionChoice

log = logging.getLogger(__name__)


def cpu_signature() -> str:
    """The CPU's model name and flags (the first processor's, from /proc/cpuinfo), or what the
    platform says where there is no such file."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "flags", "Features", "CPU part") and name not in fields:
                fields[name] = " ".join(value.split())
    return (
        "; ".join(f"{k}: {v}" for k, v in sorted(fields.items()))
        or f"{platform.machine()} {platform.processor()}"
    )


def verdict_key(model_folder: Path, device: str) -> str:
    """What a verdict holds for: this model's files, on this CPU and device, with this torch."""
    import torch

    model = files_checksum(model_folder, "")
    parts = [model, cpu_signature(), torch.__version__, device, f"{MIN_SPEEDUP} {MIN_PARITY}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class Verdicts:
    """The verdict of one key in one file: :meth:`get` it, or :meth:`put` the one just measured."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key

    def _read(self) -> dict[str, object]:
        try:
            kept = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return kept if isinstance(kept, dict) else {}

    def get(self) -> PrecisionChoice | None:
        """The verdict kept for this key, or None (never measured, or unreadable)."""
        found = self._read().get(self.key)
        if not isinstance(found, dict) or found.get("mode") not in ("fp32", "bf16"):
            return None
        try:
            return PrecisionChoice(
                found["mode"],
                f"kept from this CPU's probe ({found['reason']})",
                found.get("speedup"),
                found.get("parity"),
            )
        except (KeyError, TypeError):
            return None

    def put(self, choice: PrecisionChoice) -> None:
        """Keep ``choice`` for this key beside the others; a cache that cannot be written is only
        logged (the next start measures again)."""
        kept = self._read()
        kept[self.key] = asdict(choice)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, staging = tempfile.mkstemp(prefix=".precision-", dir=self.path.parent)
            with os.fdopen(fd, "w") as file:
                json.dump(kept, file, indent=2)
            os.replace(staging, self.path)
        except OSError as exc:
            log.warning("could not keep the precision verdict in %s: %s", self.path, exc)
