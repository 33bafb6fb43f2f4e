"""What an import reads: one file, a folder, or a zip archive, seen alike as named files.

An archive is read in memory, never unpacked to disk, so a member's name can do no harm by
itself; names that try a path trick (absolute, ``..``, a drive letter) are still left out and
reported, since no export tool writes them. Sizes are checked before a byte is inflated: the
declared size of everything read stays under :data:`~..validation.MAX_IMPORT_BYTES`, a large
member may not claim more than :data:`~..validation.MAX_ARCHIVE_RATIO` times its compressed size
(zip bombs), and reading stops at the declared size whatever the stream says. JSON is read a
value at a time (:mod:`.json_stream`), and what the reading costs is counted against the import's
budget (:mod:`.budget`) as it goes.
"""

from __future__ import annotations

import codecs
import json
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from .. import validation
from ..errors import ValidationError
from .budget import Meter
from .json_stream import JsonReader

RATIO_FLOOR = 1024 * 1024  # members smaller than this are not held to the ratio
CHUNK = 1024 * 1024  # bytes read (or inflated) at a time
# No document holds more than MAX_EXTRACTED_TEXT characters, so a JSON string longer than this many
# bytes (six per character at most, as \uXXXX escapes) can never be imported: a file holding one is
# refused when the reading passes it, before the rest is inflated, decoded or parsed.
MAX_JSON_STRING_BYTES = 6 * validation.MAX_EXTRACTED_TEXT


@dataclass(frozen=True)
class File:
    name: str  # relative, with '/' separators
    modified: datetime | None


@dataclass
class Bundle:
    """The files of one import source, and the members that were left out and why."""

    path: Path
    archive: zipfile.ZipFile | None = None
    meter: Meter = field(default_factory=Meter)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    _read: int = 0

    def files(self, suffixes: tuple[str, ...] = ()) -> list[File]:
        """The files (their names ending in one of ``suffixes``, any when empty), sorted by name;
        hidden files and folders (``.obsidian``, ``.git``) are not listed."""
        found = sorted(self._all(), key=lambda f: f.name)
        return [
            f
            for f in found
            if (not suffixes or f.name.lower().endswith(suffixes))
            and not any(part.startswith(".") for part in PurePosixPath(f.name).parts)
        ]

    def find(self, base_name: str) -> str | None:
        """The shallowest file called ``base_name`` (an export zip may wrap everything in a folder)."""
        named = [f.name for f in self.files() if PurePosixPath(f.name).name == base_name]
        return min(named, key=lambda n: (n.count("/"), n)) if named else None

    def pick(self, base_name: str) -> str | None:
        """The one file given, whatever its name; else the file called ``base_name`` in the folder
        or archive."""
        if self.archive is None and not self.path.is_dir():
            return self.path.name
        return self.find(base_name)

    def json(self, name: str) -> JsonReader:
        """A JSON file, to read a value at a time; refused (ValidationError) where it is not JSON,
        and as soon as the reading passes a string that no document could hold
        (:data:`MAX_JSON_STRING_BYTES`)."""
        return JsonReader(name, self._texts(name, _LongStrings(name)), self.meter)

    def json_list(self, name: str, refusal: str) -> Iterator[Any]:
        """The items of the list a JSON file holds, one at a time; ``refusal`` when it holds
        something else (once that is read whole: bad JSON is refused as such)."""
        reader = self.json(name)
        if reader.peek() != "[":
            reader.value()
            reader.end()
            raise ValidationError("file", f"{name} {refusal}")
        yield from reader.items()
        reader.end()

    def json_lines(self, name: str) -> bool:
        """Whether a file is JSON lines (a value a line) rather than one JSON value: it has two
        lines that are not blank, and one of them is a value by itself (a line of a value written
        over several lines, ``[`` or ``"results": [``, is not)."""
        lines = [line for line in self.head(name).lstrip("\ufeff").split("\n", 16) if line.strip()]
        return len(lines) >= 2 and any(_is_json(line) for line in lines[:2])

    def lines(self, name: str) -> Iterator[tuple[int, str]]:
        """A text file's lines with their numbers, read a megabyte at a time: what is held is the
        line being read (counted against the import's budget), not the file."""
        pending: list[str] = []  # the start of a line that goes on in the next chunk
        waiting = 0
        number = 0
        for text in self._texts(name):
            self.meter.buffer = waiting + len(text)
            if "\n" not in text:
                pending.append(text)
                waiting += len(text)
                continue
            first, *middle, last = text.split("\n")
            for line in ["".join([*pending, first]), *middle]:
                number += 1
                yield number, line.removeprefix("\ufeff") if number == 1 else line
            pending, waiting = [last], len(last)
        if waiting:
            yield number + 1, "".join(pending).removeprefix("\ufeff")
        self.meter.buffer = 0

    def _all(self) -> Iterator[File]:
        if self.archive is not None:
            yield from self._members()
        elif self.path.is_dir():
            for p in self.path.rglob("*"):
                # Links are not followed: a link in a vault could point anywhere on the machine.
                if p.is_symlink() or not p.is_file():
                    continue
                yield File(p.relative_to(self.path).as_posix(), _mtime(p))
        else:
            yield File(self.path.name, _mtime(self.path))

    def _members(self) -> Iterator[File]:
        assert self.archive is not None
        for info in self.archive.infolist():
            if info.is_dir():
                continue
            problem = _member_problem(info)
            if problem is not None:
                self.left_out.append((info.filename, problem))
                continue
            yield File(info.filename, datetime(*info.date_time, tzinfo=UTC))

    def _chunks(self, name: str, watch: Callable[[bytes], None] = lambda _: None) -> Iterator[bytes]:
        """A file's bytes a chunk at a time, each shown to ``watch`` (which may refuse the file)
        and counted against the import's budget before the next is read or inflated; refused past
        the size limits."""
        self.meter.where = name
        for chunk in self._raw_chunks(name):
            self.meter.read += len(chunk)
            self.meter.check()
            watch(chunk)
            yield chunk

    def _raw_chunks(self, name: str) -> Iterator[bytes]:
        if self.archive is None:
            target = self.path if not self.path.is_dir() else self.path / name
            try:
                self._count(target.stat().st_size, name)
                with target.open("rb") as handle:
                    while chunk := handle.read(CHUNK):
                        yield chunk
            except OSError as exc:
                raise ValidationError("file", f"{name} cannot be read ({exc.strerror or exc})") from None
            return
        info = self.archive.getinfo(name)
        self._count(info.file_size, name)
        if info.file_size > RATIO_FLOOR and info.file_size > validation.MAX_ARCHIVE_RATIO * max(
            info.compress_size, 1
        ):
            raise ValidationError(
                "file",
                f"{name} would unpack to {info.file_size} bytes from {info.compress_size}: "
                "refused as a likely zip bomb",
            )
        read = 0
        try:
            with self.archive.open(info) as member:
                while chunk := member.read(CHUNK):
                    read += len(chunk)
                    if read > info.file_size:
                        raise ValidationError("file", f"{name} holds more than its archive entry declares")
                    yield chunk
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
            raise ValidationError("file", f"{name} cannot be read from the archive ({exc})") from None

    def head(self, name: str) -> str:
        """The first chunk of a file as text (undecodable bytes replaced): enough to tell its kind."""
        try:
            if self.archive is None:
                target = self.path if not self.path.is_dir() else self.path / name
                with target.open("rb") as handle:
                    data = handle.read(CHUNK)
            else:
                with self.archive.open(name) as member:
                    data = member.read(CHUNK)
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
            raise ValidationError("file", f"{name} cannot be read ({exc})") from None
        return data.decode("utf-8", "replace")

    def text(self, name: str, max_chars: int | None = None) -> str:
        """A file's UTF-8 text; with ``max_chars``, refused as soon as the reading passes that many
        characters (the rest is never read or inflated)."""
        parts: list[str] = []
        length = 0
        for text in self._texts(name):
            parts.append(text)
            length += len(text)
            self.meter.buffer = length
            if max_chars is not None and length > max_chars:
                raise ValidationError("file", f"{name} is over {max_chars:,} characters; not read further")
        self.meter.buffer = 0
        return "".join(parts).removeprefix("\ufeff")

    def _texts(self, name: str, watch: Callable[[bytes], None] = lambda _: None) -> Iterator[str]:
        """A file's UTF-8 text a chunk at a time, as it is (a byte order mark too: offsets stay
        the file's); the bytes are shown to ``watch`` as :meth:`_chunks` does."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            for chunk in self._chunks(name, watch):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ValidationError("file", f"{name} is not UTF-8 text") from None

    def _count(self, size: int, name: str) -> None:
        self._read += size
        if self._read > validation.MAX_IMPORT_BYTES:
            raise ValidationError(
                "file", f"{name}: an import reads at most {validation.MAX_IMPORT_BYTES} bytes in all"
            )

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts or "\x00" in name:
        return "its path leaves the archive (absolute, a drive or '..'); not read"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link; not followed"
    if info.flag_bits & 0x1:
        return "encrypted; not read"
    return None


def open_bundle(path: Path, meter: Meter) -> Bundle:
    """The files at ``path``: a folder, a zip archive (by its content, not its name) or one file."""
    if not path.exists():
        raise ValidationError("file", f"{path} does not exist")
    if path.is_dir():
        return Bundle(path, meter=meter)
    if not path.is_file():
        raise ValidationError("file", f"{path} is not a file or a folder")
    if zipfile.is_zipfile(path):
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ValidationError("file", f"{path.name} is not a readable zip archive ({exc})") from None
        if len(archive.infolist()) > validation.MAX_ARCHIVE_MEMBERS:
            archive.close()
            raise ValidationError(
                "file", f"{path.name} lists more than {validation.MAX_ARCHIVE_MEMBERS} members; not read"
            )
        return Bundle(path, archive, meter)
    return Bundle(path, meter=meter)


class _LongStrings:
    """Watches a JSON file's bytes for a run without a quote longer than any string a document can
    hold (a quote inside a string is escaped, so a string is at most one such run)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.run = 0  # bytes since the last quote
        self.seen = 0

    def __call__(self, chunk: bytes) -> None:
        pieces = chunk.split(b'"')
        longest = self.run + len(pieces[0])
        if len(pieces) > 1:
            longest = max(longest, *map(len, pieces[1:-1]), 0)
            self.run = len(pieces[-1])
        else:
            self.run = longest
        self.seen += len(chunk)
        if max(longest, self.run) > MAX_JSON_STRING_BYTES:
            raise ValidationError(
                "file",
                f"{self.name} holds a text of over {MAX_JSON_STRING_BYTES:,} bytes (by byte {self.seen:,}), "
                f"more than a document can hold ({validation.MAX_EXTRACTED_TEXT:,} characters); not read further",
            )
