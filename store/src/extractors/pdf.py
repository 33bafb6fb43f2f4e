"""PDF: the text layer with pypdf, page by page; pages without one are rendered and read by OCR."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Extracted, ExtractionFailed, Progress, Section, tidy
from .ocr import MAX_OCR_PIXELS, OCR_DPI, read_image

if TYPE_CHECKING:
    from pypdfium2 import PdfDocument

# A page whose text layer has fewer letters and digits than this is read by OCR instead: a scan
# often carries a stray page number or a stamp as text.
MIN_TEXT_LAYER_CHARS = 20
_WORD_CHARS = re.compile(r"\w")
# Metadata titles that are a producer's file name rather than a title ("Microsoft Word - a.docx").
_FILE_NAME_TITLE = re.compile(r"\.(docx?|pdf|tex|odt|rtf|pptx?|xlsx?|txt|indd)$|^untitled$", re.IGNORECASE)


def _open(path: Path) -> Any:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

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
    except (PdfReadError, FileNotDecryptedError) as exc:
        raise ExtractionFailed(f"the PDF is corrupt and cannot be read ({exc})") from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        # pypdf reports some malformed structures as plain Python errors.
        raise ExtractionFailed("the PDF is corrupt and cannot be read") from exc
    if pages == 0:
        raise ExtractionFailed("the PDF has no pages")
    return reader


def _text_layer(page: Any) -> str:
    from pypdf.errors import PdfReadError

    try:
        return tidy(page.extract_text() or "")
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


def _ocr_page(document: PdfDocument, index: int) -> str:
    page = document[index]
    try:
        width, height = page.get_size()
        scale = OCR_DPI / 72
        pixels = width * height * scale * scale
        if pixels > MAX_OCR_PIXELS:
            scale *= (MAX_OCR_PIXELS / pixels) ** 0.5
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            return read_image(bitmap.to_pil())
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


def extract_pdf(path: Path, progress: Progress) -> Extracted:
    """One section a page, in order; progress after every page."""
    import pypdfium2

    reader = _open(path)
    count = len(reader.pages)
    sections: list[Section] = []
    ocr_pages = 0
    document: PdfDocument | None = None
    try:
        for index in range(count):
            text = _text_layer(reader.pages[index])
            if len(_WORD_CHARS.findall(text)) < MIN_TEXT_LAYER_CHARS:
                if document is None:
                    try:
                        document = pypdfium2.PdfDocument(path)
                    except pypdfium2.PdfiumError as exc:
                        raise ExtractionFailed(f"the PDF's scanned pages cannot be rendered ({exc})") from exc
                scanned = _ocr_page(document, index)
                ocr_pages += 1
                if len(scanned) > len(text):
                    text = scanned
            if text:
                sections.append(Section(text=text, page=index + 1))
            progress((index + 1) / count)
    finally:
        if document is not None:
            document.close()
    if not sections:
        raise ExtractionFailed("no text found in the PDF: its pages have no text layer and OCR read nothing")
    return Extracted(
        sections=sections, title=_title(reader), metadata={"pages": count, "ocrPages": ocr_pages}
    )
