"""Word (.docx) with python-docx: paragraphs and tables in document order, headings start sections."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from .base import Extracted, ExtractionFailed, Progress, Section, tidy

_HEADING_STYLES = ("Title", "Heading")
# What a .docx may unpack to, every member counted: python-docx reads every part of the package
# into memory whatever its name (a 1 MB file whose ``word/document.dat`` inflated to 1 GiB took 2 GB
# when only ``.xml`` and ``.rels`` members were counted), and its XML is parsed whole at several
# times its size. A Word file of 2,500 pages holds tens of megabytes of XML; pictures are already
# compressed and unpack to about their size, which the upload limit bounds.
MAX_UNPACKED = 200 * 1024 * 1024


def _check_unpacked(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            # The sizes the archive declares bound what reading a member gives (zipfile stops there).
            unpacked = sum(i.file_size for i in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ExtractionFailed("the Word file is corrupt or not a .docx document") from exc
    if unpacked > MAX_UNPACKED:
        raise ExtractionFailed(
            f"the Word file unpacks to {unpacked / 2**20:,.0f} MB, over the limit of "
            f"{MAX_UNPACKED / 2**20:.0f} MB; split it into smaller files"
        )


def _is_heading(paragraph: Any) -> bool:
    try:
        name = paragraph.style.name if paragraph.style is not None else ""
    except (KeyError, ValueError, AttributeError):
        return False
    return bool(name) and str(name).startswith(_HEADING_STYLES)


def _table_text(table: Any) -> str:
    """One line a row, cells joined by ' | '; a merged cell counts once."""
    lines = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(tidy(cell.text).replace("\n", " "))
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def extract_docx(path: Path, progress: Progress) -> Extracted:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    _check_unpacked(path)
    try:
        document = docx.Document(str(path))
        blocks = list(document.iter_inner_content())
    except (
        PackageNotFoundError,
        zipfile.BadZipFile,
        KeyError,
        ValueError,
        OSError,
        AttributeError,
        TypeError,
        IndexError,
    ) as exc:
        # python-docx reports a missing or malformed part as any of these.
        raise ExtractionFailed("the Word file is corrupt or not a .docx document") from exc
    except Exception as exc:
        # lxml's XMLSyntaxError for a damaged part; lxml is python-docx's to import, not ours.
        if type(exc).__name__ != "XMLSyntaxError":
            raise
        raise ExtractionFailed("the Word file is corrupt (a damaged XML part)") from exc
    sections: list[Section] = []
    current: list[str] = []
    title: str | None = None
    tables = 0
    paragraphs = 0

    def close() -> None:
        if current:
            sections.append(Section(text="\n\n".join(current)))
            current.clear()

    for index, block in enumerate(blocks):
        if isinstance(block, Table):
            text = _table_text(block)
            if text:
                tables += 1
                close()
                sections.append(Section(text=text))
        else:
            text = tidy(block.text)
            if not text:
                continue
            paragraphs += 1
            if _is_heading(block):
                close()
                if title is None:
                    title = text.replace("\n", " ")
            current.append(text)
        if index % 50 == 49:
            progress(index / len(blocks))
    close()
    progress(1.0)
    if not sections:
        raise ExtractionFailed("no text found in the Word document")
    if title is None:
        core_title = tidy(document.core_properties.title or "")
        title = core_title or None
    return Extracted(sections=sections, title=title, metadata={"paragraphs": paragraphs, "tables": tables})
