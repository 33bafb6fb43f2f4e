"""One MCP tool call: the verified caller, typed store errors as clear messages, metrics.

Shared by every module that registers tools (``mcp_tools``, ``mcp_apps``, ``mcp_documents``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from memory_mcp.core import metrics
from memory_mcp.store import validation
from memory_mcp.store.errors import AuthenticationFailed, StoreError
from memory_mcp.store.models import Caller

from .service import MemoryService

M = TypeVar("M", bound=BaseModel)

# The caller verified for this request; set by the token verifier, read by every tool.
_current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)

ContainerTag = Annotated[
    str | None,
    Field(
        description="Space key, this call only; default: active space",
        max_length=validation.MAX_SPACE_KEY,
    ),
]
Page = Annotated[int, Field(ge=1, le=validation.MAX_PAGE)]
Limit = Annotated[int, Field(ge=1, le=validation.MAX_LIMIT)]


class KeyVerifier:
    """MCP TokenVerifier: the bearer token is a Memory-MCP API key, checked against the database."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            caller = await self.service.authenticate(token)
        except AuthenticationFailed as exc:
            metrics.AUTH_FAILURES.labels(reason=exc.reason).inc()
            return None
        _current_caller.set(caller)
        return AccessToken(
            token=token,
            client_id=caller.key.name,
            subject=str(caller.user.id),
            scopes=["memory"],
        )


async def caller_of(service: MemoryService) -> Caller:
    caller = _current_caller.get()
    if caller is not None:
        return caller
    # The verifier ran in another context (it should not, but never trust a missing identity).
    token = get_access_token()
    if token is None:
        raise ToolError("not authenticated")
    try:
        return await service.authenticate(token.token)
    except AuthenticationFailed as exc:
        raise ToolError(str(exc)) from None


async def call(
    tool: str, service: MemoryService, run: Callable[[Caller], Awaitable[M]], text: Callable[[M], str]
) -> CallToolResult:
    """Run one tool: caller from the verified token, typed errors -> clear messages, metrics."""
    started = time.perf_counter()
    outcome = "error"
    try:
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
