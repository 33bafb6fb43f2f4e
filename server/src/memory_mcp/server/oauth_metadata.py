"""Where OAuth clients find this server: protected resource metadata (RFC 9728), authorization
server metadata (RFC 8414) and the public signing keys (JWKS); and the one call that installs
every OAuth route."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from memory_mcp.store import oauth

from . import oauth_authorize, oauth_token
from .bearer import MCP_PATH, PRM_PATH, Resource
from .service import MemoryService

# Metadata changes only with a deployment; clients may cache it a little.
CACHE = {"Cache-Control": "public, max-age=300"}


def protected_resource(resource: Resource, identifier: str, issuer: str | None = None) -> dict[str, Any]:
    """``issuer``: an external OpenID provider's, named instead of this server's own."""
    return {
        "resource": identifier,
        "authorization_servers": [issuer or resource.issuer],
        "scopes_supported": [oauth.SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": "Memory-MCP",
    }


def authorization_server(resource: Resource) -> dict[str, Any]:
    origin = resource.origin
    return {
        "issuer": resource.issuer,
        "authorization_endpoint": f"{origin}/authorize",
        "token_endpoint": f"{origin}/token",
        "registration_endpoint": f"{origin}/register",
        "revocation_endpoint": f"{origin}/revoke",
        "jwks_uri": f"{origin}/.well-known/jwks.json",
        "scopes_supported": [oauth.SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": True,
    }


def resource_router(service: MemoryService) -> APIRouter:
    """The protected resource metadata (RFC 9728), naming the authorization server that issues
    tokens for this server: the built-in one, or the external provider of ``oauth_issuer``."""
    router = APIRouter(include_in_schema=False)
    settings = service.settings

    @router.get(PRM_PATH + MCP_PATH)
    async def mcp_resource_metadata(request: Request) -> JSONResponse:
        resource = Resource.of(request.scope, settings)
        return JSONResponse(protected_resource(resource, resource.mcp, settings.oauth_issuer), headers=CACHE)

    @router.get(PRM_PATH)
    async def resource_metadata(request: Request) -> JSONResponse:
        resource = Resource.of(request.scope, settings)
        return JSONResponse(
            protected_resource(resource, resource.origin, settings.oauth_issuer), headers=CACHE
        )

    return router


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    settings = service.settings

    @router.get("/.well-known/oauth-authorization-server")
    async def server_metadata(request: Request) -> JSONResponse:
        return JSONResponse(authorization_server(Resource.of(request.scope, settings)), headers=CACHE)

    @router.get("/.well-known/jwks.json")
    async def jwks() -> JSONResponse:
        return JSONResponse({"keys": await service.oauth_keys.all_public(service.db)}, headers=CACHE)

    return router


def install_oauth(app: FastAPI, service: MemoryService) -> None:
    """The built-in authorization server and its metadata, served by this same process; with an
    external provider (``oauth_issuer``), the resource metadata alone."""
    app.include_router(resource_router(service))
    if service.settings.oauth_issuer:
        return
    app.include_router(build_router(service))
    app.include_router(oauth_authorize.build_router(service))
    app.include_router(oauth_token.build_router(service))
