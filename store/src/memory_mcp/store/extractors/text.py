"""Plain text, Markdown and CSV with the standard library."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from pathlib import Path

from ..validation import MAX_CONTENT
from .base import Extracted, ExtractionFailed, Progress, Section, tidy

# A CSV becomes a summary (columns, their types, the row count) and records: each row as
# "column: value; column: value", so a piece found by search says what its numbers are. A group of
# records is one memory: as many as fit in one memory's length, and at most this many, so that a
# search hit points at a handful of rows rather than a page.
CSV_ROWS_PER_SECTION = 20
# Values of a text column named in the summary (its commonest), when it has few distinct ones.
CSV_SUMMARY_VALUES = 5

_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(---|\.\.\.)[ \t]*(\n|\Z)", re.DOTALL)


def read_text(path: Path) -> str:
    """The file decoded: UTF-8 (with or without a BOM), UTF-16 with a BOM, else Windows-1252."""
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ExtractionFailed("the file is not readable text (broken UTF-16)") from exc
    if b"\x00" in raw:
        raise ExtractionFailed("the file is binary, not text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Text saved by older Windows programs; every byte decodes, so nothing is lost silently
        # beyond what the encoding could not hold anyway.
        return raw.decode("cp1252", errors="replace")


def _non_empty(text: str) -> str:
    if not text:
        raise ExtractionFailed("no text found in the file")
    return text


def extract_text(path: Path, progress: Progress) -> Extracted:
    text = _non_empty(tidy(read_text(path)))
    progress(1.0)
    return Extracted(sections=[Section(text=text)], metadata={"characters": len(text)})


def markdown_title(text: str) -> str | None:
    """The first heading (ATX `# Title` or setext `Title` over `===`), outside code fences."""
    fence: str | None = None
    previous = ""
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            previous = ""
            continue
        if opened:
            fence = opened.group(1)
            previous = ""
            continue
        atx = _ATX_HEADING.match(line)
        if atx:
            return atx.group(1).strip() or None
        if previous.strip() and _SETEXT_UNDERLINE.match(line) and not _ATX_HEADING.match(previous):
            return previous.strip()
        previous = line
    return None


def extract_markdown(path: Path, progress: Progress) -> Extracted:
    raw = read_text(path).replace("\r\n", "\n")
    body = _FRONT_MATTER.sub("", raw, count=1)
    text = _non_empty(tidy(body))
    progress(1.0)
    return Extracted(
        sections=[Section(text=text)], title=markdown_title(text), metadata={"characters": len(text)}
    )


def _dialect(sample: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def _cell(value: str) -> str:
    return tidy(value).replace("\n", " ")


_INTEGER = re.compile(r"[-+]?\d{1,18}")
_NUMBER = re.compile(r"[-+]?(\d+([.,]\d*)?|[.,]\d+)([eE][-+]?\d+)?%?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?.*)?|\d{1,2}[./]\d{1,2}[./]\d{2,4}")
_BOOLEAN = frozenset({"true", "false", "yes", "no"})


def column_type(values: list[str]) -> str:
    """integer, number, date, boolean or text: the narrowest every non-empty value fits (empty
    when there is none)."""
    present = [v for v in values if v]
    if not present:
        return "empty"
    for name, pattern in (("integer", _INTEGER), ("number", _NUMBER), ("date", _DATE)):
        if all(pattern.fullmatch(v) for v in present):
            return name
    if all(v.lower() in _BOOLEAN for v in present):
        return "boolean"
    return "text"


def _describe(name: str, values: list[str]) -> str:
    """A column in the summary: its name and type, with its range or its commonest values."""
    kind = column_type(values)
    present = [v for v in values if v]
    said = f"{name} ({kind}"
    if kind == "integer":
        numbers = [int(v) for v in present]
        said += f", {min(numbers)} to {max(numbers)}"
    elif kind == "date" and all(v[:4].isdigit() for v in present):  # ISO dates sort as text
        said += f", {min(present)} to {max(present)}"
    elif kind in ("text", "boolean"):
        counts = Counter(present)
        if len(counts) <= CSV_SUMMARY_VALUES:
            said += ": " + ", ".join(value for value, _ in counts.most_common())
        else:
            said += f", {len(counts)} distinct values"
    if len(present) < len(values):
        said += f", {len(values) - len(present)} empty"
    return said + ")"


def csv_summary(file_rows: int, header: list[str], rows: list[list[str]]) -> str:
    """What the table holds: row and column counts, each column with its type."""
    columns = [
        _describe(name, [row[i] if i < len(row) else "" for row in rows]) for i, name in enumerate(header)
    ]
    text = f"A table of {file_rows} rows and {len(header)} columns: " + "; ".join(columns) + "."
    return text if len(text) <= MAX_CONTENT else text[: MAX_CONTENT - 1].rsplit(";", 1)[0] + "…"


def _record(header: list[str], row: list[str]) -> str:
    """One row as ``column: value`` pairs (empty cells left out; cells beyond the header named by
    their position)."""
    names = header + [f"column {n + 1}" for n in range(len(header), len(row))]
    return "; ".join(f"{name}: {value}" for name, value in zip(names, row, strict=False) if value)


def extract_csv(path: Path, progress: Progress) -> Extracted:
    """A summary section, then groups of records, each a section of its own."""
    text = read_text(path)
    try:
        rows = [
            [_cell(c) for c in row]
            for row in csv.reader(io.StringIO(text), _dialect(text[:16384]))
            if any(c.strip() for c in row)
        ]
    except csv.Error as exc:
        raise ExtractionFailed(f"the CSV file is malformed ({exc})") from exc
    if not rows:
        raise ExtractionFailed("no rows found in the CSV file")
    header = [name or f"column {n + 1}" for n, name in enumerate(rows[0])]
    body = rows[1:]
    metadata: dict[str, object] = {"rows": len(body), "columns": len(header)}
    sections = [Section(text=csv_summary(len(body), header, body), separate=True)]
    group: list[str] = []
    size = 0
    for index, row in enumerate(body):
        line = _record(header, row)[:MAX_CONTENT]
        if not line:
            continue
        if group and (len(group) >= CSV_ROWS_PER_SECTION or size + 1 + len(line) > MAX_CONTENT):
            sections.append(Section(text="\n".join(group), separate=True))
            group, size = [], 0
        group.append(line)
        size += 1 + len(line)
        if index % 1000 == 999:
            progress(index / len(body))
    if group:
        sections.append(Section(text="\n".join(group), separate=True))
    progress(1.0)
    return Extracted(sections=sections, metadata=metadata)
