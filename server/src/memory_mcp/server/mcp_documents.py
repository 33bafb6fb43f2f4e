"""MCP for files: the app-only ``prepare-file-upload`` tool (a tool call cannot carry a file).

The upload widget asks for a one-time token and URL, then POSTs the file there itself. The token
logic is in store.uploads; this adapter only builds the URL.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from memory_mcp.core import local_origin
from memory_mcp.store import validation

from . import mcp_calls
from .schemas import UploadTokenOut
from .service import MemoryService

UPLOAD_PATH = "/v1/uploads"


def upload_base(service: MemoryService, ctx: Context[Any, Any] | None) -> str:
    """The server's public origin: the ``public_url`` setting, else the address this request came to."""
    if service.settings.public_url:
        return service.settings.public_url.rstrip("/")
    request = ctx.request_context.request if ctx is not None else None
    base_url = getattr(request, "base_url", None)
    if base_url is not None:
        return str(base_url).rstrip("/")
    return local_origin(service.settings.host, service.settings.port)


def upload_text(out: UploadTokenOut) -> str:
    return (
        f"POST the file as multipart/form-data (field 'file', plus 'uploadToken') to {out.uploadUrl} "
        f"before {out.expiresAt:%H:%M:%S} UTC; the token works once."
    )


def register(mcp: MCPServer, service: MemoryService) -> None:
    @mcp.tool(
        name="prepare-file-upload",
        title="Prepare a file upload",
        description="For the upload widget: a one-time upload URL and token (valid at most 5 minutes).",
        # Mints a short-lived, single-use token: nothing existing changes, each call mints another.
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
        meta={"ui": {"visibility": ["app"]}},
    )
    async def prepare_file_upload(
        ctx: Context,
        containerTag: Annotated[
            str | None,
            Field(
                description="Space to upload into; default: the active space",
                max_length=validation.MAX_SPACE_KEY,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, UploadTokenOut]:
        base = upload_base(service, ctx)
        return await mcp_calls.call(
            "prepare-file-upload",
            service,
            lambda c: service.prepare_upload(c, containerTag, base + UPLOAD_PATH),
            upload_text,
        )
