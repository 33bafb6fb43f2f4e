"""Roles, grants and the rule that combines them."""

from __future__ import annotations

from enum import StrEnum

from . import validation
from .errors import ValidationError


class Role(StrEnum):
    WRITER = "Writer"
    READER = "Reader"


class Access(StrEnum):
    """Grant levels, each including the one before: read, write, and accept or reject proposals."""

    READ = "Read"
    READ_WRITE = "ReadWrite"
    CURATE = "Curate"

    @property
    def can_write(self) -> bool:
        return self is not Access.READ

    @property
    def can_curate(self) -> bool:
        return self is Access.CURATE


ACCESS_LEVELS = tuple(a.value for a in Access)


def parse_role(value: str, field: str = "role") -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ValidationError(field, f"must be 'Writer' or 'Reader', got {value!r}") from None


def parse_access(value: str, field: str = "access") -> Access:
    try:
        return Access(value)
    except ValueError:
        raise ValidationError(field, f"must be 'Read', 'ReadWrite' or 'Curate', got {value!r}") from None


def parse_grant(value: str, field: str = "grant") -> tuple[str, Access]:
    """``SPACE=LEVEL`` (as the command line takes it) as a space key and an access level."""
    space, sep, level = value.partition("=")
    if not sep:
        raise ValidationError(field, "must be SPACE=Read, SPACE=ReadWrite or SPACE=Curate")
    return validation.space_key(space.strip(), field), parse_access(level.strip(), field)


def effective_access(role: Role, grant: Access) -> Access:
    """The lower of the role's ceiling and the grant: a Reader is read-only everywhere, whatever
    the grant (a Curate grant included); a Writer gets what the grant says."""
    if role is Role.READER:
        return Access.READ
    return grant
