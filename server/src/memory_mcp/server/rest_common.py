"""What every REST router shares: the JSON error shape and its handlers, the caller behind the
bearer key, and the annotated parameter types (``Auth``, ``Tag``, ``Storable``...)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_mcp.core import metrics
from memory_mcp.store import validation
from memory_mcp.store.errors import (
    AccessDenied,
    AuthenticationFailed,
    Conflict,
    DatabaseSetupError,
    DatabaseUnavailable,
    ImportOverBudget,
    IssuerUnavailable,
    NotFound,
    QuotaExceeded,
    RateLimited,
    SecretRefused,
    SpaceNotFound,
    StoreError,
    ValidationError,
)
from memory_mcp.store.models import Caller

from . import bearer
from .service import MemoryService

log = logging.getLogger(__name__)

STATUS: list[tuple[type[StoreError], int]] = [
    (AuthenticationFailed, 401),
    (ValidationError, 422),
    (SecretRefused, 422),
    (SpaceNotFound, 404),
    (NotFound, 404),
    (AccessDenied, 403),
    (QuotaExceeded, 409),
    (ImportOverBudget, 413),
    (RateLimited, 429),
    (Conflict, 409),
    (DatabaseUnavailable, 503),
    (IssuerUnavailable, 503),
    (DatabaseSetupError, 503),
]

# The ``error`` of the framework's own statuses; store errors carry their class name instead.
HTTP_ERRORS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "ContentTooLarge",
    415: "UnsupportedMediaType",
    422: "ValidationError",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ErrorResponse(JSONResponse):
    """``{"error", "message", "field"}``: the one shape of every REST error, whoever raised it.

    Written as ASCII: were a fragment of the request ever in a message, a lone surrogate in it
    would fail UTF-8 encoding and turn the 4xx into a 500.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error: str | None = None,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        body = {"error": error or HTTP_ERRORS.get(status, "Error"), "message": message, "field": field}
        super().__init__(body, status_code=status, headers=headers)

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(exc: StoreError) -> ErrorResponse:
    status = next((code for kind, code in STATUS if isinstance(exc, kind)), None)
    if status is None:
        log.error("store error without an HTTP status: %s", exc)
        return internal_error_response()
    headers = {"WWW-Authenticate": 'Bearer realm="memory-mcp"'} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": "1"}
    if isinstance(exc, (RateLimited, IssuerUnavailable)):
        headers = {"Retry-After": str(exc.retry_after)}
    field = exc.field if isinstance(exc, (ValidationError, SecretRefused)) else None
    return ErrorResponse(status, str(exc), error=exc.__class__.__name__, field=field, headers=headers)


def internal_error_response() -> ErrorResponse:
    """The last resort: no detail for the client; the server's log has the traceback."""
    return ErrorResponse(500, "internal error")


# pydantic's error types in the words of the store's own messages, so both read alike.
_PROBLEMS = {
    "missing": "is required",
    "string_type": "must be a string",
    "string_unicode": "must be valid Unicode text",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "json_invalid": "must be valid JSON",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "extra_forbidden": "is not allowed",
}
_BOUNDS = {
    "string_too_long": ("max_length", "must be at most {} characters"),
    "string_too_short": ("min_length", "must be at least {} characters"),
    "less_than_equal": ("le", "must be at most {}"),
    "greater_than_equal": ("ge", "must be at least {}"),
    "less_than": ("lt", "must be less than {}"),
    "greater_than": ("gt", "must be greater than {}"),
    "literal_error": ("expected", "must be {}"),
}
_PARAM_SOURCES = ("body", "query", "path", "header", "cookie")


def _field_name(loc: Sequence[str | int]) -> str | None:
    parts = list(loc[1:] if loc and loc[0] in _PARAM_SOURCES else loc)
    if not parts or not isinstance(parts[0], str):
        return str(loc[0]) if loc else None  # the body as a whole (missing, or not JSON)
    name = parts[0]
    for part in parts[1:]:
        name += f"[{part}]" if isinstance(part, int) else f".{part}"
    return name


def _problem(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind in _PROBLEMS:
        return _PROBLEMS[kind]
    ctx = error.get("ctx") or {}
    if kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        key, template = _BOUNDS[kind]
        return template.format(ctx[key])
    message = str(error.get("msg", "is not valid"))
    return message.removeprefix("Value error, ").replace("Input should be", "must be")


def validation_error_response(exc: RequestValidationError) -> ErrorResponse:
    """422 naming the first field at fault; the input and pydantic's context never go back."""
    errors = exc.errors()
    first: Mapping[str, Any] = errors[0] if errors else {}
    field = _field_name(first.get("loc", ()))
    message = f"{field}: {_problem(first)}" if field else _problem(first)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return ErrorResponse(422, message, error="ValidationError", field=field)


def http_error_response(request: Request, exc: StarletteHTTPException) -> ErrorResponse:
    """The framework's statuses (unknown path, wrong method, unreadable body) in the same shape."""
    status = exc.status_code
    headers = dict(exc.headers or {})
    if status == 404:
        message = "not found"
    elif status == 405:
        message = f"method {request.method} not allowed; allowed: {headers.get('Allow', 'none')}"
    elif isinstance(exc.detail, str) and exc.detail:
        message = exc.detail
    else:
        message = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
    return ErrorResponse(status, message, headers=headers or None)


def install_error_handlers(app: FastAPI) -> None:
    async def store_error(_: Request, exc: Exception) -> ErrorResponse:
        assert isinstance(exc, StoreError)
        return error_response(exc)

    async def invalid_request(_: Request, exc: Exception) -> ErrorResponse:
        assert isinstance(exc, RequestValidationError)
        return validation_error_response(exc)

    async def http_error(request: Request, exc: Exception) -> ErrorResponse:
        assert isinstance(exc, StarletteHTTPException)
        return http_error_response(request, exc)

    app.add_exception_handler(StoreError, store_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)


def _storable(value: str | None) -> str | None:
    """Text PostgreSQL and UTF-8 can take (no NUL, control characters or lone surrogates), else a 422."""
    if value is not None and (problem := validation.text_problem(value)) is not None:
        raise PydanticCustomError("unfit_text", problem)
    return value


def _memory_text(value: str) -> str:
    """The store's own check of a memory's text: what it would refuse never reaches the embedder."""
    try:
        return validation.content(value)
    except ValidationError as exc:
        raise PydanticCustomError("memory_text", exc.message) from None


def _document_text(value: str) -> str:
    try:
        return validation.document_text(value)
    except ValidationError as exc:
        raise PydanticCustomError("memory_text", exc.message) from None


Storable = AfterValidator(_storable)
MemoryText = AfterValidator(_memory_text)
DocumentText = AfterValidator(_document_text)
SpaceKey = Annotated[str, Field(max_length=validation.MAX_SPACE_KEY), Storable]
OptionalSpaceKey = Annotated[str | None, Field(max_length=validation.MAX_SPACE_KEY), Storable]


# Declares the scheme in OpenAPI (so the Authorize button of /docs sends the key); the check is below.
_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="mmk_... or JWT",
    description="A Memory-MCP API key (`Authorization: Bearer mmk_...`) or an OAuth access token.",
)


async def authenticated_caller(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None
) -> Caller:
    """The caller behind ``Authorization: Bearer <key or access token>``; anything else is a 401."""
    service: MemoryService = request.app.state.service
    try:
        return await service.authenticate(
            bearer.presented(request.scope).token, bearer.Resource.of(request.scope, service.settings)
        )
    except AuthenticationFailed as exc:
        metrics.AUTH_FAILURES.labels(reason=exc.reason).inc()
        raise


# Module-level aliases: FastAPI resolves string annotations against the module's globals.
Auth = Annotated[Caller, Depends(authenticated_caller)]
Tag = Annotated[
    str | None,
    Query(max_length=validation.MAX_SPACE_KEY, description="Space key for this call only"),
    Storable,
]
PageQ = Annotated[int, Query(ge=1, le=validation.MAX_PAGE)]
LimitQ = Annotated[int, Query(ge=1, le=validation.MAX_LIMIT)]
QueryText = Annotated[str | None, Query(max_length=validation.MAX_QUERY), Storable]
KeywordText = Annotated[str | None, Query(max_length=validation.MAX_KEYWORD), Storable]
CategoryText = Annotated[str | None, Query(max_length=validation.MAX_CATEGORY), Storable]
