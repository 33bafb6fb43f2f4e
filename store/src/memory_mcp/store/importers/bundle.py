"""What an import reads: one file, a folder, or a zip archive, seen alike as named files.

An archive is read in memory, never unpacked to disk, so a member's name can do no harm by
itself; names that try a path trick (absolute, ``..``, a drive letter) are still left out and
reported, since no export tool writes them. Sizes are checked before a byte is inflated: the
declared size of everything read stays under :data:`~..validation.MAX_IMPORT_BYTES`, a large
member may not claim more than :data:`~..validation.MAX_ARCHIVE_RATIO` times its compressed size
(zip bombs), and reading stops at the declared size whatever the stream says.
"""

from __future__ import annotations

import json
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from .. import validation
from ..errors import ValidationError

RATIO_FLOOR = 1024 * 1024  # members smaller than this are not held to the ratio


@dataclass(frozen=True)
class File:
    name: str  # relative, with '/' separators
    modified: datetime | None


@dataclass
class Bundle:
    """The files of one import source, and the members that were left out and why."""

    path: Path
    archive: zipfile.ZipFile | None = None
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

    def json(self, name: str) -> Any:
        """A file's JSON value; refused (ValidationError) when it is not JSON."""
        try:
            return json.loads(self.text(name))
        except json.JSONDecodeError as exc:
            raise ValidationError(
                "file", f"{name} is not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        except RecursionError:
            raise ValidationError("file", f"{name} is nested too deeply to read") from None

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

    def read(self, name: str) -> bytes:
        """A file's bytes; refused (ValidationError) past the size limits."""
        if self.archive is None:
            target = self.path if not self.path.is_dir() else self.path / name
            try:
                self._count(target.stat().st_size, name)
                return target.read_bytes()
            except OSError as exc:
                raise ValidationError("file", f"{name} cannot be read ({exc.strerror or exc})") from None
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
        try:
            with self.archive.open(info) as member:
                data = member.read(info.file_size + 1)
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
            raise ValidationError("file", f"{name} cannot be read from the archive ({exc})") from None
        if len(data) > info.file_size:
            raise ValidationError("file", f"{name} holds more than its archive entry declares")
        return data

    def text(self, name: str) -> str:
        data = self.read(name)
        try:
            return data.decode("utf-8-sig")
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


def open_bundle(path: Path) -> Bundle:
    """The files at ``path``: a folder, a zip archive (by its content, not its name) or one file."""
    if not path.exists():
        raise ValidationError("file", f"{path} does not exist")
    if path.is_dir():
        return Bundle(path)
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
        return Bundle(path, archive)
    return Bundle(path)
