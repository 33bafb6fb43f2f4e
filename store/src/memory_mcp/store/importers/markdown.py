"""Markdown: a folder of notes (Obsidian, basic-memory, any), one note, a zip of a vault, or the
file ``export --format markdown`` wrote.

A note is a document: titled by its front matter's ``title``, else its first ``# heading``, else
its file name; its ``tags`` (a list, or words separated by commas or spaces; ``#`` dropped) give
the category, the first tag that can be one (a memory has one category); its front matter's
``created`` (or ``date``) and ``updated`` (or ``modified``) date it, else the file's modification
time. The body (without the front matter) is cut into memories as an uploaded file is. Hidden files
and folders (``.obsidian``, ``.trash``) are not read; links are not followed.

A file written by ``export --format markdown`` is recognised by the comment after each memory and
read back memory by memory, with the category, version and times the comment holds. That export
shows history (``--history``) for people; only live memories are imported from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

import yaml

from ..errors import ValidationError
from ..transfer import MARKDOWN_NOTE
from ..validation import CATEGORY_RE, MAX_CATEGORY, MAX_EXTRACTED_TEXT
from .base import Builder, Part, from_iso, short
from .bundle import Bundle, File

SUFFIXES = (".md", ".markdown")
MAX_FRONT_MATTER = 64 * 1024
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$\n?", re.DOTALL | re.MULTILINE)
_HEADING = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def parse(bundle: Bundle, builder: Builder) -> None:
    single = bundle.archive is None and not bundle.path.is_dir()
    files = bundle.files() if single else bundle.files(SUFFIXES)
    if not files:
        raise ValidationError("file", "no Markdown files (.md, .markdown) in it")
    for file in files:
        try:
            # A note becomes one document: past what one holds, it is refused before the rest of
            # it is read or inflated. A file of ``export --format markdown`` is read memory by memory.
            export = f"\n  {MARKDOWN_NOTE}" in bundle.head(file.name)
            text = bundle.text(file.name, None if export else MAX_EXTRACTED_TEXT + MAX_FRONT_MATTER)
        except ValidationError as exc:
            builder.skip(f"file {file.name}", f"not imported: {exc.message}")
            continue
        if f"\n  {MARKDOWN_NOTE}" in text:
            _export(text, file, builder)
        else:
            _note(text, file, builder)


def _export(text: str, file: File, builder: Builder) -> None:
    """A file of ``export --format markdown``: each ``- memory`` item up to its comment."""
    item: list[str] | None = None
    history = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if item is None:
            if line.startswith("- "):
                item = [line[2:]]
            continue
        if not line.startswith(f"  {MARKDOWN_NOTE}"):
            item.append(line[2:] if line.startswith("  ") else line)
            continue
        lines, item = item[:-1], None  # the last line is the note for people
        where = f"file {file.name}, memory ending on line {number}"
        try:
            exact = json.loads(line.strip()[len(MARKDOWN_NOTE) : -len("-->")])
        except (json.JSONDecodeError, RecursionError):
            builder.skip(where, "its comment is not the export's; not imported")
            continue
        if not isinstance(exact, Mapping) or not lines:
            builder.skip(where, "its comment is not the export's; not imported")
            continue
        if exact.get("status", "live") != "live":
            history += 1
            continue
        lines[-1] = lines[-1].removesuffix("  ")
        version = exact.get("version")
        builder.memory(
            [file.name, str(number)],
            "\n".join(lines),
            where,
            category=builder.category(exact.get("category"), where),
            created_at=from_iso(exact.get("createdAt")),
            updated_at=from_iso(exact.get("updatedAt")),
            version=version
            if isinstance(version, int) and not isinstance(version, bool) and version > 0
            else 1,
        )
    if history:
        builder.skip(
            f"file {file.name}",
            f"{history} superseded, forgotten or proposed memories: history is imported from JSONL only",
        )


def _front_matter(text: str, where: str, builder: Builder) -> tuple[Mapping[str, Any], str]:
    found = _FRONT_MATTER.match(text)
    if found is None:
        return {}, text
    body = text[found.end() :]
    if len(found.group(1)) > MAX_FRONT_MATTER:
        builder.skip(where, f"front matter over {MAX_FRONT_MATTER} bytes ignored")
        return {}, body
    try:
        meta = yaml.safe_load(found.group(1))
    except yaml.YAMLError:
        builder.skip(where, "front matter is not valid YAML; ignored")
        return {}, body
    except RecursionError:  # PyYAML composes nodes recursively
        builder.skip(where, "front matter is nested too deeply to read; ignored")
        return {}, body
    return (meta if isinstance(meta, Mapping) else {}), body


def _tags(value: object) -> list[str]:
    if isinstance(value, str):
        value = re.split(r"[,\s]+", value)
    if not isinstance(value, list):
        return []
    return [
        str(t).strip().lstrip("#") for t in value if isinstance(t, str | int) and str(t).strip().lstrip("#")
    ]


def _first(meta: Mapping[str, Any], *names: str) -> datetime | None:
    return next((d for d in (from_iso(meta.get(n)) for n in names) if d is not None), None)


def _note(text: str, file: File, builder: Builder) -> None:
    where = f"file {file.name}"
    meta, body = _front_matter(text, where, builder)
    title = meta.get("title")
    if not isinstance(title, str) or not title.strip():
        heading = _HEADING.search(body)
        title = heading.group(1) if heading else PurePosixPath(file.name).stem
    usable = [t for t in _tags(meta.get("tags")) if CATEGORY_RE.fullmatch(t) and len(t) <= MAX_CATEGORY]
    category = builder.category(usable[0], where) if usable else None
    created = _first(meta, "created", "date", "created_at") or file.modified
    updated = _first(meta, "updated", "modified", "updated_at") or file.modified
    builder.document(
        [file.name],
        short(title, 200),
        [Part(text=body, where=where, created_at=created, updated_at=updated)],
        where,
        created_at=created,
        updated_at=updated,
        category=category,
        file_name=file.name,
    )
