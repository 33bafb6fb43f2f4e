"""One-time upload tokens: a widget that cannot send a file through a tool call uploads with one.

A token is bound to the key that asked for it and to one space, works once, and expires within
:data:`MAX_TOKEN_TTL_S`. Only its hash is stored. Every failure (unknown, used, expired, another
key) reads the same, like a bad API key.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime

from sqlalchemy import text

from . import identity
from .db import Database
from .errors import UploadTokenRefused
from .memories import require_write
from .models import Caller, SpaceContext

MAX_TOKEN_TTL_S = 300  # the contract: a token is good for at most 5 minutes
TOKEN_PREFIX = "mmu_"


def _hash(token: str) -> str:
    # 256 random bits need no slow hash: nobody can guess their way through a fast one either.
    return hashlib.sha256(token.encode()).hexdigest()


def _refused() -> UploadTokenRefused:
    return UploadTokenRefused()


async def create_upload_token(
    db: Database, ctx: SpaceContext, ttl_s: int = MAX_TOKEN_TTL_S
) -> tuple[str, datetime]:
    """A fresh token for one upload into ``ctx``'s space by ``ctx``'s key, and when it expires."""
    require_write(ctx)
    ttl_s = max(1, min(int(ttl_s), MAX_TOKEN_TTL_S))
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    async with db.transaction() as conn:
        # Spent and expired tokens of this key go as new ones come: the table stays small.
        await conn.execute(
            text(
                "DELETE FROM upload_tokens WHERE key_id = :k AND (used_at IS NOT NULL OR expires_at < now())"
            ),
            {"k": ctx.caller.key.id},
        )
        expires_at = (
            await conn.execute(
                text(
                    "INSERT INTO upload_tokens (token_hash, key_id, space_id, expires_at) "
                    "VALUES (:h, :k, :s, now() + make_interval(secs => :ttl)) RETURNING expires_at"
                ),
                {"h": _hash(token), "k": ctx.caller.key.id, "s": ctx.space.id, "ttl": ttl_s},
            )
        ).scalar_one()
    return token, expires_at


async def check_upload_token(db: Database, token: str, presenter: Caller | None = None) -> Caller:
    """Refuse a token that could not be consumed now, without consuming it (read before an upload);
    the caller behind the key it is bound to otherwise."""
    if not token.startswith(TOKEN_PREFIX):
        raise _refused()
    async with db.transaction() as conn:
        found = (
            await conn.execute(
                text(
                    "SELECT key_id FROM upload_tokens WHERE token_hash = :h AND used_at IS NULL "
                    "AND expires_at > now() AND (CAST(:k AS uuid) IS NULL OR key_id = :k)"
                ),
                {"h": _hash(token), "k": presenter.key.id if presenter else None},
            )
        ).first()
    if found is None:
        raise _refused()
    return await identity.caller_for_key(db, found.key_id)


async def consume_upload_token(db: Database, token: str, presenter: Caller | None = None) -> SpaceContext:
    """Spend ``token`` and return the upload's space with the access of the key it is bound to.

    ``presenter``, when the request also carries an API key, must be that same key. Of concurrent
    uses of one token exactly one succeeds (the row is updated once).
    """
    if not token.startswith(TOKEN_PREFIX):
        raise _refused()
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE upload_tokens SET used_at = now() WHERE token_hash = :h AND used_at IS NULL "
                    "AND expires_at > now() AND (CAST(:k AS uuid) IS NULL OR key_id = :k) "
                    "RETURNING key_id, space_id"
                ),
                {"h": _hash(token), "k": presenter.key.id if presenter else None},
            )
        ).first()
    if row is None:
        raise _refused()
    caller = await identity.caller_for_key(db, row.key_id)
    return _context(caller, row.space_id)


def _context(caller: Caller, space_id: uuid.UUID) -> SpaceContext:
    grant = caller.grant_for(space_id)
    if grant is None:  # the grant was withdrawn since the token was made
        raise _refused()
    ctx = SpaceContext(caller, grant.space, grant.effective)
    require_write(ctx)
    return ctx
