"""A part of a docs page written by a program: the text between two marker lines, rewritten in place.

The limits table (:mod:`memory_mcp.core.limits`) and the settings reference
(:mod:`memory_mcp.core.settings_reference`) each own a pair of markers and the text between them;
tests compare the page with what the program writes now.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path


def replace_section(text: str, begin: str, end: str, body: str, what: str) -> str:
    """``text`` with everything from the ``begin`` line to the ``end`` line replaced by ``body``."""
    section = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not section.search(text):
        raise ValueError(f"no {what} (a line '{begin}') in the file")
    return section.sub(lambda _: body, text)


def rewrite_files(paths: list[str], rewrite: Callable[[str], str]) -> None:
    """Rewrite each file in place with ``rewrite`` (the command line of both generators)."""
    for name in paths:
        path = Path(name)
        path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
