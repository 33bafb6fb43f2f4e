"""From a document's sections to memories: pieces of at most one memory's length, with offsets.

A document's content is its sections' texts joined by a blank line. Pieces are cut at paragraph
boundaries first, then at sentence boundaries inside a paragraph too long for one memory, and only
as a last resort at a space inside a sentence. Every piece is a stretch of the content itself, so
``content[piece.start:piece.end] == piece.text``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .extractors import Section
from .validation import MAX_CONTENT

# Pieces are packed up to this many characters (never past MAX_CONTENT). The packaged MiniLM reads
# at most 256 word pieces, about 1,000-1,200 characters of English: a longer memory is still found
# by full text, but its meaning past that point is not in its vector.
PIECE_TARGET = 1200
# Content shown per page (getDocument) for kinds without pages of their own.
PAGE_CHARS = 10_000

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# After sentence punctuation (optionally closed by a quote or bracket), before the next word.
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026\u3002])[\"'\u201d\u2019)\]]*\s+")


@dataclass(frozen=True)
class Piece:
    """One future memory: its text and where it lies in the document."""

    text: str
    start: int
    end: int
    page: int | None = None
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    section: int


def layout(sections: Sequence[Section]) -> tuple[str, list[int]]:
    """The document's content and where each section starts in it."""
    starts, offset = [], 0
    for section in sections:
        starts.append(offset)
        offset += len(section.text) + 2
    return "\n\n".join(s.text for s in sections), starts


def _trimmed(content: str, start: int, end: int) -> tuple[int, int]:
    while start < end and content[start].isspace():
        start += 1
    while end > start and content[end - 1].isspace():
        end -= 1
    return start, end


def _pieces_of(content: str, start: int, end: int, pattern: re.Pattern[str]) -> Iterator[tuple[int, int]]:
    """The stretches between the matches of ``pattern`` in ``content[start:end]``, trimmed, non-empty."""
    at = start
    for match in pattern.finditer(content, start, end):
        s, e = _trimmed(content, at, match.start() if pattern is _PARAGRAPH_BREAK else match.end())
        if s < e:
            yield s, e
        at = match.end()
    s, e = _trimmed(content, at, end)
    if s < e:
        yield s, e


def _hard_split(content: str, start: int, end: int, limit: int) -> Iterator[tuple[int, int]]:
    """A stretch with no sentence boundary in reach: cut at the last space before the limit."""
    while end - start > limit:
        cut = content.rfind(" ", start + limit // 2, start + limit)
        cut = cut if cut > start else start + limit
        s, e = _trimmed(content, start, cut)
        if s < e:
            yield s, e
        start, _ = _trimmed(content, cut, end)
    if start < end:
        yield start, end


def _units(content: str, start: int, end: int, limit: int) -> Iterator[tuple[int, int]]:
    """Paragraphs of one section, each at most ``limit`` long (split by sentences, then by spaces)."""
    for p_start, p_end in _pieces_of(content, start, end, _PARAGRAPH_BREAK):
        if p_end - p_start <= limit:
            yield p_start, p_end
            continue
        for s_start, s_end in _pieces_of(content, p_start, p_end, _SENTENCE_END):
            yield from _hard_split(content, s_start, s_end, limit)


def _joinable(a: Section, b: Section) -> bool:
    """Whether pieces may span the two sections: neither stands alone, and they share a page."""
    return not a.separate and not b.separate and a.page == b.page


def chunk(
    sections: Sequence[Section], target: int = PIECE_TARGET, limit: int = MAX_CONTENT
) -> tuple[str, list[Piece]]:
    """The content of ``sections`` and its pieces, in document order.

    Neighbouring paragraphs are packed together up to ``target`` characters; a section marked
    ``separate`` (a CSV row group with its header) is never packed with another one.
    """
    content, starts = layout(sections)
    spans: list[_Span] = [
        _Span(s, e, i)
        for i, section in enumerate(sections)
        for s, e in _units(content, starts[i], starts[i] + len(section.text), limit)
    ]
    groups: list[list[_Span]] = []
    for span in spans:
        current = groups[-1] if groups else None
        if (
            current is not None
            and span.end - current[0].start <= target
            and (
                span.section == current[-1].section
                or _joinable(sections[current[-1].section], sections[span.section])
            )
        ):
            current.append(span)
        else:
            groups.append([span])
    pieces = []
    for group in groups:
        start, end = group[0].start, group[-1].end
        members = [sections[i] for i in dict.fromkeys(s.section for s in group)]
        times_start = [m.start_s for m in members if m.start_s is not None]
        times_end = [m.end_s for m in members if m.end_s is not None]
        pieces.append(
            Piece(
                text=content[start:end],
                start=start,
                end=end,
                page=members[0].page,
                start_s=min(times_start) if times_start else None,
                end_s=max(times_end) if times_end else None,
            )
        )
    return content, pieces


def pages(content: str, pieces: Sequence[Piece], page_chars: int = PAGE_CHARS) -> list[tuple[int, int]]:
    """The content's pages as character ranges covering all of it: the file's own pages where it has
    them, else stretches of about ``page_chars`` that end where a piece ends."""
    if not pieces:
        return [(0, len(content))]
    firsts = [0]
    for prev, piece in itertools.pairwise(pieces):
        new_page = piece.page != prev.page if piece.page is not None else piece.end - firsts[-1] > page_chars
        if new_page:
            firsts.append(piece.start)
    return [(s, e) for s, e in zip(firsts, [*firsts[1:], len(content)], strict=True)]
