"""Throttling of failed authentications, per client address and per key prefix, for REST and MCP.

Keys carry 256 random bits, so this is not what stops guessing; it stops a misbehaving or hostile
client from hammering the key lookup and filling the log, and tells it to back off (429 with
Retry-After). It never refuses a valid key: every request is still authenticated as usual, and
only a failure is answered 429 instead of 401 once its address or its key prefix is over the
limit. A request without any credential is not counted (see ``AuthThrottle._failed``).
Colleagues behind one address, or the owner of a prefix someone is guessing at, keep working.

The counts live in PostgreSQL (``store.auth_failures``), so the limit holds for the deployment as a
whole: failures spread over several server pods are refused at the limit in total. Only a failure
costs a statement; a request that authenticates costs nothing here, and a client already over the
limit is refused from this process's note of it until its window ends, without a statement.
While the database cannot be reached, each process counts on its own rather than fail a request.
"""

from __future__ import annotations

import logging
import math

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp.store import keys
from memory_mcp.store.auth_failures import SharedFailureCounts, Subject
from memory_mcp.store.db import Database

from .bearer import OAUTH_BACK_CHANNEL, PROTECTED_PREFIXES, presented
from .rest_common import ErrorResponse

log = logging.getLogger(__name__)

# Set in a request's scope by a route that refused a credential without answering 401: ``/revoke``
# answers 200 to any token (RFC 7009 §2.2), ``/token`` 400 to a guessed code or refresh token.
FAILED = "memory_mcp.credential_refused"


def count_failure(scope: Scope) -> None:
    """Count this request as a failed authentication, as a 401 is (and throttle it past the limit)."""
    scope[FAILED] = True


def presented_prefix(scope: Scope) -> str | None:
    """The lookup prefix of the bearer key a request presents, if it is shaped like one of ours."""
    token = presented(scope).token
    return keys.prefix_of(token) if token is not None else None


class AuthThrottle:
    """Pure ASGI middleware: past the limit, a failed authentication (a 401) is answered 429."""

    def __init__(self, app: ASGIApp, db: Database, limit: int, window_s: float) -> None:
        self.app = app
        self.counts = SharedFailureCounts(db, limit, window_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def send_wrapper(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the body of the 401 that the 429 replaced
            if message["type"] == "http.response.start" and (message["status"] == 401 or scope.get(FAILED)):
                retry_after = await self._failed(scope)
                if retry_after is not None:
                    replaced = True
                    await _too_many(retry_after, scope.get("path", ""))(scope, receive, send)
                    return
            await send(message)

        await self.app(scope, receive, send_wrapper)

    async def _failed(self, scope: Scope) -> float | None:
        """Count a failure; the seconds to wait when its address or key prefix is over the limit.

        A request to ``/mcp`` or ``/v1`` that sent no credential at all is not a failed
        authentication: it is how an OAuth client discovers where to sign in (the 401's challenge).
        It is neither counted nor throttled, so discovery never spends the budget of the callers
        behind the same address, and always gets its challenge. (A wrong key typed into the
        sign-in page is counted: that page's 401 comes with no Authorization header.)
        """
        if scope.get("path", "").startswith(PROTECTED_PREFIXES) and not presented(scope).sent:
            return None
        client = scope.get("client")
        subjects: list[Subject] = [("address", client[0] if client else "unknown")]
        prefix = presented_prefix(scope)
        if prefix is not None:
            subjects.append(("key_prefix", prefix))
        over = await self.counts.add(subjects)
        if over is None:
            return None
        for what, who in over.newly_over:  # once per window, not for every refused request
            log.warning(
                "failed authentications over the limit, answering 429 by %s",
                what,
                extra={"fields": {"throttled_by": what, what: who, "limit": self.counts.limit}},
            )
        return over.retry_after_s


def _too_many(retry_after: float, path: str) -> Response:
    """The 429, in the shape the caller reads: RFC 6749 JSON on the OAuth back channel (OAuth
    libraries parse ``error``), the REST error object everywhere else."""
    seconds = max(1, math.ceil(retry_after))
    message = f"too many failed authentications from this client or for this key; retry in {seconds} s"
    headers = {"Retry-After": str(seconds)}
    if path in OAUTH_BACK_CHANNEL:
        return JSONResponse(
            {"error": "slow_down", "error_description": message},
            status_code=429,
            headers={**headers, "Cache-Control": "no-store"},
        )
    return ErrorResponse(429, message, headers=headers)
