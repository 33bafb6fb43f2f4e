"""Cross-origin answers for the one-time upload URLs, which widgets post files to.

A widget runs in the host's sandboxed iframe, whose origin is the host's (or ``null``), never the
server's. Its multipart POST to ``/v1/uploads`` is a cross-origin request: without these headers
the browser sends the file but hides the answer, so the widget never learns the document's id.
Any origin may read the answer: the request is authorised by its single-use token alone, never by
cookies or other ambient credentials, so this opens nothing a token holder could not do anyway.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

UPLOAD_PREFIX = "/v1/uploads"
_HEADERS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"POST, OPTIONS"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-max-age", b"600"),
]


class UploadCors:
    """ASGI middleware: CORS headers on the upload URLs, and their preflight answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == UPLOAD_PREFIX or path.startswith(UPLOAD_PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            await send({"type": "http.response.start", "status": 204, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_cors)
