"""Input checks and limits shared by every edge and store function; each failure names the field.

The limits are the one source: the MCP tool annotations, the REST models and the store import them,
so a value refused at the edge is refused for the same reason everywhere. Messages never repeat the
input back: it may be a secret or someone's memory text.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from datetime import UTC, date, datetime
from typing import Literal, get_args

from .errors import ValidationError

SPACE_KEY_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NAME_RE = SPACE_KEY_RE  # users and keys are named like Kubernetes objects
EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
CATEGORY_RE = re.compile(r"[\w][\w .:/-]*")

MAX_CONTENT = 2000  # one memory (the text of add_memory and of a forget request)
# A forget by text shorter than this acts only on an exact text or an id: a word or two names a
# topic, not one memory (a forget of "deploys" forgot a memory that mentioned deploys).
MIN_FORGET_WORDS = 3
# The id forms add_memory's memoryId takes: a UUID, or a short id the tools print (4 to 8 characters).
MAX_MEMORY_ID = 36
# add_memory's idempotencyKey: a repeat by the same key-holder within the window returns the first
# save's result (a retry after a timeout stores nothing twice).
MAX_IDEMPOTENCY_KEY = 255
IDEMPOTENCY_WINDOW_S = 24 * 3600
# An expired memory leaves search, listings and counts at once; this long after it expired the purge
# job retires it (as forgotten: history kept, a memory.expired audit event); until then listMemories
# with status=all shows it as expired.
EXPIRED_GRACE_S = 7 * 24 * 3600
# add_memory content beyond MAX_CONTENT becomes one document of several memories, up to this.
MAX_DOCUMENT_TEXT = 100_000
# The text extracted from one uploaded file: about 2,500 pages, 2,500-5,000 memories (minutes of
# embedding on two cores). A file with more is refused with a reason rather than hold a worker for
# hours; a 50 MB text file or a Word file that unpacks to gigabytes would.
MAX_EXTRACTED_TEXT = 5_000_000
# What one uploaded file may hold, checked before the long part of its extraction: pages of a PDF
# (a scanned page costs about 2 s of OCR on two cores) and the length of a recording (speech runs at
# about half its real time). Settings `max_pdf_pages` and `max_media_seconds` default to these.
MAX_PDF_PAGES = 2_000
MAX_MEDIA_SECONDS = 4 * 3600.0
# A Space may set its own values of those two (spec.quotas.maxPdfPages and maxMediaSeconds, in whole
# seconds), above or below the settings, up to what their integer columns hold.
MAX_INTEGER_COLUMN = 2**31 - 1  # PostgreSQL `integer`: maxMemories, maxDocuments and these two
MAX_BIGINT_COLUMN = 2**63 - 1  # PostgreSQL `bigint`: maxBytes
MAX_SPACE_FILE_LIMIT = MAX_INTEGER_COLUMN
MAX_QUERY = 2000  # a semantic search question
MAX_KEYWORD = 200  # a literal keyword
MAX_CATEGORY = 64
MAX_SPACE_KEY = 63  # a Kubernetes object name
MAX_NAME = 200  # display names
MAX_LIMIT = 50  # results per page or per search
# Tokens (cl100k, estimated) one search answer may spend: results over it are counted, not shown.
# 1,500 holds ten LoCoMo turns with the profile (about 840 tokens) and three whole 2,000-character
# memories; a long document piece is shown by its matching passage (lean.PASSAGE_CHARS).
DEFAULT_ANSWER_TOKENS = 1500
MIN_ANSWER_TOKENS = 200
MAX_ANSWER_TOKENS = 20_000
# Pages beyond this are refused rather than passed on as an OFFSET: at the smallest page size it
# still reaches the millionth memory (the largest space measured), and the offset stays far inside
# PostgreSQL's bigint, which a page of 2**62 overflowed.
MAX_PAGE = 1_000_000
# Memories per page of the memory-graph widget: the drawing stays readable, and a page stays cheap
# (bench/graph.py, two busy cores: 77 ms for 100 memories, 152 ms for 200).
MAX_GRAPH_LIMIT = 200
DEFAULT_GRAPH_LIMIT = 100

# NUL and the other C0/C1 control characters except tab, line feed and carriage return, and lone
# surrogates (a JSON escape like \ud800 or CESU-8 bytes decode to one): PostgreSQL cannot store NUL,
# UTF-8 cannot encode a surrogate, and the others are invisible terminal controls.
_UNFIT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# Letters that render as nothing: text made only of them, spaces and format characters says nothing.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Cn: unassigned code points and noncharacters (U+0378, U+FFFE): they render as nothing or a box,
# so text made only of them says nothing (and would still be embedded and supersede a real memory).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp", "Cn"})


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored or sent on as text (NUL, a control character, a lone surrogate)."""
    found = _UNFIT.search(value)
    if found is None:
        return None
    char = found.group()
    where = f"(U+{ord(char):04X} at character {found.start() + 1})"
    if char == "\x00":
        return f"must not contain NUL characters {where}"
    if "\ud800" <= char <= "\udfff":
        return f"must be valid Unicode text: it holds a lone surrogate {where}"
    return f"must not contain control characters other than tab and line breaks {where}"


def is_visible(value: str) -> bool:
    """Whether ``value`` holds at least one character that shows (not only spaces or format marks)."""
    return any(
        not ch.isspace()
        and ch not in _BLANK_LETTERS
        and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        for ch in value
    )


def text_field(value: object, field: str, max_len: int) -> str:
    """``value`` stripped, refused unless it is text of at most ``max_len`` characters that can be stored.

    Blank text passes (as ``""``); callers that need something say so.
    """
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    value = value.strip()
    if len(value) > max_len:
        raise ValidationError(field, f"must be at most {max_len} characters, got {len(value)}")
    problem = text_problem(value)
    if problem is not None:
        raise ValidationError(field, problem)
    return value


def optional_text(value: object, field: str, max_len: int) -> str | None:
    """Like :func:`text_field`, but ``None`` and blank text are ``None``."""
    if value is None:
        return None
    return text_field(value, field, max_len) or None


def parse_uuid(value: object, field: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        raise ValidationError(field, "must be a UUID") from None


def space_key(value: str, field: str = "key") -> str:
    if not isinstance(value, str) or len(value) > MAX_SPACE_KEY or not SPACE_KEY_RE.fullmatch(value):
        raise ValidationError(
            field, "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
        )
    return value


def object_name(value: str, field: str = "name") -> str:
    return space_key(value, field)


def email(value: str, field: str = "email") -> str:
    if not isinstance(value, str) or len(value) > 254 or not EMAIL_RE.fullmatch(value):
        raise ValidationError(field, f"must be an email address, got {str(value)[:80]!r}")
    return value


def non_empty(value: str, field: str, max_len: int = MAX_NAME) -> str:
    value = text_field(value, field, max_len)
    if not value:
        raise ValidationError(field, "must not be empty")
    return value


def content(value: str, field: str = "content") -> str:
    """The text of one memory: stripped, at most :data:`MAX_CONTENT` characters, something visible."""
    value = non_empty(value, field, MAX_CONTENT)
    if not is_visible(value):
        raise ValidationError(field, "must contain visible text, not only spaces or invisible characters")
    return value


def document_text(value: str, field: str = "content") -> str:
    """Text to save: one memory's worth, or up to :data:`MAX_DOCUMENT_TEXT` to become a document."""
    value = non_empty(value, field, MAX_DOCUMENT_TEXT)
    if not is_visible(value):
        raise ValidationError(field, "must contain visible text, not only spaces or invisible characters")
    return value


def category(value: str | None, field: str = "category") -> str | None:
    value = optional_text(value, field, MAX_CATEGORY)
    if value is None:
        return None
    if not CATEGORY_RE.fullmatch(value):
        raise ValidationError(field, f"must be 1-{MAX_CATEGORY} letters, digits, spaces or . : / - _")
    return value.lower()


def result_limit(value: int, field: str = "limit") -> int:
    """A page size or search result count: an integer from 1 to :data:`MAX_LIMIT`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_LIMIT}")
    return value


def answer_tokens(value: int, field: str = "maxTokens") -> int:
    """A search answer's token budget: an integer from :data:`MIN_ANSWER_TOKENS` to
    :data:`MAX_ANSWER_TOKENS`."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not MIN_ANSWER_TOKENS <= value <= MAX_ANSWER_TOKENS
    ):
        raise ValidationError(field, f"must be an integer from {MIN_ANSWER_TOKENS} to {MAX_ANSWER_TOKENS}")
    return value


def page_number(value: int, field: str = "page") -> int:
    """A page number: an integer from 1 to :data:`MAX_PAGE`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PAGE:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_PAGE}")
    return value


def graph_limit(value: int, field: str = "limit") -> int:
    """Memories per graph page: an integer from 1 to :data:`MAX_GRAPH_LIMIT`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_GRAPH_LIMIT:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_GRAPH_LIMIT}")
    return value


def file_limit(value: object, field: str) -> int | None:
    """A Space's own page or recording-length limit: None (the server's setting applies) or an
    integer from 1 to :data:`MAX_SPACE_FILE_LIMIT`."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SPACE_FILE_LIMIT:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_SPACE_FILE_LIMIT}, got {value!r}")
    return value


def paging(page: int, limit: int) -> tuple[int, int]:
    return page_number(page), result_limit(limit)


# What ``listMemories`` lists, by the state of a memory (``memories.MEMORY_STATUSES`` has the SQL).
MemoryStatus = Literal["live", "proposed", "forgotten", "superseded", "rejected", "all"]
MEMORY_STATUS_VALUES: tuple[str, ...] = get_args(MemoryStatus)

# Imports from other tools (store/importers): one file, or everything read out of one archive, is at
# most this many bytes. A heavy ChatGPT user's conversations.json is a few hundred MB.
MAX_IMPORT_BYTES = 1024 * 1024 * 1024
# An archive member may unpack to at most this many times its compressed size (members over 1 MiB;
# JSON and Markdown compress 5-20 times, a zip bomb thousands of times), and an archive may list
# at most this many members.
MAX_ARCHIVE_RATIO = 200
MAX_ARCHIVE_MEMBERS = 100_000
# What reading one import may cost (defaults of the settings max_import_cpu_seconds and
# max_import_memory_bytes; store/importers/budget.py). The export is read a conversation (a memory,
# a note) at a time, so what it holds is its records and one item: a generated 50 MB ChatGPT export
# held 90 MiB at most and took 22 s of CPU on a busy machine (bench/upload_bombs.py), so these let
# an export of MAX_IMPORT_BYTES through.
MAX_IMPORT_CPU_SECONDS = 1200.0
MAX_IMPORT_MEMORY_BYTES = 2 * 1024 * 1024 * 1024


def idempotency_key(value: str | None, field: str = "idempotencyKey") -> str | None:
    """A client's idempotency key: 1-:data:`MAX_IDEMPOTENCY_KEY` visible characters, kept as given."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_IDEMPOTENCY_KEY:
        raise ValidationError(field, f"must be 1-{MAX_IDEMPOTENCY_KEY} characters")
    if _UNFIT.search(value):
        raise ValidationError(field, "must not contain control characters")
    return value


def expires_at(value: datetime | None, field: str = "expiresAt") -> datetime | None:
    """When a memory stops being live: a moment in the future, with a time zone (UTC if none)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be a date and time (ISO 8601)")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if value <= datetime.now(UTC):
        raise ValidationError(field, "must be in the future")
    return value


def _day(value: object, field: str) -> date | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip()).date()
        except ValueError:
            pass
    raise ValidationError(field, "must be a date (YYYY-MM-DD) or a date and time (ISO 8601)")


def time_range(since: object, until: object) -> tuple[date | None, date | None]:
    """A search's time range: days (a date and time counts by its day), both included, either open."""
    first, last = _day(since, "since"), _day(until, "until")
    if first is not None and last is not None and last < first:
        raise ValidationError("until", "must not be before since")
    return first, last
