"""What reading one export may cost: CPU time and the bytes it holds, checked as it goes.

An import reads its export (the parse, in the thread that runs :func:`..parse`) before it writes
anything, so a reading stopped here leaves the space as it was. The CPU budget is that thread's own
time (:func:`time.thread_time`: the inflating, decoding and parsing, not the other requests of the
process). The memory budget is the importer's own accounting of what it holds, not a measure of the
process (tracemalloc would slow the parse several times): the text of the records made so far,
the text read but not yet parsed, and the item being parsed (a conversation, a memory), counted at
:data:`DECODED_PER_CHAR` bytes per character of its JSON. ``bench/upload_bombs.py`` prints this
peak beside the RSS it stands for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import validation
from ..errors import ImportOverBudget

# Bytes a decoded JSON item takes per character of its text: 4.2-4.5 measured with tracemalloc on
# ChatGPT conversations (small dicts and short strings cost more than their text); long strings
# cost about 1.
DECODED_PER_CHAR = 5
# What a record holds beside its text (the dataclass, its id, hash, dates and position): about
# 1 KB measured per record of a parsed ChatGPT export.
RECORD_BYTES = 1024


@dataclass(frozen=True)
class Budget:
    """What one import's reading may cost (the settings ``max_import_cpu_seconds`` and
    ``max_import_memory_bytes`` at the edges; these defaults elsewhere)."""

    cpu_seconds: float = validation.MAX_IMPORT_CPU_SECONDS
    memory_bytes: int = validation.MAX_IMPORT_MEMORY_BYTES


@dataclass(frozen=True)
class Cost:
    """What reading one export cost: the bytes read (inflated, for a zip), the most it held at
    once, and its CPU time."""

    read_bytes: int
    peak_bytes: int
    cpu_seconds: float


class Meter:
    """One import's running cost against its budget; every check raises :class:`ImportOverBudget`
    as soon as either is passed. Made in the thread that reads (its CPU time is that thread's)."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self._started = time.thread_time()
        self.where = "the export"  # the file being read, for the refusal
        self.read = 0  # bytes read so far
        self.records = 0  # bytes held by the records made so far
        self.buffer = 0  # characters read and not yet parsed
        self.item = 0  # characters of the JSON item being parsed
        self.peak = 0

    @property
    def held(self) -> int:
        return self.records + self.buffer + self.item * DECODED_PER_CHAR

    def cpu_seconds(self) -> float:
        return time.thread_time() - self._started

    def check(self) -> None:
        """Refuse the import if it has held or spent more than its budget."""
        held = self.held
        self.peak = max(self.peak, held)
        if held > self.budget.memory_bytes:
            raise ImportOverBudget(
                "memory",
                f"reading {self.where} would hold more than this server's {_size(self.budget.memory_bytes)} "
                f"for one import (by byte {self.read:,}); nothing was imported (split the export, or "
                "raise the import budget)",
            )
        if (spent := self.cpu_seconds()) > self.budget.cpu_seconds:
            raise ImportOverBudget(
                "cpu",
                f"reading {self.where} took more than this server's {self.budget.cpu_seconds:g} s of CPU "
                f"for one import ({spent:.3f} s, by byte {self.read:,}); nothing was imported (split "
                "the export, or raise the import budget)",
            )

    def hold(self, size: int) -> None:
        """Count ``size`` more bytes of records held, and check."""
        self.records += size
        self.check()

    def cost(self) -> Cost:
        self.peak = max(self.peak, self.held)
        return Cost(self.read, self.peak, round(self.cpu_seconds(), 3))


def _size(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB" if value >= 2**20 else f"{value:,} bytes"
