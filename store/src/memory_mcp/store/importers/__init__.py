"""Imports from the tools people leave: each format's parser turns its export into the records
:func:`~..transfer.import_entries` writes (one module a format; what becomes what is in each).

``parse(fmt, path, author, budget)`` reads a file, a folder or a zip archive and returns the records,
what was left out and what the reading cost, without touching the database. Authorship is the
importing user (``author``: ``{"name", "email"}`` of a user here, or None); dates are the input's
own. A reading that passes its ``budget`` (CPU time, bytes held: :mod:`.budget`) stops there with
:class:`~..errors.ImportOverBudget`; nothing has been written by then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import chatgpt, claude, markdown, mem0, memory_json
from .base import Builder, Parsed, Skipped
from .budget import Budget, Cost, Meter
from .bundle import Bundle, open_bundle
from .preview import Preview, preview

Parser = Callable[[Bundle, Builder], None]
# The names are the contract of ``import --from`` and of ``POST /v1/spaces/{key}/import?from=``.
PARSERS: dict[str, Parser] = {
    "chatgpt": chatgpt.parse,
    "claude": claude.parse,
    "mem0": mem0.parse,
    "memory-json": memory_json.parse,
    "markdown": markdown.parse,
}
FORMATS = tuple(PARSERS)


def parse(
    fmt: str, path: Path, author: Mapping[str, Any] | None = None, budget: Budget | None = None
) -> Parsed:
    """The records of the export at ``path`` in format ``fmt``; raises ValidationError when it cannot
    be read at all (not that format, too large, not there), ImportOverBudget when reading it costs
    more than ``budget``, else reports each part left out. Runs in the thread whose CPU time counts."""
    meter = Meter(budget)
    builder = Builder(fmt, author, meter)
    bundle = open_bundle(path, meter)
    try:
        PARSERS[fmt](bundle, builder)
    finally:
        bundle.close()
    for name, reason in bundle.left_out:
        builder.skip(f"archive member {name!r}", reason)
    return builder.finish()


__all__ = ["FORMATS", "PARSERS", "Budget", "Cost", "Parsed", "Preview", "Skipped", "parse", "preview"]
