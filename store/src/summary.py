"""A document's title and extractive summary, made without a language model.

The summary is the document's most representative sentences, in document order: each sentence is
scored by how frequent its words are in the whole document (stopwords of English, German and
Italian left out), so sentences about what the document keeps coming back to win.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from .search import STOPWORDS

SUMMARY_SENTENCES = 3
MAX_SUMMARY = 600  # characters; a listing shows every document's summary
MAX_TITLE = 200
# Sentences are scored over at most this much of the content: the summary of a long book need not
# cost a pass over all of it, and what a document is about shows early.
SCORED_CHARS = 200_000

_STOP = frozenset(STOPWORDS)
_WORD = re.compile(r"[^\W\d_]{3,}")
_SENTENCE = re.compile(r"[^.!?\n\u2026\u3002]+[.!?\u2026\u3002]*")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def title_for(content: str, *, given: str | None, heading: str | None, file_name: str | None) -> str:
    """The title a person gave, else the document's first heading, else its file name, else its
    first line."""
    for candidate in (given, heading):
        if candidate and candidate.strip():
            return _shorten(candidate, MAX_TITLE)
    if file_name is None:
        found = _HEADING.search(content[:SCORED_CHARS])
        if found:
            return _shorten(found.group(1), MAX_TITLE)
    if file_name and file_name.strip():
        return _shorten(file_name, MAX_TITLE)
    first = content.strip().splitlines()[0] if content.strip() else "untitled"
    return _shorten(first, 80)


def summarize(content: str, sentences: int = SUMMARY_SENTENCES, limit: int = MAX_SUMMARY) -> str:
    """The ``sentences`` sentences of ``content`` whose words are most frequent in it, in order."""
    text = content[:SCORED_CHARS]
    found = [(m.start(), m.group().strip()) for m in _SENTENCE.finditer(text)]
    found = [(at, s) for at, s in found if len(_WORD.findall(s)) >= 3]
    if not found:
        return _shorten(text, limit)
    freq = Counter(w for w in (w.lower() for w in _WORD.findall(text)) if w not in _STOP)

    def score(sentence: str) -> float:
        words = [w.lower() for w in _WORD.findall(sentence)]
        meaningful: list[int] = [freq[w] for w in words if w not in _STOP]
        # Normalised by the square root of the length: long sentences do not win by length alone.
        return sum(meaningful) / math.sqrt(max(len(words), 1))

    best = sorted(found, key=lambda item: score(item[1]), reverse=True)[:sentences]
    chosen = [s for _, s in sorted(best)]
    summary = ""
    for sentence in chosen:
        candidate = f"{summary} {sentence}".strip()
        if len(candidate) > limit:
            break
        summary = candidate
    return summary or _shorten(chosen[0], limit)
