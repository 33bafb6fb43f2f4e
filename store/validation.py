"""Input checks shared by every store function; each failure names the field."""

from __future__ import annotations

import re
import uuid

from .errors import ValidationError

SPACE_KEY_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_RE = SPACE_KEY_RE  # users and keys are named like Kubernetes objects
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
CATEGORY_RE = re.compile(r"^[\w][\w .:/-]*$")
MAX_CONTENT = 2000
MAX_LIMIT = 50


def parse_uuid(value: object, field: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        raise ValidationError(field, f"must be a UUID, got {str(value)[:80]!r}") from None


def space_key(value: str, field: str = "key") -> str:
    if not isinstance(value, str) or len(value) > 63 or not SPACE_KEY_RE.match(value):
        raise ValidationError(
            field, "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
        )
    return value


def object_name(value: str, field: str = "name") -> str:
    return space_key(value, field)


def email(value: str, field: str = "email") -> str:
    if not isinstance(value, str) or len(value) > 254 or not EMAIL_RE.match(value):
        raise ValidationError(field, f"must be an email address, got {str(value)[:80]!r}")
    return value


def non_empty(value: str, field: str, max_len: int = 200) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must not be empty")
    if len(value) > max_len:
        raise ValidationError(field, f"must be at most {max_len} characters")
    return value.strip()


def content(value: str, field: str = "content") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must not be empty")
    value = value.strip()
    if len(value) > MAX_CONTENT:
        raise ValidationError(field, f"must be at most {MAX_CONTENT} characters, got {len(value)}")
    return value


def category(value: str | None, field: str = "category") -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > 64 or not CATEGORY_RE.match(value):
        raise ValidationError(field, "must be 1-64 letters, digits, spaces or . : / - _")
    return value.lower()


def paging(page: int, limit: int) -> tuple[int, int]:
    if not isinstance(page, int) or page < 1:
        raise ValidationError("page", "must be an integer >= 1")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return page, limit
