"""Typed errors of the data layer. Edges map them once: MCP -> ToolError, REST -> HTTP status."""

from __future__ import annotations

import math


class StoreError(Exception):
    """Base class: every error the store raises on purpose."""


class ValidationError(StoreError):
    """Bad input; ``field`` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class AuthenticationFailed(StoreError):
    """Missing, unknown, expired or revoked key, or a deactivated user. One message for all cases.

    ``reason`` (``missing_key``, ``malformed_key``, ``unknown_key``, ``wrong_secret``, ``revoked``,
    ``expired``, ``inactive_user``) and ``prefix`` (the key's lookup prefix, when it has one) are for
    logs and metrics only: the caller is told the same thing whatever went wrong.
    """

    def __init__(self, reason: str = "invalid_key", prefix: str | None = None) -> None:
        super().__init__("invalid, expired or revoked API key")
        self.reason = reason
        self.prefix = prefix


class SpaceNotFound(StoreError):
    """The space does not exist *or* the key holds no grant on it: callers can't tell which."""

    def __init__(self, key: str) -> None:
        super().__init__(f"space '{key}' not found")
        self.key = key


class NotFound(StoreError):
    """A document or memory that does not exist in the spaces the caller can read."""

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} '{ident}' not found")
        self.what = what
        self.ident = ident


class AccessDenied(StoreError):
    """The caller can see the space but may not do this there (Reader role or Read grant)."""


class SecretRefused(StoreError):
    """Content looks like a credential and was not stored."""

    def __init__(self, kind: str, label: str, field: str = "content") -> None:
        super().__init__(
            f"refused: the {field} looks like {label}. Memories are shared with everyone in the space; "
            "store a reference to where the secret lives instead of the secret itself"
        )
        self.kind = kind
        self.label = label
        self.field = field


class Conflict(StoreError):
    """The request conflicts with stored state (a name already taken by another object)."""


class DatabaseUnavailable(StoreError):
    """The database cannot be reached or used right now (down, restarting, out of connections).

    Transient by nature: the edges answer 503 with ``Retry-After``; the pool recovers by itself.
    The message never carries the driver's text (it can name hosts and sockets).
    """

    def __init__(self) -> None:
        super().__init__("database unavailable, retry")


class IssuerUnavailable(StoreError):
    """The OpenID provider that issues this server's tokens cannot be reached, and no fresh copy of
    its keys is held, so a token it signed can be judged neither way.

    Transient like :class:`DatabaseUnavailable` (503), with ``retry_after``: the seconds until the
    provider is asked again. Never an authentication failure, which tells a client to drop the
    credential and sign its person out.
    """

    def __init__(self, retry_after: int) -> None:
        super().__init__("the token issuer's keys are unavailable, retry")
        self.retry_after = retry_after


class DatabaseSetupError(StoreError):
    """The database cannot serve Memory-MCP as configured; the message names the fix."""


class EmbeddingWidthMismatch(DatabaseSetupError):
    """The model's vector width differs from the ``memories.embedding`` column."""

    def __init__(self, column_dim: int, model_dim: int) -> None:
        super().__init__(
            f"embedding width mismatch: the database column is halfvec({column_dim}) but the model "
            f"produces {model_dim} dimensions. Use a model with {column_dim} dimensions, or migrate the "
            f"column to {model_dim} and re-embed every memory with `memory-mcp backfill --reembed`"
        )
        self.column_dim = column_dim
        self.model_dim = model_dim


class QuotaExceeded(StoreError):
    """A write would take the space past a quota: ``quota`` names it, ``limit`` and ``used`` say how
    far (the message says the same in words)."""

    def __init__(
        self, message: str, quota: str | None = None, limit: int | None = None, used: int | None = None
    ) -> None:
        super().__init__(message)
        self.quota = quota
        self.limit = limit
        self.used = used


class RateLimited(StoreError):
    """The key spent its request budget (``ApiKey.spec.rateLimit``); retry after ``retry_after`` s."""

    def __init__(self, retry_after: float, requests_per_minute: int) -> None:
        seconds = max(1, math.ceil(retry_after))
        super().__init__(
            f"rate limit of this key reached ({requests_per_minute} requests a minute); retry in {seconds} s"
        )
        self.retry_after = seconds


class UploadTokenRefused(AuthenticationFailed):
    """An upload token that is unknown, spent, expired or bound to another key: one message for all."""

    def __init__(self) -> None:
        super().__init__("upload_token")
        self.args = ("invalid, expired or already used upload token: ask for a new one",)


class ImportOverBudget(StoreError):
    """Reading an export passed its CPU or memory budget (``budget``: ``cpu`` or ``memory``); it
    stopped there and nothing was imported."""

    def __init__(self, budget: str, message: str) -> None:
        super().__init__(message)
        self.budget = budget
