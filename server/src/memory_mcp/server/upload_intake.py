"""Read a multipart upload as it arrives: the file to a temporary file, checked while it streams.

The file's type is decided from its first bytes (415 before the rest is read) and its size is
counted as it goes (413 at the first byte over the limit), so a refused upload costs at most the
limit in disk and nothing in memory. Form fields are small and kept in memory.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from python_multipart.multipart import MultipartParser, parse_options_header

from memory_mcp.store import extractors

MAX_FIELD_BYTES = 4096  # containerTag, title, category, uploadToken
MAX_FIELDS = 16
FILE_FIELD = "file"


class UploadRefused(Exception):
    """The upload cannot be taken: ``status`` (400, 413, 415) and a sentence a person can act on."""

    def __init__(self, status: int, message: str, field: str | None = FILE_FIELD) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


def _unsupported_message() -> str:
    return (
        "unsupported file type: upload text, Markdown, CSV, PDF, Word (.docx), an image (PNG, JPEG, "
        "WebP, GIF), audio (MP3, WAV, M4A) or video (MP4, WebM)"
    )


# A file's media type from its name and first bytes.
Detect = Callable[[str | None, bytes], str]


@dataclass
class Upload:
    """A received file on disk, with what was learnt while it streamed."""

    path: Path
    file_name: str | None = None
    media_type: str | None = None
    size: int = 0
    digest: str = ""
    fields: dict[str, str] = field(default_factory=dict)


class _Receiver:
    """Callbacks of the multipart parser: one part at a time, the file part streamed to disk."""

    def __init__(self, folder: Path, max_bytes: int, detect: Detect | None = None) -> None:
        self.upload = Upload(path=folder / "file")
        self.max_bytes = max_bytes
        self.detect = detect
        self._header_name = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._name: str | None = None
        self._is_file = False
        self._value = bytearray()
        self._out: IO[bytes] | None = None
        self._hash = hashlib.sha256()
        self._head = bytearray()
        self._checked = False
        self._files = 0
        self.ended = False  # the closing boundary was read
        self.file_started = False  # the headers of the file part were read
        self.fields_before_file: dict[str, str] = {}  # the form fields that came before the file

    # --- parser callbacks ---
    def on_part_begin(self) -> None:
        self._headers, self._name, self._is_file = {}, None, False
        self._value = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._header_name.lower()] = self._header_value
        self._header_name, self._header_value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        self._is_file = self._name == FILE_FIELD
        if self._is_file:
            self._files += 1
            if self._files > 1:
                raise UploadRefused(400, "send one file per upload")
            self.upload.file_name = filename.decode("utf-8", "replace") if filename is not None else None
            self.file_started = True
            self.fields_before_file = dict(self.upload.fields)
            self._out = self.upload.path.open("wb")
        elif len(self.upload.fields) >= MAX_FIELDS:
            raise UploadRefused(400, "too many form fields", field=None)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if not self._is_file:
            self._value += chunk
            if len(self._value) > MAX_FIELD_BYTES:
                raise UploadRefused(400, f"{self._name}: must be at most {MAX_FIELD_BYTES} bytes", self._name)
            return
        self.upload.size += len(chunk)
        if self.upload.size > self.max_bytes:
            raise UploadRefused(413, f"the file must be at most {self.max_bytes} bytes")
        if not self._checked:
            self._head += chunk[: extractors.HEAD_BYTES - len(self._head)]
            if len(self._head) >= extractors.HEAD_BYTES:
                self._check_type()
        self._hash.update(chunk)
        assert self._out is not None
        self._out.write(chunk)

    def on_end(self) -> None:
        self.ended = True

    def on_part_end(self) -> None:
        if self._is_file:
            if not self._checked:
                self._check_type()
            self.close()
        elif self._name:
            try:
                self.upload.fields[self._name] = self._value.decode("utf-8")
            except UnicodeDecodeError:
                raise UploadRefused(400, f"{self._name}: must be UTF-8 text", self._name) from None

    # --- helpers ---
    def _check_type(self) -> None:
        self._checked = True
        if self.detect is not None:
            self.upload.media_type = self.detect(self.upload.file_name, bytes(self._head))
            return
        media_type = extractors.detect_type(self.upload.file_name, bytes(self._head))
        if media_type is None:
            raise UploadRefused(415, _unsupported_message())
        try:
            extractors.check_available(media_type)
        except extractors.UnsupportedType as exc:
            raise UploadRefused(415, str(exc)) from None
        self.upload.media_type = media_type

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        self.upload.digest = self._hash.hexdigest()


Authorise = Callable[[dict[str, str]], Awaitable[None]]


async def receive(
    content_type: str,
    body: AsyncIterator[bytes],
    folder: Path,
    max_bytes: int,
    detect: Detect | None = None,
    authorise: Authorise | None = None,
) -> Upload:
    """Parse a ``multipart/form-data`` body into ``folder``; raises :class:`UploadRefused`.

    ``detect`` names the file's type from its name and first bytes (or raises UploadRefused), for
    routes that take other files than documents; by default the extractors decide (415 if none can).
    ``authorise`` is awaited with the form fields read so far as soon as the file part begins, and
    before any more of the body is read: a credential sent as a form field (an upload token) is
    checked before the file, so a bogus one costs one network chunk, not the whole upload.
    """
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise UploadRefused(415, "send the file as multipart/form-data with a 'file' field", field=None)
    receiver = _Receiver(folder, max_bytes, detect)
    callbacks = {
        name: getattr(receiver, name)
        for name in (
            "on_part_begin",
            "on_part_data",
            "on_part_end",
            "on_header_field",
            "on_header_value",
            "on_header_end",
            "on_headers_finished",
            "on_end",
        )
    }
    parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
    try:
        async for chunk in body:
            _parse(parser.write, chunk)
            if authorise is not None and receiver.file_started:
                await authorise(receiver.fields_before_file)
                authorise = None
        _parse(lambda _: parser.finalize(), b"")
        if authorise is not None:  # no file part at all: the credential is still checked first
            await authorise(receiver.upload.fields)
    finally:
        receiver.close()
    if not receiver.ended:
        # A body cut short (a dropped connection, a client that stops sending) is not a file.
        raise UploadRefused(400, "the multipart body ended before its closing boundary; nothing was stored")
    if receiver.upload.media_type is None:
        raise UploadRefused(422, "file: is required (a multipart field named 'file')")
    return receiver.upload


def _parse(write: Callable[[bytes], object], chunk: bytes) -> None:
    try:
        write(chunk)
    except UploadRefused:
        raise
    except Exception as exc:  # the parser's own errors: a malformed body
        raise UploadRefused(400, "the multipart body could not be parsed", field=None) from exc


def work_folder(data_dir: Path) -> Path:
    """A fresh folder for one upload under the data dir (removed by the caller when done)."""
    root = data_dir / "uploads"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="upload-", dir=root))
