"""The bearer credential of a request, read the same way for REST and MCP, and the addresses that
describe this server as an OAuth protected resource: its origin, issuer, audiences and the
``WWW-Authenticate`` challenge every 401 of ``/mcp`` and ``/v1`` carries (RFC 6750, RFC 9728).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp.core.settings import Settings
from memory_mcp.store import oauth

# RFC 6750 §2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# What a Host header may hold before it goes into a URL and a header of the answer.
_HOST = re.compile(r"(?:[A-Za-z0-9\-.]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
MCP_PATH = "/mcp"
PRM_PATH = "/.well-known/oauth-protected-resource"
PROTECTED_PREFIXES = (MCP_PATH, "/v1/")
# The OAuth back channel, whose every answer (errors and throttling included) is RFC 6749 JSON.
TOKEN_PATH, REVOKE_PATH, REGISTER_PATH = "/token", "/revoke", "/register"
OAUTH_BACK_CHANNEL = (TOKEN_PATH, REVOKE_PATH, REGISTER_PATH)


@dataclass(frozen=True)
class Presented:
    """What the ``Authorization`` header holds: a well-formed bearer token, or nothing usable."""

    token: str | None
    sent: bool  # a credential was sent at all (a 401 then says error="invalid_token")


def parse_authorization(header: str | None) -> Presented:
    """``Bearer`` (any case), exactly one space, one token68, nothing after it: RFC 6750's form and
    the only one accepted. ``Bearer  key`` (two spaces), a trailing space or another scheme is a
    credential sent but malformed, refused alike by REST and MCP."""
    if header is None:
        return Presented(None, False)
    scheme, sep, token = header.partition(" ")
    if sep and scheme.lower() == "bearer" and _TOKEN68.fullmatch(token):
        return Presented(token, True)
    return Presented(None, True)


def presented(scope: Scope) -> Presented:
    return parse_authorization(Headers(scope=scope).get("authorization"))


def origin_of(scope: Scope, settings: Settings) -> str:
    """This server's public origin: the ``public_url`` setting, else the address this request came
    to (a laptop, where the client's URL is the server's own)."""
    if settings.public_url:
        return settings.public_url
    host = Headers(scope=scope).get("host", "")
    if not _HOST.fullmatch(host):
        bound = settings.host if ":" not in settings.host else f"[{settings.host}]"
        host = f"{bound}:{settings.port}"
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    return f"{scheme}://{host.lower()}"


@dataclass(frozen=True)
class Resource:
    """This server as a resource server, for one request: who issues its tokens, which audiences a
    token presented on this path may name, and where its metadata is."""

    origin: str
    path: str

    @classmethod
    def of(cls, scope: Scope, settings: Settings) -> Resource:
        return cls(origin_of(scope, settings), scope.get("path", ""))

    @property
    def issuer(self) -> str:
        # The trailing slash is the form clients compare against (RFC 8414's issuer, RFC 9207's iss,
        # rendered as URL parsers render an origin), so it is the one form used everywhere.
        return self.origin + "/"

    @property
    def mcp(self) -> str:
        """The canonical URL of ``/mcp``: the audience a token for MCP names."""
        return self.origin + MCP_PATH

    @property
    def audiences(self) -> tuple[str, ...]:
        """``/mcp`` takes tokens for itself only; the REST API, the same server, takes those and
        tokens for the server as a whole."""
        if self.path == MCP_PATH or self.path.startswith(MCP_PATH + "/"):
            return (self.mcp,)
        return (self.mcp, self.origin)

    @property
    def metadata_url(self) -> str:
        if self.path == MCP_PATH or self.path.startswith(MCP_PATH + "/"):
            return self.origin + PRM_PATH + MCP_PATH
        return self.origin + PRM_PATH


def challenge(scope: Scope, settings: Settings) -> str:
    """RFC 6750 §3 / RFC 9728 §5.1: where the resource metadata is, the scope needed, and
    ``error="invalid_token"`` only when a credential was sent."""
    parts = []
    if presented(scope).sent:
        parts.append('error="invalid_token"')
    if settings.oauth_enabled or settings.oauth_issuer:
        parts.append(f'resource_metadata="{Resource.of(scope, settings).metadata_url}"')
        parts.append(f'scope="{oauth.SCOPE}"')
    else:
        parts.append('realm="memory-mcp"')
    return "Bearer " + ", ".join(parts)


class Challenge:
    """Pure ASGI middleware: every 401 of ``/mcp`` and ``/v1`` leaves with the one challenge.

    The header list of the response is copied, never changed in place: a library may hand the same
    list to many responses.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == MCP_PATH or path.startswith(PROTECTED_PREFIXES)):
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"www-authenticate"]
                headers.append((b"www-authenticate", challenge(scope, self.settings).encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapper)
