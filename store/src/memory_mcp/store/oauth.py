"""OAuth 2.1 state: clients, sign-ins awaiting consent, authorization codes, refresh-token families,
signing keys, and the access tokens they sign. All of it lives in PostgreSQL, so any server pod can
finish a flow another pod began; the HTTP routes (``server/oauth_*.py``) only parse and render.

A token is worth at most the API key a person signed in with: it names the key and the spaces kept
at consent, and every request checks again that the key, its user, its grants and the token's
family are live (:func:`caller_for_access_token`), so revoking any of them takes effect at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import jwt
from psycopg.rows import namedtuple_row
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import validation
from .addresses import counted_as
from .audit import record
from .db import Database
from .errors import AuthenticationFailed, StoreError
from .identity import CALLER_SQL, caller_for_key, caller_from_row, failure
from .models import Caller
from .oauth_keys import ALGORITHM, SigningKey, SigningKeys, b64

TOKEN_TYPE = "at+jwt"  # RFC 9068
SCOPE = "memory"
REFRESH_PREFIX = "mmr_"
CODE_PREFIX = "mmc_"
CLIENT_PREFIX = "mcl_"


class OAuthError(StoreError):
    """A refusal with its RFC 6749 error code (``invalid_grant``, ``invalid_client``...)."""

    def __init__(self, error: str, description: str, event: str | None = None) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.event = event  # what a refusal reveals (code_replayed, refresh_reused), for metrics


@dataclass(frozen=True)
class OAuthClient:
    client_id: str
    kind: str  # "dcr" (registered here) or "cimd" (the id is the URL of its metadata document)
    client_name: str
    redirect_uris: tuple[str, ...]
    created_at: datetime
    fetched_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class SignIn:
    """An authorization request whose person has signed in with a key and now sees the consent page."""

    key_id: uuid.UUID
    client_id: str
    redirect_uri: str
    code_challenge: str
    resource: str
    state: str | None


@dataclass(frozen=True)
class Tokens:
    access_token: str
    expires_in: int
    refresh_token: str
    scope: str


@dataclass(frozen=True)
class Lifetimes:
    access_s: int
    refresh_s: int
    code_s: int


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def pkce_matches(verifier: str, challenge: str) -> bool:
    """RFC 7636 S256: BASE64URL(SHA256(verifier)) == challenge (the only method accepted)."""
    return hmac.compare_digest(b64(hashlib.sha256(verifier.encode("ascii", "replace")).digest()), challenge)


# --- redirect URIs ---------------------------------------------------------------------------------

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
MAX_REDIRECT_URIS = 10
MAX_URI = 2000
MAX_CLIENT_NAME = 200


def redirect_uri_problem(uri: str, allowed_hosts: Sequence[str]) -> str | None:
    """Why ``uri`` cannot be a redirect URI, or None: https (to an allowed host when the list is
    set), or http to a loopback address (native clients, any port); absolute, without a fragment."""
    if len(uri) > MAX_URI:
        return f"a redirect URI must be at most {MAX_URI} characters"
    if (problem := validation.text_problem(uri)) is not None:
        return f"a redirect URI {problem}"
    if any(char.isspace() for char in uri):
        # URL parsers drop tabs and line breaks, so a URI holding them would match one without
        return "a redirect URI must not contain spaces, tabs or line breaks"
    try:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "a redirect URI must be an absolute URL"
    if parts.fragment or "#" in uri:
        return "a redirect URI must not have a fragment"
    if parts.username is not None or parts.password is not None:
        return "a redirect URI must not carry credentials"
    if parts.scheme == "http" and host in LOOPBACK_HOSTS:
        return None
    if parts.scheme != "https" or not host:
        return "a redirect URI must be https, or http to localhost or 127.0.0.1"
    if allowed_hosts and not any(host == h or host.endswith("." + h) for h in allowed_hosts):
        return f"redirect host {host} is not among the allowed redirect hosts"
    return None


def redirect_matches(registered: str, requested: str) -> bool:
    """Exact string match, except that a loopback redirect may use any port (RFC 8252 §7.3). The
    requested URI is held to the rules of a registered one: with a port of its own, it could still
    carry a fragment, credentials or characters the URL parser drops while comparing."""
    if registered == requested:
        return True
    if redirect_uri_problem(requested, ()) is not None:
        return False
    try:
        reg, req = urlsplit(registered), urlsplit(requested)
        if reg.scheme != "http" or (reg.hostname or "") not in LOOPBACK_HOSTS:
            return False
        req.port  # noqa: B018 - a malformed port is no match
    except ValueError:
        return False
    return (reg.scheme, reg.hostname, reg.path, reg.query) == (req.scheme, req.hostname, req.path, req.query)


# --- clients ----------------------------------------------------------------------------------------

_CLIENT_COLUMNS = "client_id, kind, client_name, redirect_uris, created_at, fetched_at, revoked_at"


def _client(row: Any) -> OAuthClient:
    return OAuthClient(
        row.client_id,
        row.kind,
        row.client_name,
        tuple(row.redirect_uris),
        row.created_at,
        row.fetched_at,
        row.revoked_at,
    )


async def get_client(db: Database, client_id: str) -> OAuthClient | None:
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(f"SELECT {_CLIENT_COLUMNS} FROM oauth_clients WHERE client_id = :id"), {"id": client_id}
            )
        ).first()
    return _client(row) if row is not None else None


async def register_client(
    db: Database, client_name: str, redirect_uris: Sequence[str], actor: str = "registration"
) -> OAuthClient:
    """Dynamic client registration (RFC 7591): a public client, identified by a random id."""
    client_id = CLIENT_PREFIX + secrets.token_urlsafe(24)
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO oauth_clients (client_id, kind, client_name, redirect_uris) "
                    f"VALUES (:id, 'dcr', :name, :uris) RETURNING {_CLIENT_COLUMNS}"
                ),
                {"id": client_id, "name": client_name, "uris": list(redirect_uris)},
            )
        ).one()
        await record(
            conn, actor, "oauth.client_registered", "oauth_client", client_id, details={"name": client_name}
        )
    return _client(row)


async def save_metadata_client(
    db: Database, client_id: str, client_name: str, redirect_uris: Sequence[str]
) -> OAuthClient:
    """Remember what a client's metadata document (CIMD) said, as of now; a revoked one stays revoked."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO oauth_clients (client_id, kind, client_name, redirect_uris) "
                    "VALUES (:id, 'cimd', :name, :uris) ON CONFLICT (client_id) DO UPDATE "
                    "SET client_name = EXCLUDED.client_name, redirect_uris = EXCLUDED.redirect_uris, "
                    f"fetched_at = now() WHERE oauth_clients.kind = 'cimd' RETURNING {_CLIENT_COLUMNS}"
                ),
                {"id": client_id, "name": client_name, "uris": list(redirect_uris)},
            )
        ).first()
    if row is None:
        raise OAuthError("invalid_client", "this client id is taken by a registered client")
    return _client(row)


async def list_clients(db: Database) -> list[tuple[OAuthClient, int]]:
    """Every client, with how many of its token families are live."""
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                f"SELECT {', '.join('c.' + c for c in _CLIENT_COLUMNS.split(', '))}, "
                "(SELECT count(*) FROM oauth_families f WHERE f.client_id = c.client_id "
                " AND f.revoked_at IS NULL) AS live FROM oauth_clients c ORDER BY c.created_at"
            )
        )
        return [(_client(row), row.live) for row in rows]


async def revoke_client(db: Database, client_id: str, actor: str = "system") -> bool:
    """Refuse a client from now on, and every token it holds; False when it was revoked already."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE oauth_clients SET revoked_at = now() WHERE client_id = :id AND revoked_at IS NULL "
                    "RETURNING client_id"
                ),
                {"id": client_id},
            )
        ).first()
        if row is None:
            return False
        await _revoke_families(conn, "client_id = :id", {"id": client_id}, "client revoked")
        await record(conn, actor, "oauth.client_revoked", "oauth_client", client_id)
    return True


# --- per-address limits -----------------------------------------------------------------------------


_COUNT_SQL = """
INSERT INTO oauth_address_counts AS c (what, address, started_at, count) VALUES (:what, :address, now(), 1)
ON CONFLICT (what, address) DO UPDATE SET
    started_at = CASE WHEN c.started_at <= now() - make_interval(secs => :window) THEN now() ELSE c.started_at END,
    count = CASE WHEN c.started_at <= now() - make_interval(secs => :window) THEN 1 ELSE c.count + 1 END
RETURNING count AS seen, extract(epoch FROM c.started_at + make_interval(secs => :window) - now()) AS left_s
"""


async def over_address_limit(
    db: Database, what: str, address: str, limit: int, window_s: float
) -> float | None:
    """Count one ``what`` (``register``, ``cimd_fetch``) of ``address`` in the database, so the limit
    holds across server pods (an IPv6 address by its /64, ``addresses.counted_as``): the seconds
    until its window ends when this one is over ``limit``, else None."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(_COUNT_SQL), {"what": what, "address": counted_as(address)[:100], "window": window_s}
            )
        ).one()
    return max(float(row.left_s), 1.0) if row.seen > limit else None


# --- authorization ----------------------------------------------------------------------------------


async def begin_sign_in(db: Database, caller: Caller, request: SignIn, ttl_s: int) -> str:
    """A person signed in with ``caller``'s key for ``request``: an unguessable handle for the consent
    step (the key itself never travels again)."""
    handle = secrets.token_urlsafe(32)
    async with db.transaction() as conn:
        # Housekeeping, a few rows at a time on a rare path: sign-ins past their time, refresh
        # tokens past theirs, codes a day after theirs (kept that long so a replay still revokes).
        await conn.execute(text("DELETE FROM oauth_sign_ins WHERE expires_at < now()"))
        await conn.execute(text("DELETE FROM oauth_refresh_tokens WHERE expires_at < now()"))
        await conn.execute(text("DELETE FROM oauth_codes WHERE expires_at < now() - interval '1 day'"))
        await conn.execute(
            text("DELETE FROM oauth_address_counts WHERE started_at < now() - interval '1 day'")
        )
        await conn.execute(
            text(
                "INSERT INTO oauth_sign_ins (id_hash, key_id, client_id, redirect_uri, code_challenge, "
                "resource, state, expires_at) VALUES (:h, :k, :c, :r, :cc, :res, :s, "
                "now() + make_interval(secs => :ttl))"
            ),
            {
                "h": _hash(handle),
                "k": caller.key.id,
                "c": request.client_id,
                "r": request.redirect_uri,
                "cc": request.code_challenge,
                "res": request.resource,
                "s": request.state,
                "ttl": ttl_s,
            },
        )
    return handle


_SIGN_IN_COLUMNS = "key_id, client_id, redirect_uri, code_challenge, resource, state"


def _sign_in(row: Any) -> SignIn:
    return SignIn(row.key_id, row.client_id, row.redirect_uri, row.code_challenge, row.resource, row.state)


async def get_sign_in(db: Database, handle: str) -> SignIn | None:
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    f"SELECT {_SIGN_IN_COLUMNS} FROM oauth_sign_ins WHERE id_hash = :h AND expires_at > now()"
                ),
                {"h": _hash(handle)},
            )
        ).first()
    return _sign_in(row) if row is not None else None


async def end_sign_in(db: Database, handle: str) -> SignIn | None:
    """Take the sign-in (it works once): what it was, or None when unknown or expired."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    f"DELETE FROM oauth_sign_ins WHERE id_hash = :h RETURNING expires_at, {_SIGN_IN_COLUMNS}"
                ),
                {"h": _hash(handle)},
            )
        ).first()
    return _sign_in(row) if row is not None and row.expires_at > datetime.now(UTC) else None


async def grant_consent(
    db: Database, sign_in: SignIn, space_keys: Iterable[str], code_ttl_s: int, client_name: str
) -> str:
    """The person allowed ``space_keys`` (some of those the key grants, never more): a new token
    family and its single-use authorization code, returned once."""
    caller = await caller_for_key(db, sign_in.key_id)
    wanted = set(space_keys)
    kept = [g for g in caller.grants if g.space.key in wanted]
    if not kept or len(kept) != len(wanted):
        raise OAuthError("invalid_request", "choose at least one of the spaces this key grants")
    code = CODE_PREFIX + secrets.token_urlsafe(32)
    async with db.transaction() as conn:
        family = (
            await conn.execute(
                text(
                    "INSERT INTO oauth_families (client_id, key_id, space_ids, resource) "
                    "VALUES (:c, :k, :s, :r) RETURNING id"
                ),
                {
                    "c": sign_in.client_id,
                    "k": caller.key.id,
                    "s": [g.space.id for g in kept],
                    "r": sign_in.resource,
                },
            )
        ).scalar_one()
        await conn.execute(
            text(
                "INSERT INTO oauth_codes (code_hash, family_id, redirect_uri, code_challenge, expires_at) "
                "VALUES (:h, :f, :r, :cc, now() + make_interval(secs => :ttl))"
            ),
            {
                "h": _hash(code),
                "f": family,
                "r": sign_in.redirect_uri,
                "cc": sign_in.code_challenge,
                "ttl": code_ttl_s,
            },
        )
        await record(
            conn,
            f"key:{caller.key.name}",
            "oauth.consent",
            "oauth_client",
            sign_in.client_id,
            actor_user_id=caller.user.id,
            details={"client": client_name, "spaces": [g.space.key for g in kept], "family": str(family)},
        )
    return code


# --- tokens -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Issuer:
    """Who signs (``iss``) and what with; one per request, since the issuer may follow the Host."""

    issuer: str
    keys: SigningKeys
    lifetimes: Lifetimes


async def _issue(
    conn: AsyncConnection, key: SigningKey, issuer: Issuer, family: Any, caller: Caller
) -> Tokens:
    now = int(time.time())
    claims = {
        "iss": issuer.issuer,
        "aud": family.resource,
        "sub": str(caller.user.id),
        "client_id": family.client_id,
        "key": str(caller.key.id),
        "fam": str(family.id),
        "spaces": [str(s) for s in family.space_ids],
        "scope": SCOPE,
        "iat": now,
        "exp": now + issuer.lifetimes.access_s,
        "jti": secrets.token_urlsafe(12),
    }
    access = jwt.encode(claims, key.private, algorithm=ALGORITHM, headers={"kid": key.kid, "typ": TOKEN_TYPE})
    refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
    await conn.execute(
        text(
            "INSERT INTO oauth_refresh_tokens (token_hash, family_id, expires_at) "
            "VALUES (:h, :f, now() + make_interval(secs => :ttl))"
        ),
        {"h": _hash(refresh), "f": family.id, "ttl": issuer.lifetimes.refresh_s},
    )
    return Tokens(access, issuer.lifetimes.access_s, refresh, SCOPE)


async def _revoke_families(conn: AsyncConnection, where: str, params: dict[str, Any], reason: str) -> int:
    result = await conn.execute(
        text(
            f"UPDATE oauth_families SET revoked_at = now(), revoked_reason = :reason "
            f"WHERE {where} AND revoked_at IS NULL RETURNING id"
        ),
        {**params, "reason": reason},
    )
    return len(result.all())


async def _live_caller(db: Database, family: Any) -> Caller:
    try:
        return await caller_for_family(db, family.key_id, family.id, family.space_ids)
    except AuthenticationFailed:
        raise OAuthError("invalid_grant", "the key behind this grant is no longer valid") from None


async def exchange_code(
    db: Database,
    issuer: Issuer,
    *,
    code: str,
    client_id: str,
    redirect_uri: str,
    code_verifier: str,
    resource: str | None,
) -> Tokens:
    """authorization_code grant. A code works once: a replay revokes what the first use produced."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT c.family_id, c.redirect_uri, c.code_challenge, c.expires_at, c.used_at, "
                    "f.id, f.client_id, f.key_id, f.space_ids, f.resource, f.revoked_at "
                    "FROM oauth_codes c JOIN oauth_families f ON f.id = c.family_id "
                    "WHERE c.code_hash = :h FOR UPDATE OF c"
                ),
                {"h": _hash(code)},
            )
        ).first()
        if row is None:
            raise OAuthError("invalid_grant", "unknown authorization code")
        if row.used_at is not None:
            await _revoke_families(conn, "id = :id", {"id": row.id}, "authorization code replayed")
            await record(
                conn,
                "oauth",
                "oauth.code_replayed",
                "oauth_client",
                row.client_id,
                details={"family": str(row.id)},
            )
            refused = OAuthError("invalid_grant", "authorization code already used", "code_replayed")
        elif row.expires_at <= datetime.now(UTC) or row.revoked_at is not None:
            refused = OAuthError("invalid_grant", "authorization code expired")
        elif row.client_id != client_id:
            refused = OAuthError("invalid_grant", "authorization code was issued to another client")
        elif row.redirect_uri != redirect_uri:
            refused = OAuthError("invalid_grant", "redirect_uri differs from the authorization request's")
        elif not pkce_matches(code_verifier, row.code_challenge):
            refused = OAuthError("invalid_grant", "code_verifier does not match the code challenge")
        elif resource is not None and resource != row.resource:
            refused = OAuthError("invalid_target", "resource differs from the authorization request's")
        else:
            refused = None
        # A code is spent by any attempt at it, right or wrong: no guessing the verifier twice.
        await conn.execute(
            text("UPDATE oauth_codes SET used_at = now() WHERE code_hash = :h AND used_at IS NULL"),
            {"h": _hash(code)},
        )
    if refused is not None:
        raise refused
    caller = await _live_caller(db, row)
    key = await issuer.keys.signing_key(db)  # first: loading the keys may need a connection of its own
    async with db.transaction() as conn:
        tokens = await _issue(conn, key, issuer, row, caller)
        await record(
            conn,
            f"key:{caller.key.name}",
            "oauth.token_issued",
            "oauth_client",
            row.client_id,
            actor_user_id=caller.user.id,
            details={"family": str(row.id), "grant": "authorization_code"},
        )
    return tokens


async def _revoke_reused(conn: AsyncConnection, row: Any) -> None:
    """A refresh token used twice: every token of its grant revoked, and the reuse audited."""
    await _revoke_families(conn, "id = :id", {"id": row.id}, "refresh token reused")
    await record(
        conn, "oauth", "oauth.refresh_reused", "oauth_client", row.client_id, details={"family": str(row.id)}
    )


async def refresh(
    db: Database, issuer: Issuer, *, refresh_token: str, client_id: str, resource: str | None
) -> Tokens:
    """refresh_token grant with rotation: the token presented is spent; presenting a spent one again
    means it leaked, and revokes its whole family."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT r.expires_at, r.used_at, f.id, f.client_id, f.key_id, f.space_ids, f.resource, "
                    "f.revoked_at FROM oauth_refresh_tokens r JOIN oauth_families f ON f.id = r.family_id "
                    "WHERE r.token_hash = :h FOR UPDATE OF r, f"
                ),
                {"h": _hash(refresh_token)},
            )
        ).first()
        if row is None or row.revoked_at is not None:
            raise OAuthError("invalid_grant", "unknown or revoked refresh token")
        if row.client_id != client_id:
            raise OAuthError("invalid_grant", "refresh token was issued to another client")
        if row.used_at is not None:
            await _revoke_reused(conn, row)
    if row.used_at is not None:
        raise OAuthError(
            "invalid_grant",
            "refresh token already used; every token of this grant is revoked",
            "refresh_reused",
        )
    if row.expires_at <= datetime.now(UTC):
        raise OAuthError("invalid_grant", "refresh token expired")
    if resource is not None and resource != row.resource:
        raise OAuthError("invalid_target", "resource differs from the one this grant was given for")
    caller = await _live_caller(db, row)
    key = await issuer.keys.signing_key(db)  # first: loading the keys may need a connection of its own
    async with db.transaction() as conn:
        spent = (
            await conn.execute(
                text(
                    "UPDATE oauth_refresh_tokens SET used_at = now() WHERE token_hash = :h AND used_at IS NULL "
                    "RETURNING family_id"
                ),
                {"h": _hash(refresh_token)},
            )
        ).first()
        if spent is not None:
            return await _issue(conn, key, issuer, row, caller)
    # Another request rotated it a moment ago: that is a reuse too. The revocation commits in a
    # transaction of its own, so the refusal raised after it cannot roll it back.
    async with db.transaction() as conn:
        await _revoke_reused(conn, row)
    raise OAuthError("invalid_grant", "refresh token already used", "refresh_reused")


async def revoke_token(db: Database, issuer: Issuer, token: str, actor: str = "oauth") -> bool:
    """RFC 7009: a refresh token or an access token of ours revokes its family (False when it was
    revoked already). Anything else revokes nothing and raises :class:`AuthenticationFailed`, for
    the caller to count: an unknown refresh token, a token whose signature, issuer or claims do not
    verify, or one that is not a token of ours at all."""
    family: object = None
    if token.startswith(REFRESH_PREFIX):
        async with db.transaction() as conn:
            found = (
                await conn.execute(
                    text("SELECT family_id FROM oauth_refresh_tokens WHERE token_hash = :h"),
                    {"h": _hash(token)},
                )
            ).scalar()
        family = str(found) if found is not None else None
    elif looks_like_jwt(token):
        try:
            claims = await _verified_claims(
                db, issuer.keys, token, issuer=issuer.issuer, audiences=None, verify_exp=False
            )
        except jwt.PyJWTError as exc:
            raise token_failure(exc) from None
        family = claims.get("fam") if claims else None
    try:
        family = str(uuid.UUID(family)) if isinstance(family, str) else None
    except ValueError:
        family = None
    if family is None:
        raise _failed("token_invalid")
    async with db.transaction() as conn:
        revoked = await _revoke_families(
            conn, "id = CAST(:id AS uuid)", {"id": str(family)}, "revoked by client"
        )
        if revoked:
            await record(conn, actor, "oauth.token_revoked", "oauth_family", str(family))
    return bool(revoked)


# --- resource server --------------------------------------------------------------------------------


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith("mmk_")


async def _verified_claims(
    db: Database,
    keys: SigningKeys,
    token: str,
    *,
    issuer: str,
    audiences: Sequence[str] | None,
    verify_exp: bool = True,
) -> dict[str, Any] | None:
    # The header alone, to pick the key: PyJWT's own reader decodes the whole token, which the
    # verification below does again (a third of the check's CPU time).
    header = token_header(token)
    if header is None:
        return None
    kid = header.get("kid")
    key = await keys.verification_key(db, kid) if isinstance(kid, str) else None
    if key is None or header.get("typ") != TOKEN_TYPE:
        return None
    return decode_claims(
        token,
        key.public,
        algorithms=[ALGORITHM],
        issuer=issuer,
        audience=list(audiences) if audiences is not None else None,
        options={
            "require": ["exp", "iat", "iss", "aud", "key", "fam", "spaces"],
            "verify_aud": audiences is not None,
            "verify_exp": verify_exp,
        },
    )


# A JWT's header segment longer than this is no header of ours or of a provider's (a few hundred
# characters): it is refused before it is decoded, as deeply nested JSON once made a 500.
MAX_TOKEN_HEADER = 2048


def token_header(token: str) -> dict[str, Any] | None:
    """The JSON object of a JWT's header segment, or None when there is none to read: too long, not
    base64url, not UTF-8 JSON, nested past what the parser takes, or not an object."""
    segment = token.split(".", 1)[0]
    if len(segment) > MAX_TOKEN_HEADER:
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=="))
    except (ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def decode_claims(token: str, key: Any, **checks: Any) -> dict[str, Any]:
    """``jwt.decode`` whose every refusal is a :class:`jwt.PyJWTError`: a payload nested past what
    the JSON parser takes raised ``RecursionError`` through PyJWT, a 500."""
    try:
        claims: dict[str, Any] = jwt.decode(token, key, **checks)
    except RecursionError:
        raise jwt.DecodeError("the token's payload is nested too deeply") from None
    return claims


async def caller_for_access_token(
    db: Database, keys: SigningKeys, token: str, *, issuer: str, audiences: Sequence[str]
) -> Caller:
    """The caller behind an access token: signature, ``iss``, ``aud`` (one of ``audiences``), expiry,
    then, in one round trip, that the key, its user, its grants and the token's family are live.

    Grants are the key's grants today, narrowed to the spaces kept at consent: a grant removed or
    lowered since applies at once. Failures raise :class:`AuthenticationFailed` with a reason.
    """
    try:
        claims = await _verified_claims(db, keys, token, issuer=issuer, audiences=audiences)
    except jwt.PyJWTError as exc:
        raise token_failure(exc) from None
    if claims is None:
        raise _failed("token_invalid")
    try:
        key_id = uuid.UUID(str(claims["key"]))
        family = uuid.UUID(str(claims["fam"]))
        spaces = [uuid.UUID(str(s)) for s in claims["spaces"]]
    except (ValueError, TypeError):
        raise _failed("token_invalid") from None
    return await caller_for_family(db, key_id, family, spaces)


_FAMILY_SQL = (
    CALLER_SQL + " WHERE k.id = %(key)s AND EXISTS (SELECT 1 FROM oauth_families f JOIN oauth_clients c "
    "ON c.client_id = f.client_id WHERE f.id = %(family)s AND f.key_id = k.id AND f.revoked_at IS NULL "
    "AND c.revoked_at IS NULL)"
)


async def caller_for_family(
    db: Database, key_id: uuid.UUID, family: uuid.UUID, spaces: Sequence[uuid.UUID]
) -> Caller:
    async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
        await cur.execute(_FAMILY_SQL, {"key": key_id, "family": family})
        row = await cur.fetchone()
    if row is None:
        raise _failed("token_revoked")
    caller = caller_from_row(row, None)
    kept = set(spaces)
    return replace(caller, grants=tuple(g for g in caller.grants if g.space.id in kept))


def token_failure(exc: jwt.PyJWTError) -> AuthenticationFailed:
    """The refusal of a token whose signed claims did not verify, with its reason (our own tokens
    and an external provider's alike)."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return _failed("token_expired")
    if isinstance(exc, jwt.InvalidAudienceError | jwt.InvalidIssuerError):
        return _failed("token_wrong_audience")
    return _failed("token_invalid")


# Every refused credential is logged under one budget (a flood of bad tokens writes a few lines and
# a count), as a key's is.
_failed = failure
