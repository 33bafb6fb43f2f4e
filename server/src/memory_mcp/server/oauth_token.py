"""The back channel: ``/token`` (RFC 6749 with PKCE; refresh with rotation), ``/revoke`` (RFC 7009)
and ``/register`` (RFC 7591, limited per client address in the database, so on all pods together).
Errors are RFC 6749 §5.2 JSON (``error``, ``error_description``), never the REST error shape: these
answers are read by OAuth libraries."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import FormData

from memory_mcp.core import metrics
from memory_mcp.store import oauth, validation
from memory_mcp.store.errors import AuthenticationFailed

from .bearer import REGISTER_PATH, REVOKE_PATH, TOKEN_PATH, Resource
from .oauth_cimd import ClientRefused, resolve_client
from .service import MemoryService
from .throttle import count_failure

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
MAX_REGISTRATION_BYTES = 16 * 1024


def oauth_error(endpoint: str, error: str, description: str, status: int = 400) -> JSONResponse:
    metrics.OAUTH_ERRORS.labels(endpoint=endpoint, error=error).inc()
    return JSONResponse(
        {"error": error, "error_description": description}, status_code=status, headers=NO_STORE
    )


async def _form(request: Request) -> FormData | None:
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    try:
        return await request.form()
    except Exception:  # an unreadable body is the client's error
        return None


def _single(form: FormData, name: str) -> str | None:
    """A parameter given once as text; None when absent. RFC 6749 §3.2: never more than once."""
    values = form.getlist(name)
    if len(values) > 1:
        raise ValueError(name)
    return values[0] if values and isinstance(values[0], str) and values[0] else None


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    settings = service.settings
    lifetimes = oauth.Lifetimes(
        settings.oauth_access_token_ttl_s, settings.oauth_refresh_token_ttl_s, settings.oauth_code_ttl_s
    )

    def issuer(request: Request) -> oauth.Issuer:
        return oauth.Issuer(Resource.of(request.scope, settings).issuer, service.oauth_keys, lifetimes)

    @router.post(TOKEN_PATH)
    async def token(request: Request) -> Response:
        form = await _form(request)
        if form is None:
            return oauth_error(
                "token", "invalid_request", "send the parameters as application/x-www-form-urlencoded"
            )
        if any(isinstance(v, str) and validation.text_problem(v) for _, v in form.multi_items()):
            return oauth_error(
                "token", "invalid_request", "parameters must be text without control characters"
            )
        try:
            grant_type = _single(form, "grant_type")
            client_id = _single(form, "client_id")
            params = {
                n: _single(form, n)
                for n in ("code", "redirect_uri", "code_verifier", "refresh_token", "resource")
            }
        except ValueError as exc:
            return oauth_error("token", "invalid_request", f"{exc} is given more than once")
        if grant_type not in ("authorization_code", "refresh_token"):
            return oauth_error(
                "token", "unsupported_grant_type", "grant_type must be authorization_code or refresh_token"
            )
        if client_id is None:
            return oauth_error("token", "invalid_client", "client_id is required (public clients)", 401)
        try:
            await resolve_client(
                service.db, settings, client_id, request.client.host if request.client else None
            )
        except ClientRefused as exc:
            return oauth_error("token", "invalid_client", str(exc), 401)
        resource = Resource.of(request.scope, settings)
        target = params["resource"]
        if target is not None:
            target = resource.origin if target.rstrip("/") == resource.origin else target
        try:
            if grant_type == "authorization_code":
                missing = [n for n in ("code", "redirect_uri", "code_verifier") if params[n] is None]
                if missing:
                    return oauth_error("token", "invalid_request", f"{missing[0]} is required")
                tokens = await oauth.exchange_code(
                    service.db,
                    issuer(request),
                    code=str(params["code"]),
                    client_id=client_id,
                    redirect_uri=str(params["redirect_uri"]),
                    code_verifier=str(params["code_verifier"]),
                    resource=target,
                )
                metrics.OAUTH_EVENTS.labels(event="token_issued").inc()
            else:
                if params["refresh_token"] is None:
                    return oauth_error("token", "invalid_request", "refresh_token is required")
                tokens = await oauth.refresh(
                    service.db,
                    issuer(request),
                    refresh_token=params["refresh_token"],
                    client_id=client_id,
                    resource=target,
                )
                metrics.OAUTH_EVENTS.labels(event="refreshed").inc()
        except oauth.OAuthError as exc:
            if exc.event is not None:
                metrics.OAUTH_EVENTS.labels(event=exc.event).inc()
            if exc.error == "invalid_grant":  # a code or refresh token that is not (or no longer) good
                count_failure(request.scope)
            return oauth_error("token", exc.error, exc.description)
        body = {
            "access_token": tokens.access_token,
            "token_type": "Bearer",
            "expires_in": tokens.expires_in,
            "refresh_token": tokens.refresh_token,
            "scope": tokens.scope,
        }
        return JSONResponse(body, headers=NO_STORE)

    @router.post(REVOKE_PATH)
    async def revoke(request: Request) -> Response:
        form = await _form(request)
        if form is None:
            return oauth_error(
                "revoke", "invalid_request", "send the parameters as application/x-www-form-urlencoded"
            )
        try:
            presented = _single(form, "token")
        except ValueError:
            return oauth_error("revoke", "invalid_request", "token is given more than once")
        if presented is None:
            return oauth_error("revoke", "invalid_request", "token is required")
        # RFC 7009 §2.2: the answer is 200 whether or not the token was known; one that is not ours
        # counts as a failed authentication all the same (a forged token is throttled, not a 500).
        try:
            if await oauth.revoke_token(service.db, issuer(request), presented):
                metrics.OAUTH_EVENTS.labels(event="revoked").inc()
        except AuthenticationFailed as exc:
            metrics.AUTH_FAILURES.labels(reason=exc.reason).inc()
            count_failure(request.scope)
        return Response(status_code=200, headers=NO_STORE)

    @router.post(REGISTER_PATH)
    async def register(request: Request) -> Response:
        client = request.client.host if request.client else "unknown"
        left = await oauth.over_address_limit(
            service.db, "register", client, settings.oauth_registrations_per_hour, 3600.0
        )
        if left is not None:
            metrics.OAUTH_ERRORS.labels(endpoint="register", error="rate_limited").inc()
            seconds = str(max(1, math.ceil(left)))
            return JSONResponse(
                {"error": "slow_down", "error_description": f"too many registrations; retry in {seconds} s"},
                status_code=429,
                headers={"Retry-After": seconds},
            )
        body = await request.body()
        try:
            metadata: Any = json.loads(body) if len(body) <= MAX_REGISTRATION_BYTES else None
        except (ValueError, RecursionError):
            metadata = None
        if not isinstance(metadata, dict):
            return oauth_error(
                "register", "invalid_client_metadata", "the body must be a JSON object of client metadata"
            )
        problem = _registration_problem(metadata, settings.oauth_redirect_hosts)
        if problem is not None:
            return oauth_error("register", *problem)
        name = metadata.get("client_name")
        if isinstance(name, str) and (unfit := validation.text_problem(name)) is not None:
            return oauth_error("register", "invalid_client_metadata", f"client_name {unfit}")
        name = (
            name.strip()[: oauth.MAX_CLIENT_NAME] if isinstance(name, str) and name.strip() else "Unnamed app"
        )
        registered = await oauth.register_client(service.db, name, metadata["redirect_uris"])
        metrics.OAUTH_EVENTS.labels(event="client_registered").inc()
        answer = {
            "client_id": registered.client_id,
            "client_id_issued_at": int(registered.created_at.timestamp()),
            "client_name": registered.client_name,
            "redirect_uris": list(registered.redirect_uris),
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            # Public clients only: PKCE protects the code, and there is no secret to leak.
            "token_endpoint_auth_method": "none",
        }
        return JSONResponse(answer, status_code=201, headers=NO_STORE)

    return router


def _registration_problem(metadata: dict[str, Any], allowed_hosts: list[str]) -> tuple[str, str] | None:
    uris = metadata.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        return "invalid_redirect_uri", "redirect_uris must be a non-empty list of URLs"
    if len(uris) > oauth.MAX_REDIRECT_URIS:
        return "invalid_redirect_uri", f"at most {oauth.MAX_REDIRECT_URIS} redirect_uris"
    for uri in uris:
        problem = oauth.redirect_uri_problem(uri, allowed_hosts)
        if problem is not None:
            return "invalid_redirect_uri", problem
    grants = metadata.get("grant_types", ["authorization_code"])
    if not isinstance(grants, list) or not all(isinstance(g, str) for g in grants):
        return "invalid_client_metadata", "grant_types must be a list of names"
    if "authorization_code" not in grants:
        return "invalid_client_metadata", "grant_types must include authorization_code"
    if not set(grants) <= {"authorization_code", "refresh_token"}:
        return "invalid_client_metadata", "grant_types may be authorization_code and refresh_token only"
    responses = metadata.get("response_types", ["code"])
    if responses != ["code"]:
        return "invalid_client_metadata", 'response_types must be ["code"]'
    return None
