"""Access tokens of an external OpenID Connect provider (Keycloak, Entra ID, Okta), when the setting
``oauth_issuer`` names one: this server is then a resource server only.

The provider's signing keys come from its JWKS, found through
``<issuer>/.well-known/openid-configuration``; both are fetched under the guards of client metadata
documents (``oauth_cimd``: https only, public addresses only, size and time limits, no redirects),
kept for ``oauth_issuer_cache_s``, and fetched again when a token names a key id they lack (a key
rotated at the provider), at most every ``oauth_issuer_refetch_s``. A token is checked for an
asymmetric signature by the key its ``kid`` names, ``iss``, ``aud``, ``exp`` and ``nbf``; then its
``oauth_user_claim`` names the Memory-MCP user (``identity.caller_for_user``), looked up on every
request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from memory_mcp.core.settings import Settings
from memory_mcp.store import identity, oauth
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AuthenticationFailed, IssuerUnavailable
from memory_mcp.store.models import Caller

from .oauth_cimd import ClientRefused, fetch_document

log = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
# Public-key algorithms only: a shared-secret (HS*) or unsigned ("none") token is never taken.
ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
# Clocks of the provider and this server may differ a little.
LEEWAY_S = 30


@dataclass(frozen=True)
class _KeySet:
    keys: dict[str, dict[str, Any]]  # kid -> JWK
    fetched: float  # time.monotonic()


class IssuerKeys:
    """The provider's public keys by ``kid``, fetched as the module says; one fetch at a time."""

    def __init__(self, settings: Settings) -> None:
        assert settings.oauth_issuer is not None
        self.settings = settings
        self.issuer = settings.oauth_issuer
        self._set: _KeySet | None = None
        self._tried_at: float | None = None  # time.monotonic() of the last fetch, done or not
        self._failed_at: float | None = None  # of the last fetch that failed, until one succeeds
        self._lock = asyncio.Lock()

    def _fresh(self, now: float) -> bool:
        return self._set is not None and now - self._set.fetched < self.settings.oauth_issuer_cache_s

    async def key(self, kid: str) -> dict[str, Any] | None:
        """The JWK named ``kid``, or None when the provider (asked again if allowed) has none.

        Fetched when the keys are stale (but not again within ``oauth_issuer_refetch_s`` of a
        failed fetch: a provider that is down is not asked on every request), or when ``kid`` is
        unknown and the last fetch is at least ``oauth_issuer_refetch_s`` old. Stale keys are never
        used. While the provider cannot be reached, a token it signed can be judged neither way:
        :class:`IssuerUnavailable` (503, retry), never a refusal, which tells clients to drop the
        credential and sign the person out (API keys still work meanwhile).
        """
        current = self._set
        if current is not None and kid in current.keys and self._fresh(time.monotonic()):
            return current.keys[kid]
        async with self._lock:
            now = time.monotonic()
            current = self._set
            wait = self.settings.oauth_issuer_refetch_s
            if not self._fresh(now):
                due = self._failed_at is None or now - self._failed_at >= wait
            elif kid not in (current.keys if current else {}):
                due = self._tried_at is None or now - self._tried_at >= wait
            else:
                due = False
            if due:
                self._tried_at = now
                try:
                    self._set = _KeySet(await self._fetch(), time.monotonic())
                    self._failed_at = None
                except ClientRefused as exc:
                    self._failed_at = time.monotonic()
                    log.warning("the OpenID provider's keys could not be fetched: %s", exc)
            if self._set is None or not self._fresh(time.monotonic()):
                raise self._unavailable()
            found = self._set.keys.get(kid)
            if found is None and self._failed_at is not None:
                raise self._unavailable()  # a key rotated at the provider, or a forgery: ask it again
            return found

    def _unavailable(self) -> IssuerUnavailable:
        """The outage, with the seconds until the provider may be asked again."""
        assert self._failed_at is not None
        wait = self.settings.oauth_issuer_refetch_s - (time.monotonic() - self._failed_at)
        return IssuerUnavailable(retry_after=max(1, math.ceil(wait)))

    async def _fetch(self) -> dict[str, dict[str, Any]]:
        settings = self.settings
        guards: dict[str, Any] = {
            "allow_loopback": settings.oauth_issuer_allow_loopback,
            "max_bytes": settings.oauth_issuer_max_bytes,
        }
        discovery = await fetch_document(
            self.issuer.rstrip("/") + DISCOVERY_PATH,
            settings,
            what="the OpenID provider's configuration",
            **guards,
        )
        if not isinstance(discovery, dict) or discovery.get("issuer") != self.issuer:
            raise ClientRefused("the OpenID provider's configuration names another issuer")
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise ClientRefused("the OpenID provider's configuration has no jwks_uri")
        jwks = await fetch_document(jwks_uri, settings, what="the OpenID provider's JWKS", **guards)
        found = jwks.get("keys") if isinstance(jwks, dict) else None
        if not isinstance(found, list):
            raise ClientRefused("the OpenID provider's JWKS has no keys")
        return {
            k["kid"]: k
            for k in found
            if isinstance(k, dict) and isinstance(k.get("kid"), str) and k.get("use", "sig") == "sig"
        }


def _failed(reason: str) -> AuthenticationFailed:
    return identity.failure(reason)


async def verified_claims(keys: IssuerKeys, token: str, audiences: Sequence[str]) -> dict[str, Any]:
    """The claims of a token the provider signed for one of ``audiences``, or AuthenticationFailed."""
    header = oauth.token_header(token)
    alg = header.get("alg") if header else None
    kid = header.get("kid") if header else None
    if alg not in ALGORITHMS or not isinstance(kid, str):
        raise _failed("token_invalid")
    jwk = await keys.key(kid)
    if jwk is None or jwk.get("alg", alg) != alg:
        raise _failed("token_invalid")
    try:
        key = jwt.PyJWK(jwk, algorithm=alg).key
        claims = oauth.decode_claims(
            token,
            key,
            algorithms=[alg],
            issuer=keys.issuer,
            audience=list(audiences),
            leeway=LEEWAY_S,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.PyJWTError as exc:
        raise oauth.token_failure(exc) from None
    return claims


async def caller_for_token(db: Database, keys: IssuerKeys, token: str, audiences: Sequence[str]) -> Caller:
    """The Memory-MCP caller a verified provider token names (``identity.caller_for_user``)."""
    settings = keys.settings
    claims = await verified_claims(keys, token, audiences)
    who = claims.get(settings.oauth_user_claim)
    if not isinstance(who, str) or not who or len(who) > 320:
        raise _failed("token_no_user_claim")
    # An address the provider has not verified names nobody.
    if "@" in who and claims.get("email_verified") is False:
        raise _failed("token_email_unverified")
    return await identity.caller_for_user(db, who)
