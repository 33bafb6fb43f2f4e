"""Who manages each space, user and API key: a manifest (apply or the operator) or the command line.

Each tool changes only the rows it made: the command line refuses to edit what a manifest
declares, and the reconcilers leave command-line rows alone, so neither undoes the other.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import text

from .db import Database
from .errors import Conflict


class Owner(StrEnum):
    MANIFEST = "manifest"
    CLI = "cli"


# The object kinds, their table and the column that names them.
_TABLES = {"space": ("spaces", "key"), "user": ("users", "name"), "api key": ("api_keys", "name")}
_COMMANDS = {"space": "space", "user": "user", "api key": "key"}
_MANIFEST_KINDS = {"space": "Space", "user": "User", "api key": "ApiKey"}


class ManagedElsewhere(Conflict):
    """The object belongs to another tool; the message names it and where to make the change
    (``field``: the manifest field to change, when the change is to one field)."""

    def __init__(self, kind: str, name: str, owner: Owner, field: str | None = None) -> None:
        if owner is Owner.MANIFEST and field is not None:
            message = (
                f"{kind} '{name}' is managed by apply/the operator; change {field} in its manifest "
                f"(the {_MANIFEST_KINDS[kind]} named '{name}') and apply it"
            )
        elif owner is Owner.MANIFEST:
            message = f"{kind} '{name}' is managed by apply/the operator; change it in its manifest"
        else:
            message = (
                f"{kind} '{name}' is managed by the memory-mcp command line; change it there "
                f"(memory-mcp {_COMMANDS[kind]} ...) or declare another name"
            )
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.owner = owner


async def owner_of(db: Database, kind: str, name: str) -> Owner | None:
    """Who manages the ``kind`` ('space', 'user' or 'api key') named ``name``; None if it is absent.

    A detached (retained) space still has its owner: declaring or creating it again restores it.
    """
    table, column = _TABLES[kind]
    async with db.transaction() as conn:
        value = (
            await conn.execute(text(f"SELECT managed_by FROM {table} WHERE {column} = :n"), {"n": name})
        ).scalar()
    return Owner(value) if value is not None else None


async def require_owner(db: Database, kind: str, name: str, owner: Owner) -> None:
    """Raise :class:`ManagedElsewhere` when the object exists and another tool manages it."""
    current = await owner_of(db, kind, name)
    if current is not None and current is not owner:
        raise ManagedElsewhere(kind, name, current)
