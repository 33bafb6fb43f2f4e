"""``/authorize``: the authorization code flow's front channel, in three steps.

1. ``GET /authorize``: the app's request is checked (client, redirect URI, PKCE S256, resource);
   the sign-in page asks for an API key.
2. ``POST /authorize``: the key is checked; the consent page lists the spaces it grants.
3. ``POST /authorize/consent``: "Allow" sends the app back with a code (and ``iss``, RFC 9207),
   "Deny" with ``access_denied``.

A request whose client or redirect URI is not known gets an error page, never a redirect. Forms
carry a CSRF token that must equal the cookie set with the page (double submit; the cookie is
SameSite=Strict). What happens between the steps lives in the database (``store.oauth``), so each
step may reach another server pod.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData

from memory_mcp.core import metrics
from memory_mcp.store import oauth, validation
from memory_mcp.store.errors import AuthenticationFailed, RateLimited
from memory_mcp.store.identity import caller_for_key

from .bearer import Resource
from .oauth_cimd import ClientRefused, resolve_client
from .oauth_pages import CSRF_COOKIE, CSRF_FIELD, consent_page, error_page, sign_in_page
from .service import MemoryService

FIELDS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
    "scope",
)
_CHALLENGE = re.compile(r"[A-Za-z0-9\-._~]{43,128}")  # RFC 7636 §4.2
MAX_STATE = 1000


@dataclass(frozen=True)
class Checked:
    """An authorization request whose client and redirect URI are known good."""

    client: oauth.OAuthClient
    redirect_uri: str
    state: str | None
    fields: dict[str, str | None]


def _redirect(uri: str, params: Mapping[str, str | None], status: int) -> RedirectResponse:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return RedirectResponse(f"{uri}{'&' if urlsplit(uri).query else '?'}{query}", status_code=status)


def _refuse(
    checked: Checked, resource: Resource, error: str, description: str, status: int = 302
) -> Response:
    metrics.OAUTH_ERRORS.labels(endpoint="authorize", error=error).inc()
    return _redirect(
        checked.redirect_uri,
        {"error": error, "error_description": description, "state": checked.state, "iss": resource.issuer},
        status,
    )


async def _check(
    service: MemoryService, params: Mapping[str, str], repeated: set[str], resource: Resource, requester: str
) -> Checked | Response:
    """Client and redirect URI first (their failures are error pages); the rest redirects."""
    try:
        client = await resolve_client(service.db, service.settings, params.get("client_id", ""), requester)
    except ClientRefused as exc:
        metrics.OAUTH_ERRORS.labels(endpoint="authorize", error="invalid_client").inc()
        return error_page(str(exc), exc.kind)
    requested = params.get("redirect_uri")
    if requested is None:
        if len(client.redirect_uris) != 1:
            return error_page("redirect_uri is required: this app has several", "redirect_missing")
        requested = client.redirect_uris[0]
    if "redirect_uri" in repeated or not any(
        oauth.redirect_matches(r, requested) for r in client.redirect_uris
    ):
        metrics.OAUTH_ERRORS.labels(endpoint="authorize", error="invalid_redirect_uri").inc()
        return error_page("redirect_uri is not one this app registered", "redirect_unknown")
    state = params.get("state")
    if state is not None and (len(state) > MAX_STATE or validation.text_problem(state)):
        return error_page(f"state must be text of at most {MAX_STATE} characters", "bad_request")
    checked = Checked(client, requested, state, {name: params.get(name) for name in FIELDS})
    if repeated:
        return _refuse(checked, resource, "invalid_request", f"{sorted(repeated)[0]} is given more than once")
    if params.get("response_type") != "code":
        return _refuse(checked, resource, "unsupported_response_type", "response_type must be code")
    challenge = params.get("code_challenge")
    if not challenge:
        return _refuse(checked, resource, "invalid_request", "code_challenge (PKCE) is required")
    if params.get("code_challenge_method") != "S256":
        return _refuse(checked, resource, "invalid_request", "code_challenge_method must be S256")
    if not _CHALLENGE.fullmatch(challenge):
        return _refuse(
            checked, resource, "invalid_request", "code_challenge must be 43-128 URL-safe characters"
        )
    target = params.get("resource")
    if target is not None and target.rstrip("/") not in (resource.mcp, resource.origin):
        return _refuse(checked, resource, "invalid_target", "resource is not this server")
    return checked


def _target(requested: str | None, resource: Resource) -> str:
    """The resource a grant is for, in its canonical form (``_check`` allowed only these two)."""
    if requested is not None and requested.rstrip("/") == resource.origin:
        return resource.origin
    return resource.mcp


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _repeated(items: list[tuple[str, str]]) -> set[str]:
    names = [name for name, _ in items if name in FIELDS]
    return {name for name in names if names.count(name) > 1}


def _same_site(request: Request, form: FormData) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = form.get(CSRF_FIELD)
    return bool(cookie) and isinstance(sent, str) and secrets.compare_digest(cookie, sent)


async def _form(request: Request) -> FormData | None:
    try:
        return await request.form()
    except Exception:  # an unreadable body is a bad request, not a failure of ours
        return None


_STALE = "this page has expired or came from another site"


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    settings = service.settings

    def secure(request: Request) -> bool:
        return Resource.of(request.scope, settings).origin.startswith("https://")

    @router.get("/authorize")
    async def authorize(request: Request) -> Response:
        resource = Resource.of(request.scope, settings)
        items = list(request.query_params.multi_items())
        checked = await _check(service, dict(items), _repeated(items), resource, _address(request))
        if not isinstance(checked, Checked):
            return checked
        host = urlsplit(checked.redirect_uri).netloc
        return sign_in_page(
            checked.client.client_name, host, checked.fields, secrets.token_urlsafe(24), secure(request)
        )

    @router.post("/authorize")
    async def sign_in(request: Request) -> Response:
        form = await _form(request)
        if form is None:
            return error_page("the form could not be read", "bad_request")
        if not _same_site(request, form):
            return error_page(_STALE, "stale", 403)
        resource = Resource.of(request.scope, settings)
        items = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
        checked = await _check(service, dict(items), _repeated(items), resource, _address(request))
        if not isinstance(checked, Checked):
            return checked
        host = urlsplit(checked.redirect_uri).netloc
        csrf = str(form[CSRF_FIELD])
        key = form.get("api_key")
        try:
            # A form field, unlike a header, may hold NUL and control characters: never a key.
            usable = isinstance(key, str) and key and validation.text_problem(key) is None
            caller = await service.authenticate(key if usable and isinstance(key, str) else None)
        except AuthenticationFailed as exc:
            metrics.AUTH_FAILURES.labels(reason=exc.reason).inc()
            return sign_in_page(
                checked.client.client_name,
                host,
                checked.fields,
                csrf,
                secure(request),
                error="That API key is not valid, or has expired or been revoked.",
            )
        except RateLimited as exc:
            return error_page(
                f"too many requests with this key: retry in {exc.retry_after} s", "rate_limited", 429
            )
        if not caller.grants:
            return error_page("this key grants no space, so there is nothing to share", "no_grants")
        handle = await oauth.begin_sign_in(
            service.db,
            caller,
            oauth.SignIn(
                caller.key.id,
                checked.client.client_id,
                checked.redirect_uri,
                str(checked.fields["code_challenge"]),
                _target(checked.fields["resource"], resource),
                checked.state,
            ),
            settings.oauth_sign_in_ttl_s,
        )
        return consent_page(checked.client.client_name, host, caller.grants, handle, csrf)

    @router.post("/authorize/consent")
    async def consent(request: Request) -> Response:
        form = await _form(request)
        if form is None:
            return error_page("the form could not be read", "bad_request")
        if not _same_site(request, form):
            return error_page(_STALE, "stale", 403)
        expired = f"this sign-in has expired (it lasts {settings.oauth_sign_in_ttl_s // 60} minutes)"
        handle = form.get("sign_in")
        found = await oauth.get_sign_in(service.db, handle) if isinstance(handle, str) and handle else None
        if found is None or not isinstance(handle, str):
            return error_page(expired, "expired")
        try:
            client = await resolve_client(service.db, settings, found.client_id, _address(request))
        except ClientRefused as exc:
            return error_page(str(exc), exc.kind)
        resource = Resource.of(request.scope, settings)
        checked = Checked(client, found.redirect_uri, found.state, {})
        if form.get("decision") != "allow":
            await oauth.end_sign_in(service.db, handle)
            metrics.OAUTH_EVENTS.labels(event="denied").inc()
            return _refuse(checked, resource, "access_denied", "the person denied access", 303)
        try:
            caller = await caller_for_key(service.db, found.key_id)
        except AuthenticationFailed:
            return error_page("the key used to sign in is no longer valid", "key_gone")
        chosen = [v for v in form.getlist("space") if isinstance(v, str)]
        granted = {g.space.key for g in caller.grants}
        if not chosen or not set(chosen) <= granted:
            # Shown again as the person left it: what they unticked stays unticked.
            return consent_page(
                client.client_name,
                urlsplit(found.redirect_uri).netloc,
                caller.grants,
                handle,
                str(form[CSRF_FIELD]),
                chosen=set(chosen) & granted,
                error=(
                    "Nothing is granted yet: tick at least one space for the app, or press Deny."
                    if not chosen
                    else "A space you chose is no longer one this key grants: check the list again."
                ),
            )
        if await oauth.end_sign_in(service.db, handle) is None:
            return error_page(expired, "expired")
        try:
            code = await oauth.grant_consent(
                service.db, found, chosen, settings.oauth_code_ttl_s, client.client_name
            )
        except (oauth.OAuthError, AuthenticationFailed):
            return error_page("the key used to sign in no longer grants these spaces", "key_gone")
        metrics.OAUTH_EVENTS.labels(event="consent").inc()
        return _redirect(
            found.redirect_uri, {"code": code, "state": found.state, "iss": resource.issuer}, 303
        )

    return router
