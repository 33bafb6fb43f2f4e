"""Users: people with a role; deactivating one stops all of their keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from . import validation
from .access import Role, parse_role
from .audit import record
from .db import Database
from .errors import Conflict
from .models import User

_USER_COLS = "u.id, u.name, u.email, u.display_name, u.role, u.active"


def _user(row: Any) -> User:
    return User(row.id, row.name, row.email, row.display_name, Role(row.role), row.active)


@dataclass(frozen=True)
class UserUpsert:
    """What :func:`upsert_user` left, and the user as it found them under the row's lock (None:
    created), so a report names what this write changed even after an edit by hand."""

    user: User
    before: User | None

    @property
    def changed(self) -> bool:
        return self.before != self.user


async def upsert_user(
    db: Database,
    name: str,
    email: str,
    display_name: str,
    role: str | Role,
    active: bool = True,
    actor: str = "system",
    managed_by: str = "manifest",
) -> UserUpsert:
    """Create or update a user. Deactivation stops all their keys.

    ``managed_by`` is recorded when the user is created (see :mod:`.ownership`)."""
    values = {
        "name": validation.object_name(name),
        "email": validation.email(email),
        "display_name": validation.non_empty(display_name, "displayName"),
        "role": parse_role(role.value if isinstance(role, Role) else role).value,
        "active": bool(active),
    }
    async with db.transaction() as conn:
        before = (
            await conn.execute(text("SELECT * FROM users WHERE name = :name FOR UPDATE"), values)
        ).first()
        clash = (
            await conn.execute(text("SELECT name FROM users WHERE email = :email AND name <> :name"), values)
        ).first()
        if clash is not None:
            raise Conflict(f"email '{email}' already belongs to user '{clash.name}'")
        if before is None:
            row = (
                await conn.execute(
                    text(
                        "INSERT INTO users (name, email, display_name, role, active, managed_by) "
                        "VALUES (:name, :email, :display_name, :role, :active, :managed_by) RETURNING *"
                    ),
                    {**values, "managed_by": managed_by},
                )
            ).one()
            await record(conn, actor, "user.created", "user", name, details={"role": row.role})
            return UserUpsert(_user(row), None)
        if all(getattr(before, k) == v for k, v in values.items()):
            return UserUpsert(_user(before), _user(before))
        row = (
            await conn.execute(
                text(
                    "UPDATE users SET email = :email, display_name = :display_name, role = :role, "
                    "active = :active, updated_at = now() WHERE name = :name RETURNING *"
                ),
                values,
            )
        ).one()
        if before.active != row.active:
            await record(conn, actor, "user.activated" if row.active else "user.deactivated", "user", name)
        if before.role != row.role:
            await record(
                conn, actor, "user.role_changed", "user", name, details={"from": before.role, "to": row.role}
            )
        return UserUpsert(_user(row), _user(before))


async def get_user(db: Database, name: str) -> User | None:
    async with db.transaction() as conn:
        row = (
            await conn.execute(text(f"SELECT {_USER_COLS} FROM users u WHERE name = :n"), {"n": name})
        ).first()
    return _user(row) if row else None


async def delete_user(db: Database, name: str, actor: str = "system") -> bool:
    """Remove a user and their keys; what they wrote stays, attributed by id."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(text("DELETE FROM users WHERE name = :n RETURNING id"), {"n": name})
        ).first()
        if row is not None:
            await record(conn, actor, "user.deleted", "user", name)
    return row is not None
