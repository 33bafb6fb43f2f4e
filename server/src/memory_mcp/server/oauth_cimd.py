"""Which OAuth client a ``client_id`` names: one registered here (DCR), or one whose id is the https
URL of its Client ID Metadata Document (CIMD), fetched with guards against server-side request
forgery and remembered in the database for ``oauth_cimd_cache_s``.

The guards: https only, verified against the system trust store (``SSL_CERT_FILE`` honoured); the
host's addresses resolved first and refused when any is private, loopback, link-local or otherwise
not public (loopback only with ``oauth_cimd_allow_loopback``), then connected to by that checked
address, so a second DNS answer cannot point elsewhere; no redirects; a size and a time limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import ssl
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

import httpx2

from memory_mcp.core import metrics
from memory_mcp.core.settings import Settings
from memory_mcp.store import oauth, validation
from memory_mcp.store.addresses import address_refused
from memory_mcp.store.db import Database

log = logging.getLogger(__name__)


# What went wrong, for the advice the error page adds to the message (oauth_pages.NEXT_STEPS):
# the id names nothing here, an administrator revoked it, the id is not a usable URL, its metadata
# could not be fetched, it points at a private address, or its document does not fit.
Refusal = Literal["unknown", "revoked", "malformed", "unreachable", "private", "document"]


class ClientRefused(Exception):
    """The client id names no usable client; the message says why, for the error page."""

    def __init__(self, message: str, kind: Refusal = "document") -> None:
        super().__init__(message)
        self.kind: Refusal = kind


def is_metadata_url(client_id: str) -> bool:
    return client_id.startswith("https://")


# Metadata documents fetched for one client address an hour (on every pod together): each new
# client_id URL is fetched unauthenticated, so without a limit anyone could make the server fetch
# (or try) as many URLs as they send.
CIMD_FETCHES_PER_HOUR = 30


async def resolve_client(
    db: Database, settings: Settings, client_id: str, requester: str | None = None
) -> oauth.OAuthClient:
    """The live client ``client_id`` names, or :class:`ClientRefused`. A metadata document not
    cached counts against ``requester``'s (the client address's) fetches before it is fetched."""
    if not client_id or len(client_id) > oauth.MAX_URI or validation.text_problem(client_id):
        raise ClientRefused("client_id is missing, too long or not text", "malformed")
    client = await oauth.get_client(db, client_id)
    if client is not None and client.revoked_at is not None:
        raise ClientRefused("this app's access to Memory-MCP has been revoked", "revoked")
    if not is_metadata_url(client_id):
        if client is None:
            raise ClientRefused("unknown client_id", "unknown")
        return client
    age = (datetime.now(UTC) - client.fetched_at).total_seconds() if client is not None else None
    if client is not None and age is not None and age < settings.oauth_cimd_cache_s:
        return client
    if requester is not None:
        left = await oauth.over_address_limit(db, "cimd_fetch", requester, CIMD_FETCHES_PER_HOUR, 3600.0)
        if left is not None:
            raise ClientRefused(
                f"too many client metadata documents fetched for this address; retry in {math.ceil(left)} s",
                "unreachable",
            )
    document = await fetch_document(client_id, settings)
    name, redirect_uris = _client_fields(client_id, document, settings)
    metrics.OAUTH_EVENTS.labels(event="cimd_fetched").inc()
    try:
        return await oauth.save_metadata_client(db, client_id, name, redirect_uris)
    except oauth.OAuthError as exc:
        raise ClientRefused(exc.description) from None


def _client_fields(client_id: str, document: Any, settings: Settings) -> tuple[str, list[str]]:
    if not isinstance(document, dict):
        raise ClientRefused("the client's metadata document is not a JSON object")
    if document.get("client_id") != client_id:
        raise ClientRefused("the client's metadata document names another client_id")
    uris = document.get("redirect_uris")
    if (
        not isinstance(uris, list)
        or not uris
        or len(uris) > oauth.MAX_REDIRECT_URIS
        or not all(isinstance(u, str) for u in uris)
    ):
        raise ClientRefused("the client's metadata document must list its redirect_uris")
    for uri in uris:
        problem = oauth.redirect_uri_problem(uri, settings.oauth_redirect_hosts)
        if problem is not None:
            raise ClientRefused(f"the client's metadata document: {problem}")
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise ClientRefused(
            "a client known by its metadata document must be a public client (auth method none)"
        )
    name = document.get("client_name")
    if not isinstance(name, str) or not name.strip() or validation.text_problem(name):
        name = urlsplit(client_id).hostname or client_id
    return name.strip()[: oauth.MAX_CLIENT_NAME], list(uris)


async def fetch_document(
    url: str,
    settings: Settings,
    *,
    what: str = "the client's metadata",
    allow_loopback: bool | None = None,
    max_bytes: int | None = None,
) -> Any:
    """GET the metadata document at ``url`` under the guards above; its JSON, or ClientRefused.

    ``what`` names the document in the refusal; an OpenID provider's documents (``oidc``) pass
    their own loopback setting and size limit."""
    loopback = settings.oauth_cimd_allow_loopback if allow_loopback is None else allow_loopback
    limit = settings.oauth_cimd_max_bytes if max_bytes is None else max_bytes
    parts = urlsplit(url)
    try:
        port = parts.port or 443
    except ValueError:
        raise ClientRefused("client_id is not a valid URL", "malformed") from None
    host = parts.hostname
    if parts.scheme != "https" or not host or parts.username or parts.password or parts.fragment:
        raise ClientRefused(f"{what} URL must be https, without credentials or fragment", "malformed")
    if parts.path in ("", "/"):
        raise ClientRefused(f"{what} URL must have a path", "malformed")
    try:
        async with asyncio.timeout(settings.oauth_cimd_timeout_s):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise ClientRefused(f"{what} host does not resolve", "unreachable") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses or any(address_refused(a, loopback) for a in addresses):
        metrics.OAUTH_EVENTS.labels(event="cimd_refused_address").inc()
        raise ClientRefused(f"{what} URL points at a private or local address", "private")
    try:
        async with asyncio.timeout(settings.oauth_cimd_timeout_s):
            body = await _first_answer(parts.netloc, host, port, parts, addresses, limit, what)
    except TimeoutError:
        raise ClientRefused(f"{what} URL did not answer in time", "unreachable") from None
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):  # nested past what the parser takes: no metadata of a client
        raise ClientRefused(f"{what} document is not JSON") from None


async def _first_answer(
    netloc: str, host: str, port: int, parts: SplitResult, addresses: list[str], limit: int, what: str
) -> bytes:
    """The body from the first checked address that takes the connection (a name may resolve to
    ::1 and 127.0.0.1 while the server listens on one), verified for ``host``'s certificate."""
    failure: Exception | None = None
    async with httpx2.AsyncClient(
        verify=ssl.create_default_context(), follow_redirects=False, trust_env=False
    ) as http:
        for address in addresses:
            literal = f"[{address}]" if ":" in address else address
            target = parts._replace(netloc=f"{literal}:{port}").geturl()
            try:
                async with http.stream(
                    "GET",
                    target,
                    headers={"Host": netloc, "Accept": "application/json"},
                    extensions={"sni_hostname": host},
                ) as response:
                    if response.status_code != 200:
                        raise ClientRefused(f"{what} URL answered {response.status_code}", "unreachable")
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:
                        raise ClientRefused(f"{what} document is over {limit} bytes")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > limit:
                            raise ClientRefused(f"{what} document is over {limit} bytes")
                    return bytes(body)
            except httpx2.ConnectError as exc:
                failure = exc
            except httpx2.HTTPError as exc:
                failure = exc
                break
    log.warning("fetching %s failed: %s", what, failure.__class__.__name__)
    raise ClientRefused(f"{what} URL could not be fetched over verified https", "unreachable")
