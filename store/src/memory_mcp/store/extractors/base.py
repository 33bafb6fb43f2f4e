"""The shape every extractor returns, its two errors, and the text tidying they share.

An extractor turns one file into sections of text in document order; the document pipeline decides
how the sections become memories. Extractors know nothing about spaces, the database or HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# Where the heavy extractors come from; named in every "not installed" answer.
DOCUMENTS_EXTRA = "documents"


@dataclass(frozen=True)
class Limits:
    """How much one file may hold: PDF pages and recording length (``validation`` has the defaults)."""

    max_pages: int
    max_media_seconds: float


@dataclass(frozen=True)
class Section:
    """One part of a document: a page, a group of CSV rows, a stretch of speech."""

    text: str  # extracted text of this part (already whitespace-tidied)
    page: int | None = None  # 1-based page for paged kinds (PDF)
    start_s: float | None = None  # time range for audio/video
    end_s: float | None = None
    # True: this section becomes memory(s) of its own, never merged with neighbours (CSV row
    # groups carry the header).
    separate: bool = False


@dataclass(frozen=True)
class Extracted:
    """What an extractor found; the document's content is the sections' texts joined by a blank line."""

    sections: list[Section]
    title: str | None = None  # first heading when the format has one
    # e.g. {"pages": 3, "durationSeconds": 4.2, "language": "en", "ocrPages": 1}
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def content(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


class UnsupportedType(Exception):
    """The file's type is not one we read, or its extractor is not installed here (answered 415)."""

    def __init__(self, message: str, *, media_type: str | None, extra: str | None = None) -> None:
        super().__init__(message)
        self.media_type = media_type
        self.extra = extra


class ExtractionFailed(Exception):
    """The file could not be read; str() is a reason a person can act on (the document is failed)."""


Progress = Callable[[float], None]  # called with 0..1 as pages / minutes of media go by


def no_progress(_fraction: float) -> None:
    """A progress callback for callers that do not report progress."""


# Characters PostgreSQL cannot store (NUL), UTF-8 cannot encode (lone surrogates) or that are
# invisible controls; form feeds (page breaks in text layers) become line breaks instead.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_BLANK_LINES = re.compile(r"\n{3,}")


def tidy(text: str) -> str:
    """Whitespace-tidied text: one space between words, at most one blank line between paragraphs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    text = _CONTROLS.sub("", text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
