"""Lean search answers: which ranked results are worth a reader's tokens, and how much of each.

Search ranks; this decides what an answer carries. Results under the relevance floor are dropped,
not listed as "the closest there is": after two uploads, a question that matched nothing answered
with 8-11.6k characters of weak results. A result far below the best one is dropped too, a token
budget caps what is left, and a long piece of a document is shown by the passage that matches.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .search import STOPWORDS, SearchHit

# A result whose fused score is under this share of the best result's is dropped (when the search
# has a question; a literal keyword or category match is always what was asked for). On LoCoMo dev
# (conv-26, conv-30) 0.3 and 0.4 cost no hit@10, 0.5 cost 1.3 points, 0.6 cost 2.1
# (bench/answers.py, docs/performance.md).
RELATIVE_FLOOR = 0.4
# A piece of a document longer than this (characters) is shown by its best passage of about this
# length; the whole piece stays one getDocument away. Saved memories are always shown whole.
PASSAGE_CHARS = 480
# What one result line costs beyond its text, in cl100k tokens: its short id (2.6 for 4 digits, 4.9
# for 8), the space and newline, a mark or two and, when authors differ, a byline (about 8); and
# what an answer's lead line costs (about 13 on LoCoMo answers, 16 with a shared author and day).
# Estimates for the budget only.
LINE_TOKENS = 10
HEADER_TOKENS = 16

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")
_STOP = frozenset(STOPWORDS)
# Query words match by their first letters, as full-text search does (search.SearchParams).
_PREFIX = 5


def estimate_tokens(content: str) -> int:
    """Tokens of ``content``: about four characters a token for English-like text (checked
    against cl100k in the tests); never less than one."""
    return max(1, (len(content) + 3) // 4)


def relevant(
    hits: Sequence[SearchHit], has_query: bool, relative_floor: float = RELATIVE_FLOOR
) -> list[SearchHit]:
    """The hits worth showing, in their order. The absolute floor (``SearchHit.matching``) says
    whether the space holds anything on the question: when no hit clears it, none is shown. When
    one does, a question's answer is every hit with at least ``relative_floor`` of the best score,
    whether or not it clears the absolute floor itself; without a question (a keyword or category
    match, what was asked for) the hits that clear it.

    The absolute floor used to apply to each hit. Conversations' turns often share few words and
    little meaning with the question they answer ("What did we talk about on 4 May?"): on
    MemoryBank (run once as a held-out set, spent since) it dropped the evidence of 7 in 100
    questions from answers that had room for it (hit@10 0.909 in the store's top ten, 0.838 in the
    answers; 0.909 with this rule, 9.9 results shown against 5.7). On LoCoMo dev the answers kept
    hit@10 0.837 either way (10.0 shown against 9.7). ``python -m bench.answers --locomo``."""
    if not any(h.matching for h in hits):
        return []
    if not has_query:
        return [h for h in hits if h.matching]
    best = max(h.score for h in hits)
    return [h for h in hits if best <= 0 or h.score >= best * relative_floor]


def within_budget(costs: Sequence[int], budget: int) -> int:
    """How many of the leading results (by their token ``costs``) fit in ``budget``; always at
    least one when there is one, so an answer never comes back empty for want of room."""
    used = 0
    for n, cost in enumerate(costs):
        if used + cost > budget and n > 0:
            return n
        used += cost
    return len(costs)


@dataclass(frozen=True)
class Passage:
    text: str  # on one line, with "…" where it was cut
    start: int  # character range in the piece
    end: int


def _terms(*texts: str | None) -> set[str]:
    words = (w.lower() for t in texts if t for w in _WORD.findall(t))
    return {w[:_PREFIX] for w in words if len(w) > 1 and w not in _STOP}


def _spans(content: str) -> list[tuple[int, int]]:
    """Sentence (or line) spans of ``content``, without the whitespace between them."""
    spans, start = [], 0
    for gap in _SENTENCE.finditer(content):
        if gap.start() > start:
            spans.append((start, gap.start()))
        start = gap.end()
    if start < len(content):
        spans.append((start, len(content)))
    return spans


def _hits(text: str, terms: set[str]) -> int:
    return len(terms & {w.lower()[:_PREFIX] for w in _WORD.findall(text)})


def passage(
    content: str, query: str | None, keyword: str | None = None, max_chars: int = PASSAGE_CHARS
) -> Passage | None:
    """The run of whole sentences, at most about ``max_chars`` long, that holds the most of the
    query's words (the literal keyword counts first); None when ``content`` is short enough to
    show whole."""
    if len(content) <= max_chars:
        return None
    terms = _terms(query, keyword)
    spans = _spans(content)
    best: tuple[int, int, int] | None = None  # (score, first span, last span)
    for i in range(len(spans)):
        j = i
        while j + 1 < len(spans) and spans[j + 1][1] - spans[i][0] <= max_chars:
            j += 1
        window = content[spans[i][0] : spans[j][1]]
        score = _hits(window, terms) + (10 if keyword and keyword.lower() in window.lower() else 0)
        if best is None or score > best[0]:
            best = (score, i, j)
    assert best is not None
    start, end = spans[best[1]][0], spans[best[2]][1]
    if end - start > max_chars:  # one sentence longer than a passage: cut at words around its match
        start, end = _cut(content, start, end, terms, keyword, max_chars)
    # On one line: a page's line breaks are layout, and every quoted line costs its own marker.
    text = " ".join(content[start:end].split())
    return Passage(("…" if start > 0 else "") + text + ("…" if end < len(content) else ""), start, end)


def _cut(
    content: str, start: int, end: int, terms: set[str], keyword: str | None, max_chars: int
) -> tuple[int, int]:
    """A window of ``max_chars`` inside one long sentence, starting a little before its first
    matching word, at word boundaries."""
    anchor = start
    lowered = content[start:end].lower()
    if keyword and (at := lowered.find(keyword.lower())) >= 0:
        anchor = start + at
    else:
        for word in _WORD.finditer(content, start, end):
            if word.group().lower()[:_PREFIX] in terms:
                anchor = word.start()
                break
    lo = max(start, anchor - max_chars // 4)
    hi = min(end, lo + max_chars)
    while lo > start and not content[lo - 1].isspace():
        lo += 1
    while hi < end and not content[hi].isspace():
        hi -= 1
    return lo, max(hi, lo + 1)
