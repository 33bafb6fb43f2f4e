"""Roles, grants and the rule that combines them."""

from __future__ import annotations

from enum import StrEnum

from .errors import ValidationError


class Role(StrEnum):
    WRITER = "Writer"
    READER = "Reader"


class Access(StrEnum):
    READ = "Read"
    READ_WRITE = "ReadWrite"


def parse_role(value: str, field: str = "role") -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ValidationError(field, f"must be 'Writer' or 'Reader', got {value!r}") from None


def parse_access(value: str, field: str = "access") -> Access:
    try:
        return Access(value)
    except ValueError:
        raise ValidationError(field, f"must be 'Read' or 'ReadWrite', got {value!r}") from None


def effective_access(role: Role, grant: Access) -> Access:
    """The lower of the role's ceiling and the grant: a Reader is read-only everywhere."""
    if role is Role.READER:
        return Access.READ
    return grant
