"""What a document becomes before it is written: content, pieces, title, summary and pages.

Pure and blocking (a long document takes a while): the worker runs it in a thread. Embedding is
the caller's part, between :func:`prepare` and writing.
"""

from __future__ import annotations

from .chunking import chunk, pages
from .documents import Contents
from .errors import ValidationError
from .extractors import Extracted, Section
from .secrets import find_secret
from .summary import summarize, title_for


def prepare(extracted: Extracted, *, title: str | None = None, file_name: str | None = None) -> Contents:
    """Chunk an extraction into pieces with offsets, and give it a title, a summary and pages."""
    content, pieces = chunk(extracted.sections)
    if not pieces:
        raise ValidationError("file", "no text was found in it")
    return Contents(
        content=content,
        pieces=pieces,
        vectors=[None] * len(pieces),
        title=title_for(content, given=title, heading=_shown_heading(extracted.title), file_name=file_name),
        summary=summarize(content),
        pages=pages(content, pieces),
        metadata=dict(extracted.metadata),
    )


def _shown_heading(heading: str | None) -> str | None:
    """The file's own title (a PDF's or Word file's metadata, or its first heading), unless it holds
    a credential: then it is dropped, and the document takes its title from elsewhere."""
    return None if heading and find_secret(heading) is not None else heading


def prepare_text(content: str) -> Contents:
    """A long text given as one memory, as a document."""
    return prepare(Extracted(sections=[Section(content)]))
