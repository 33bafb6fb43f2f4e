"""The JSON-RPC envelope of a POST to /mcp, checked once for every protocol version.

The 2026-07-28 entry of the SDK answers a body that is not JSON with -32700 and a batch or a
malformed message with -32600, in a few plain words. The handshake-era entry answered both with
-32602 and pydantic's report: the rejected input repeated and a link to pydantic's site. Here both
eras get the first answer, before the SDK reads the body.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import INVALID_REQUEST, PARSE_ERROR, JSONRPCMessage
from pydantic import TypeAdapter, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_MESSAGE: TypeAdapter[Any] = TypeAdapter(JSONRPCMessage)
NOT_ONE_MESSAGE = "Body must be a single JSON-RPC request or notification object"


def envelope_error(body: bytes) -> tuple[int, str] | None:
    """The JSON-RPC error (code, message) for a body that is not one JSON-RPC message, else None."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):  # oversized integers raise ValueError, deep nesting RecursionError
        return PARSE_ERROR, "Parse error"
    if not isinstance(decoded, dict):
        return INVALID_REQUEST, NOT_ONE_MESSAGE  # a batch, or a bare value
    try:
        _MESSAGE.validate_python(decoded)
    except ValidationError:
        return INVALID_REQUEST, NOT_ONE_MESSAGE
    return None


class JsonRpcEnvelope:
    """Pure ASGI middleware for the MCP endpoint, inside its authentication: an authenticated POST
    whose body is not one JSON-RPC message answers 400 with its error (``id: null``); any other
    request is handed on, its body read once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        authenticated = getattr(scope.get("user"), "is_authenticated", False)
        if scope["type"] != "http" or scope["method"] != "POST" or not authenticated:
            await self.app(scope, receive, send)  # the SDK answers an unauthenticated request 401
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body arrived
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        error = envelope_error(body)
        if error is not None:
            code, text = error
            answer = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}
            await JSONResponse(answer, status_code=400)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
