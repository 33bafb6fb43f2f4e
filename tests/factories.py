"""Factories for users, spaces and keys, shared by every test module."""

from __future__ import annotations

import itertools
from datetime import datetime

from memory_mcp.store import apikeys, identity, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database
from memory_mcp.store.models import Caller

_n = itertools.count()


async def make_space(db: Database, key: str | None = None, **kwargs: object) -> str:
    key = key or f"space-{next(_n)}"
    await spaces.upsert_space(db, key, kwargs.pop("display_name", key.title()), **kwargs)  # type: ignore[arg-type]
    return key


async def make_user(
    db: Database, name: str | None = None, role: Role = Role.WRITER, active: bool = True
) -> str:
    name = name or f"user-{next(_n)}"
    await users.upsert_user(db, name, f"{name}@example.com", name.replace("-", " ").title(), role, active)
    return name


async def make_key(
    db: Database,
    user: str,
    grants: dict[str, Access | str],
    default: str | None = None,
    expires_at: datetime | None = None,
    name: str | None = None,
) -> str:
    """Create a key and return its plaintext."""
    specs = [GrantSpec(space, Access(access)) for space, access in grants.items()]
    _, plaintext = await apikeys.create_key(
        db, name or f"key-{next(_n)}", user, specs, default_space=default, expires_at=expires_at
    )
    return plaintext


async def caller_for(
    db: Database,
    role: Role = Role.WRITER,
    grants: dict[str, Access | str] | None = None,
    default: str | None = None,
) -> Caller:
    """A user with one key holding ``grants``, authenticated."""
    user = await make_user(db, role=role)
    plaintext = await make_key(db, user, grants or {}, default)
    return await identity.authenticate(db, plaintext)
