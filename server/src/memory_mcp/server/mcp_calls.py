"""One MCP tool call: the verified caller, typed store errors as clear messages, metrics.

Shared by every module that registers tools (``mcp_tools``, ``mcp_apps``, ``mcp_documents``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field
from starlette.authentication import AuthCredentials
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_mcp.core import metrics, tracing
from memory_mcp.store import validation
from memory_mcp.store.errors import AuthenticationFailed, StoreError
from memory_mcp.store.models import Caller
from memory_mcp.store.oauth import SCOPE

from . import bearer
from .rest_common import error_response
from .service import MemoryService

M = TypeVar("M", bound=BaseModel)

ContainerTag = Annotated[
    str | None,
    Field(
        description="Space key, this call only; default: active space",
        max_length=validation.MAX_SPACE_KEY,
    ),
]
# Strict: JSON true is not the number 1 (lax validation took `limit: true` for limit 1).
Page = Annotated[int, Field(ge=1, le=validation.MAX_PAGE, strict=True)]
Limit = Annotated[int, Field(ge=1, le=validation.MAX_LIMIT, strict=True)]


class CallerToken(AccessToken):
    """The SDK's record of a verified bearer, carrying the caller it stands for."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    caller: Caller


class McpAuth:
    """Pure ASGI middleware in front of the MCP app: the request's bearer (an API key or an OAuth
    access token, read by the one parser REST uses too) becomes the verified caller, handed to the
    tools with the SDK's access token; a request without a valid one is answered 401 here, in the
    REST error shape (``bearer.Challenge`` adds the challenge)."""

    def __init__(self, app: ASGIApp, service: MemoryService) -> None:
        self.app = AuthContextMiddleware(app)
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        credential = bearer.presented(scope)
        try:
            caller = await self.service.authenticate(
                credential.token, bearer.Resource.of(scope, self.service.settings)
            )
        except AuthenticationFailed as exc:
            metrics.AUTH_FAILURES.labels(reason=exc.reason).inc()
            await error_response(exc)(scope, receive, send)
            return
        except StoreError as exc:  # the rate limit, the database
            await error_response(exc)(scope, receive, send)
            return
        assert credential.token is not None
        token = CallerToken(
            token=credential.token,
            client_id=caller.key.name,
            subject=str(caller.user.id),
            scopes=[SCOPE],
            caller=caller,
        )
        user = AuthenticatedUser(token)
        await self.app({**scope, "user": user, "auth": AuthCredentials(user.scopes)}, receive, send)


async def caller_of(service: MemoryService) -> Caller:
    """The caller verified for this request (``McpAuth`` ran before any tool)."""
    token = get_access_token()
    if not isinstance(token, CallerToken):
        raise ToolError("not authenticated")
    return token.caller


async def call(
    tool: str, service: MemoryService, run: Callable[[Caller], Awaitable[M]], text: Callable[[M], str]
) -> CallToolResult:
    """Run one tool: caller from the verified token, typed errors -> clear messages, metrics."""
    started = time.perf_counter()
    outcome = "error"
    try:
        with tracing.span(tool):
            result = await run(await caller_of(service))
        outcome = "ok"
        return CallToolResult(
            content=[TextContent(type="text", text=text(result))],
            structured_content=result.model_dump(mode="json", exclude_none=True),
        )
    except StoreError as exc:
        outcome = exc.__class__.__name__
        raise ToolError(str(exc)) from None
    finally:
        metrics.TOOL_CALLS.labels(tool=tool, outcome=outcome).inc()
        metrics.TOOL_DURATION.labels(tool=tool).observe(time.perf_counter() - started)
