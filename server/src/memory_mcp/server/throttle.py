"""Throttling of failed authentications, per client address and per key prefix, for REST and MCP.

Keys carry 256 random bits, so this is not what stops guessing; it stops a misbehaving or hostile
client from hammering the key lookup and filling the log, and tells it to back off (429 with
Retry-After). It never refuses a valid key: every request is still authenticated as usual, and
only a failure is answered 429 instead of 401 once its address or its key prefix is over the
limit. A request without any credential is not counted (see ``AuthThrottle._failed``). Colleagues behind one address, or the owner of a prefix someone is guessing at, keep working.

The counts live in this process's memory, bounded and expiring. That is enough for the purpose:
with several server pods each counts on its own, so a client gets at most the limit times the
number of pods before every pod throttles it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp.store import keys

from .bearer import OAUTH_BACK_CHANNEL, PROTECTED_PREFIXES, presented
from .rest_common import ErrorResponse

log = logging.getLogger(__name__)

MAX_TRACKED = 10_000  # addresses, and separately prefixes; the least recently failing go first
# Set in a request's scope by a route that refused a credential without answering 401: ``/revoke``
# answers 200 to any token (RFC 7009 §2.2), ``/token`` 400 to a guessed code or refresh token.
FAILED = "memory_mcp.credential_refused"


def count_failure(scope: Scope) -> None:
    """Count this request as a failed authentication, as a 401 is (and throttle it past the limit)."""
    scope[FAILED] = True


class FailureCounts:
    """Failures per key in fixed windows of ``window_s`` seconds, for at most ``max_keys`` keys."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        max_keys: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def add(self, key: str) -> tuple[int, float]:
        """Count one failure of ``key``: (failures in its current window, seconds left in it)."""
        now = self.clock()
        started, count = self._windows.pop(key, (now, 0))
        if now - started >= self.window_s:
            started, count = now, 0
        self._windows[key] = (started, count + 1)
        while len(self._windows) > self.max_keys:
            self._windows.popitem(last=False)
        return count + 1, started + self.window_s - now


def presented_prefix(scope: Scope) -> str | None:
    """The lookup prefix of the bearer key a request presents, if it is shaped like one of ours."""
    token = presented(scope).token
    return keys.prefix_of(token) if token is not None else None


class AuthThrottle:
    """Pure ASGI middleware: past the limit, a failed authentication (a 401) is answered 429."""

    def __init__(self, app: ASGIApp, limit: int, window_s: float, max_keys: int = MAX_TRACKED) -> None:
        self.app = app
        self.by_address = FailureCounts(limit, window_s, max_keys)
        self.by_prefix = FailureCounts(limit, window_s, max_keys)

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
                retry_after = self._failed(scope)
                if retry_after is not None:
                    replaced = True
                    await _too_many(retry_after, scope.get("path", ""))(scope, receive, send)
                    return
            await send(message)

        await self.app(scope, receive, send_wrapper)

    def _failed(self, scope: Scope) -> float | None:
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
        checks = [("address", client[0] if client else "unknown", self.by_address)]
        prefix = presented_prefix(scope)
        if prefix is not None:
            checks.append(("key_prefix", prefix, self.by_prefix))
        waits = []
        for what, who, counts in checks:
            count, left = counts.add(who)
            if count > counts.limit:
                waits.append(left)
                if count == counts.limit + 1:  # once per window, not for every refused request
                    log.warning(
                        "failed authentications over the limit, answering 429 by %s",
                        what,
                        extra={"fields": {"throttled_by": what, what: who, "limit": counts.limit}},
                    )
        return max(waits, default=None)


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
