"""PDF: the text layer with pypdf, page by page; pages without one are rendered and read by OCR."""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Extracted, ExtractionFailed, Progress, Section, tidy
from .ocr import MAX_OCR_PIXELS, OCR_DPI, read_image

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage
    from pypdfium2 import PdfDocument

# Scanned pages read at once, each by a Tesseract of one thread (ocr.py): one a core, as Tesseract
# is CPU-bound; a few at most, so a scanned book does not hold a server's every core.
OCR_WORKERS = max(1, min(4, os.cpu_count() or 1))

# A page whose text layer has fewer letters and digits than this is read by OCR instead: a scan
# often carries a stray page number or a stamp as text.
MIN_TEXT_LAYER_CHARS = 20
_WORD_CHARS = re.compile(r"\w")
# A line among the first or last EDGE_LINES of a page that recurs, its numbers aside, on at least
# RUNNING_SHARE of the pages (and MIN_RUNNING_PAGES) is a running header or footer ("Shared
# MIME-info Database", "Page 3 of 17", a bare page number): it says nothing about its page and
# would be repeated in every memory, so it is left out. So is one that runs through a part of the
# document only, on RUNNING_SHARE of the pages from its first to its last (a chapter's header:
# "Chapter 4: Function reference 12" began 15 of the 66 pieces of the libtasn1 manual), and, on
# two pages already, one whose number differs on every page it is on (a short chapter's header
# with its page number; a table's heading row repeated on the next page has no such number).
EDGE_LINES = 2
RUNNING_SHARE = 0.5
MIN_RUNNING_PAGES = 3
_NUMBERS = re.compile(r"\d+")
# pypdf stops inflating a stream at 75 MB (a "zip bomb" page); such a file is not read at all, as
# rendering the page for OCR would inflate the same stream without a limit.
_TOO_BIG_STREAM = (
    "a part of the PDF unpacks to more than 75 MB, far beyond any page of a document; it is not read"
)
# Metadata titles that are a producer's file name rather than a title ("Microsoft Word - a.docx").
_FILE_NAME_TITLE = re.compile(r"\.(docx?|pdf|tex|odt|rtf|pptx?|xlsx?|txt|indd)$|^untitled$", re.IGNORECASE)


def _open(path: Path) -> Any:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, LimitReachedError, PdfReadError

    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted:
            # Many PDFs are "encrypted" with an empty password only to set permissions.
            try:
                opened = reader.decrypt("")
            except (FileNotDecryptedError, NotImplementedError) as exc:
                raise ExtractionFailed("the PDF is encrypted; upload a copy without a password") from exc
            if not opened:
                raise ExtractionFailed("the PDF is encrypted; upload a copy without a password")
        pages = len(reader.pages)
    except ExtractionFailed:
        raise
    except LimitReachedError as exc:
        raise ExtractionFailed(_TOO_BIG_STREAM) from exc
    except (PdfReadError, FileNotDecryptedError) as exc:
        raise ExtractionFailed(f"the PDF is corrupt and cannot be read ({exc})") from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        # pypdf reports some malformed structures as plain Python errors.
        raise ExtractionFailed("the PDF is corrupt and cannot be read") from exc
    if pages == 0:
        raise ExtractionFailed("the PDF has no pages")
    return reader


def _text_layer(page: Any) -> str:
    from pypdf.errors import LimitReachedError, PdfReadError

    try:
        return tidy(page.extract_text() or "")
    except LimitReachedError as exc:
        raise ExtractionFailed(_TOO_BIG_STREAM) from exc
    except (
        PdfReadError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        RecursionError,
    ):
        # A broken content stream on one page: OCR may still read the page as rendered.
        return ""


def _render(document: PdfDocument, index: int) -> PILImage:
    """One page as a greyscale picture at OCR_DPI (less for a huge page)."""
    page = document[index]
    try:
        width, height = page.get_size()
        scale = OCR_DPI / 72
        pixels = width * height * scale * scale
        if pixels > MAX_OCR_PIXELS:
            scale *= (MAX_OCR_PIXELS / pixels) ** 0.5
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            image: PILImage = bitmap.to_pil().copy()  # its own pixels: the bitmap is freed below
            return image
        finally:
            bitmap.close()
    finally:
        page.close()


def _title(reader: Any) -> str | None:
    try:
        title = reader.metadata.title if reader.metadata else None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    title = tidy(str(title)).replace("\n", " ") if title else ""
    return title if title and not _FILE_NAME_TITLE.search(title) else None


def _running_key(line: str) -> str:
    return _NUMBERS.sub("#", " ".join(line.split()).lower())


def without_running_lines(sections: list[Section]) -> list[Section]:
    """The pages without their running headers and footers (a page that is nothing else stays)."""
    if len(sections) < MIN_RUNNING_PAGES:
        return sections
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    numbers: dict[str, set[str]] = {}
    for index, section in enumerate(sections):
        lines = section.text.split("\n")
        edges = {
            _running_key(line): line for line in lines[:EDGE_LINES] + lines[-EDGE_LINES:] if line.strip()
        }
        seen.update(edges.keys())
        for key, line in edges.items():
            first.setdefault(key, index)
            last[key] = index
            numbers.setdefault(key, set()).add(" ".join(_NUMBERS.findall(line)))
    needed = max(MIN_RUNNING_PAGES, RUNNING_SHARE * len(sections))

    def runs(key: str, pages: int) -> bool:
        if pages >= needed:
            return True
        if pages < RUNNING_SHARE * (last[key] - first[key] + 1):
            return False
        numbered = "#" in key and len(numbers[key]) == pages
        return pages >= MIN_RUNNING_PAGES or (pages >= 2 and numbered)

    running = {key for key, pages in seen.items() if runs(key, pages)}
    if not running:
        return sections
    kept = []
    for section in sections:
        lines = section.text.split("\n")
        top, bottom = 0, len(lines)
        while top < min(EDGE_LINES, bottom) and _running_key(lines[top]) in running:
            top += 1
        while (
            bottom > top and len(lines) - bottom < EDGE_LINES and _running_key(lines[bottom - 1]) in running
        ):
            bottom -= 1
        text = tidy("\n".join(lines[top:bottom]))
        kept.append(replace(section, text=text) if text else section)
    return kept


class _Pages:
    """Pages in order; scanned ones are read by OCR in a pool while later pages are rendered."""

    def __init__(self, count: int, progress: Progress) -> None:
        self.count = count
        self.progress = progress
        self.pool = ThreadPoolExecutor(OCR_WORKERS, thread_name_prefix="ocr")
        self.pending: deque[tuple[int, str, Future[str] | None]] = deque()
        self.sections: list[Section] = []

    def add(self, index: int, text: str, scanned: Future[str] | None) -> None:
        self.pending.append((index, text, scanned))
        # Settle what is ready, and wait for the oldest page while the pool is full: at most
        # OCR_WORKERS rendered pictures are held at a time.
        while self.pending:
            waiting = sum(1 for _, _, f in self.pending if f is not None and not f.done())
            first = self.pending[0][2]
            if first is not None and not first.done() and waiting < OCR_WORKERS:
                break
            self._settle()

    def _settle(self) -> None:
        index, text, scanned = self.pending.popleft()
        if scanned is not None:
            read = scanned.result()
            if len(read) > len(text):
                text = read
        if text:
            self.sections.append(Section(text=text, page=index + 1))
        self.progress((index + 1) / self.count)

    def finish(self) -> list[Section]:
        while self.pending:
            self._settle()
        return self.sections

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def extract_pdf(path: Path, progress: Progress, *, max_pages: int) -> Extracted:
    """One section a page, in order; progress as pages are done. More than `max_pages` pages: refused
    before any is read."""
    import pypdfium2

    reader = _open(path)
    count = len(reader.pages)
    if count > max_pages:
        raise ExtractionFailed(
            f"the PDF has {count:,} pages, over the limit of {max_pages:,}; split it into smaller files"
        )
    pages = _Pages(count, progress)
    ocr_pages = 0
    document: PdfDocument | None = None
    try:
        for index in range(count):
            text = _text_layer(reader.pages[index])
            scanned: Future[str] | None = None
            if len(_WORD_CHARS.findall(text)) < MIN_TEXT_LAYER_CHARS:
                if document is None:
                    try:
                        document = pypdfium2.PdfDocument(path)
                    except pypdfium2.PdfiumError as exc:
                        raise ExtractionFailed(f"the PDF's scanned pages cannot be rendered ({exc})") from exc
                # Rendered here, one page at a time: PDFium is not safe to call from two threads.
                scanned = pages.pool.submit(read_image, _render(document, index))
                ocr_pages += 1
            pages.add(index, text, scanned)
        sections = without_running_lines(pages.finish())
    finally:
        pages.close()
        if document is not None:
            document.close()
    if not sections:
        raise ExtractionFailed("no text found in the PDF: its pages have no text layer and OCR read nothing")
    return Extracted(
        sections=sections, title=_title(reader), metadata={"pages": count, "ocrPages": ocr_pages}
    )
