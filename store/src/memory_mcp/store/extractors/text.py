"""Plain text, Markdown and CSV with the standard library."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from ..validation import MAX_CONTENT
from .base import Extracted, ExtractionFailed, Progress, Section, tidy

# A CSV row group is one memory: the header plus as many rows as fit in one memory's length, and
# at most this many rows, so that a search hit points at a handful of rows rather than a page.
CSV_ROWS_PER_SECTION = 20

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


def _line(row: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([tidy(cell).replace("\n", " ") for cell in row])
    return out.getvalue()


def extract_csv(path: Path, progress: Progress) -> Extracted:
    """Row groups, each a section of its own that starts with the header row."""
    text = read_text(path)
    try:
        rows = [
            row
            for row in csv.reader(io.StringIO(text), _dialect(text[:16384]))
            if any(c.strip() for c in row)
        ]
    except csv.Error as exc:
        raise ExtractionFailed(f"the CSV file is malformed ({exc})") from exc
    if not rows:
        raise ExtractionFailed("no rows found in the CSV file")
    header = _line(rows[0])
    body = [_line(row) for row in rows[1:]]
    if not body:
        return Extracted(
            sections=[Section(text=header, separate=True)], metadata={"rows": 0, "columns": len(rows[0])}
        )
    sections: list[Section] = []
    group: list[str] = []
    size = len(header)
    for index, line in enumerate(body):
        if group and (len(group) >= CSV_ROWS_PER_SECTION or size + 1 + len(line) > MAX_CONTENT):
            sections.append(Section(text="\n".join([header, *group]), separate=True))
            group, size = [], len(header)
        group.append(line)
        size += 1 + len(line)
        if index % 1000 == 999:
            progress(index / len(body))
    sections.append(Section(text="\n".join([header, *group]), separate=True))
    progress(1.0)
    return Extracted(sections=sections, metadata={"rows": len(body), "columns": len(rows[0])})
