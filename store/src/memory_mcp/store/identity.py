"""Authentication and space resolution: who is calling, and which one space a request uses."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from psycopg.rows import namedtuple_row
from sqlalchemy import text

from . import keys, validation
from .access import Access, Role, effective_access
from .apikeys import BOOTSTRAP_KEY, KEY_COLUMNS, GrantSpec, create_key, key_from_row
from .db import Database
from .errors import AuthenticationFailed, Conflict, SpaceNotFound, ValidationError
from .models import Caller, Grant, Space, SpaceContext, SpaceSummary, User
from .spaces import upsert_space
from .users import upsert_user

log = logging.getLogger(__name__)

S = TypeVar("S")

# --- authentication and space resolution --------------------------------------------------------

CALLER_SQL = f"""
    SELECT {KEY_COLUMNS}, k.key_hash, u.name AS u_name, u.email, u.display_name, u.role, u.active,
      COALESCE((
        SELECT json_agg(json_build_array(s.id, s.key, s.display_name, s.description, s.deletion_policy,
                                         g.access, s.write_policy) ORDER BY s.key)
        FROM key_grants g JOIN spaces s ON s.id = g.space_id
        WHERE g.key_id = k.id AND s.detached_at IS NULL), '[]') AS grants
    FROM api_keys k JOIN users u ON u.id = k.user_id
    """
_AUTH_SQL = CALLER_SQL + " WHERE k.prefix = %(prefix)s"
_KEY_ID_SQL = CALLER_SQL + " WHERE k.id = %(id)s"
_DUMMY_HASH = keys.hash_key("mmk_0000000000_not-a-key")


async def authenticate(db: Database, plaintext: str | None) -> Caller:
    """Verify a presented key; every failure raises the same :class:`AuthenticationFailed`.

    Each failure is logged at warning with its reason and the key's lookup prefix, never the key.
    """
    prefix = keys.prefix_of(plaintext or "")
    row: Any = None
    if prefix is not None:
        # Every request of every tool starts here: the driver's own connection, one round trip.
        async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
            await cur.execute(_AUTH_SQL, {"prefix": prefix})
            row = await cur.fetchone()
    # Compare even when nothing was found so unknown prefixes cost the same as wrong secrets.
    ok = keys.matches(plaintext or "", row.key_hash if row else _DUMMY_HASH) and row is not None
    if not ok or row is None:
        if prefix is None:
            raise _failed("malformed_key" if plaintext else "missing_key", None)
        raise _failed("unknown_key" if row is None else "wrong_secret", prefix)
    return caller_from_row(row, prefix)


async def caller_for_key(db: Database, key_id: uuid.UUID) -> Caller:
    """The caller behind a key already verified another way (a one-time upload token bound to it);
    a key revoked, expired or deactivated since fails as it would at authentication."""
    async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
        await cur.execute(_KEY_ID_SQL, {"id": key_id})
        row = await cur.fetchone()
    if row is None:
        raise _failed("unknown_key", None)
    return caller_from_row(row, cast(Any, row).prefix)


_USER_KEYS_SQL = (
    CALLER_SQL
    + """ WHERE k.user_id = (SELECT id FROM users WHERE CASE WHEN %(by_email)s
        THEN lower(email) = lower(%(who)s) ELSE name = %(who)s END)
      AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
    ORDER BY k.updated_at DESC, k.created_at DESC, k.id"""
)
_USER_SQL = (
    "SELECT active FROM users WHERE CASE WHEN %(by_email)s "
    "THEN lower(email) = lower(%(who)s) ELSE name = %(who)s END"
)
_ACCESS_RANK = {a: i for i, a in enumerate(Access)}


async def caller_for_user(db: Database, who: str) -> Caller:
    """The caller behind a user whose identity was verified elsewhere (an external OpenID Connect
    provider's token): ``who`` with an ``@`` names the user's email (any case), otherwise the name.

    Grants belong to keys, not users, so the user's access is the union of the grants of their
    live keys (not revoked, not expired), each at the lower of the key's grant and the user's role;
    where two keys grant one space, the higher access counts. The key of the answer, whose active
    and default space and rate limit apply, is the one changed most recently (``selectSpace``
    changes it), else the newest. An unknown or inactive user, or one without a live key, fails as
    an unknown key does. Read afresh on every request: revoking a key or deactivating the user
    applies to the next one.
    """
    params = {"who": who, "by_email": "@" in who}
    async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
        await cur.execute(_USER_KEYS_SQL, params)
        rows = await cur.fetchall()
        if not rows:
            await cur.execute(_USER_SQL, params)
            user: Any = await cur.fetchone()
    if not rows:
        reason = "unknown_user" if user is None else "inactive_user" if not user.active else "no_live_key"
        raise _failed(reason, None)
    callers = [caller_from_row(row, None) for row in rows]
    best: dict[uuid.UUID, Grant] = {}
    for caller in callers:
        for grant in caller.grants:
            held = best.get(grant.space.id)
            if held is None or (_ACCESS_RANK[grant.effective], _ACCESS_RANK[grant.access]) > (
                _ACCESS_RANK[held.effective],
                _ACCESS_RANK[held.access],
            ):
                best[grant.space.id] = grant
    grants = tuple(sorted(best.values(), key=lambda g: g.space.key))
    return Caller(user=callers[0].user, key=callers[0].key, grants=grants)


def caller_from_row(row: Any, prefix: str | None) -> Caller:
    now = datetime.now(UTC)
    if row.revoked_at is not None:
        raise _failed("revoked", prefix)
    if row.expires_at is not None and row.expires_at <= now:
        raise _failed("expired", prefix)
    if not row.active:
        raise _failed("inactive_user", prefix)
    user = User(row.user_id, row.u_name, row.email, row.display_name, Role(row.role), row.active)
    grants = tuple(
        Grant(
            Space(uuid.UUID(g[0]), g[1], g[2], g[3], g[4], write_policy=g[6]),
            Access(g[5]),
            effective_access(user.role, Access(g[5])),
        )
        for g in row.grants  # the driver decodes json
    )
    return Caller(user=user, key=key_from_row(row), grants=grants)


class LogBudget:
    """At most ``lines`` log lines per ``window_s`` seconds for each key; the lines held back are
    counted, and the next line that goes out says how many there were."""

    def __init__(self, lines: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lines = lines
        self.window_s = window_s
        self.clock = clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # key -> (start, lines, held back)

    def spend(self, key: str) -> int | None:
        """None: hold this line back; otherwise log it, with the number held back before it."""
        now = self.clock()
        start, lines, held = self._windows.get(key, (now, 0, 0))
        if now - start >= self.window_s:
            start, lines = now, 0
        if lines >= self.lines:
            self._windows[key] = (start, lines, held + 1)
            return None
        self._windows[key] = (start, lines + 1, 0)
        return held


# A client hammering with bad keys wrote a warning line per attempt, throttled or not: now at most
# this many lines a minute per reason, the rest counted (memory_mcp_auth_failures_total counts all).
FAILURE_LOG_LINES = 10
FAILURE_LOG_WINDOW_S = 60.0
_failure_log = LogBudget(FAILURE_LOG_LINES, FAILURE_LOG_WINDOW_S)


def _failed(reason: str, prefix: str | None) -> AuthenticationFailed:
    held = _failure_log.spend(reason)
    if held is not None:
        more = f" ({held} more since the last line, not logged)" if held else ""
        log.warning(
            "authentication failed: %s%s",
            reason,
            more,
            extra={"fields": {"reason": reason, "key_prefix": prefix, "not_logged": held}},
        )
    return AuthenticationFailed(reason, prefix)


def failure(reason: str) -> AuthenticationFailed:
    """The one refusal of a credential checked outside the store (an external provider's token),
    logged under the same budget as a key's."""
    return _failed(reason, None)


def default_space(declared: S | None, granted: Sequence[S]) -> S | None:
    """The space a key falls back to when a request names none and no space is active: its declared
    default space while it is granted, else its only grant; with several grants and no default, none.
    """
    if declared is not None and declared in granted:
        return declared
    return granted[0] if len(granted) == 1 else None


def current_grant(caller: Caller) -> Grant | None:
    """The grant of the key's active space, else of its default space (``default_space``)."""
    active = caller.grant_for(caller.key.active_space_id) if caller.key.active_space_id else None
    if active is not None:
        return active
    fallback = default_space(caller.key.default_space_id, [g.space.id for g in caller.grants])
    return caller.grant_for(fallback) if fallback is not None else None


def resolve_space(caller: Caller, container_tag: str | None, field: str = "containerTag") -> SpaceContext:
    """``containerTag`` for this request, else the key's active space, else its default space.

    A space without a grant raises exactly what a missing space raises. Text that cannot be a space
    key is refused as such, without repeating it.
    """
    if container_tag:
        validation.space_key(container_tag, field)
        grant = next((g for g in caller.grants if g.space.key == container_tag), None)
        if grant is None:
            raise SpaceNotFound(container_tag)
    else:
        grant = current_grant(caller)
        if grant is None:
            raise ValidationError(
                "containerTag",
                "this key has no active or default space: pass containerTag or select a space "
                "(listSpaces shows them)",
            )
    return SpaceContext(caller, grant.space, grant.effective)


async def set_active_space(db: Database, caller: Caller, space_key: str) -> SpaceContext:
    """Make ``space_key`` the key's active space for future requests (stored in the database)."""
    ctx = resolve_space(caller, space_key, "space")
    async with db.transaction() as conn:
        await conn.execute(
            text("UPDATE api_keys SET active_space_id = :s, updated_at = now() WHERE id = :k"),
            {"s": ctx.space.id, "k": caller.key.id},
        )
    return ctx


async def list_spaces(db: Database, caller: Caller) -> list[SpaceSummary]:
    """Every space the key can read, with effective access, counts and last activity."""
    if not caller.grants:
        return []
    current = current_grant(caller)
    active = current.space.id if current else None
    ids = list(caller.readable_space_ids)
    async with db.transaction(ids) as conn:
        rows = {
            r.id: r
            for r in await conn.execute(
                text(
                    """
                    SELECT s.id,
                      (SELECT count(*) FROM documents d WHERE d.space_id = s.id AND d.source <> 'memory')
                        AS documents,
                      (SELECT count(*) FROM memories m
                        WHERE m.space_id = s.id AND m.is_latest AND m.forgotten_at IS NULL
                          AND (m.expires_at IS NULL OR m.expires_at > now())) AS memories,
                      GREATEST((SELECT max(updated_at) FROM documents d WHERE d.space_id = s.id),
                               (SELECT max(updated_at) FROM memories m WHERE m.space_id = s.id)) AS last_activity
                    FROM unnest(CAST(:ids AS uuid[])) AS s(id)
                    """
                ),
                {"ids": ids},
            )
        }
    return [
        SpaceSummary(
            space=g.space,
            access=g.effective,
            document_count=rows[g.space.id].documents,
            memory_count=rows[g.space.id].memories,
            last_activity=rows[g.space.id].last_activity,
            active=g.space.id == active,
        )
        for g in caller.grants
    ]


# --- first start --------------------------------------------------------------------------------


async def bootstrap(db: Database) -> str | None:
    """On an empty database: an admin Writer, a ``default`` space and a key; returns the key once.

    No manifest declares them, so the command line manages them (``memory-mcp key revoke`` etc.).
    """
    async with db.transaction() as conn:
        if (await conn.execute(text("SELECT 1 FROM users LIMIT 1"))).first() is not None:
            return None
    await upsert_user(
        db,
        "admin",
        "admin@localhost.localdomain",
        "Administrator",
        Role.WRITER,
        actor="bootstrap",
        managed_by="cli",
    )
    await upsert_space(
        db, "default", "Default", "Created on first start", actor="bootstrap", managed_by="cli"
    )
    try:
        _, plaintext = await create_key(
            db,
            BOOTSTRAP_KEY,
            "admin",
            [GrantSpec("default", Access.READ_WRITE)],
            "default",
            actor="bootstrap",
            managed_by="cli",
        )
    except Conflict:  # another process bootstrapped the same database a moment ago
        return None
    return plaintext
