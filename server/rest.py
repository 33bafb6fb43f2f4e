"""REST ``/v1`` for clients that don't speak MCP: the same service, the same rules."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from memory_mcp.store.errors import (
    AccessDenied,
    AuthenticationFailed,
    Conflict,
    DatabaseUnavailable,
    NotFound,
    QuotaExceeded,
    SecretRefused,
    SpaceNotFound,
    StoreError,
    ValidationError,
)
from memory_mcp.store.models import Caller
from pydantic import BaseModel, Field

from memory_mcp import metrics

from .schemas import (
    AddOut,
    DocumentDetailOut,
    DocumentsOut,
    MemoriesOut,
    SearchOut,
    SelectSpaceOut,
    SpacesOut,
    WhoAmIOut,
)
from .service import MemoryService

STATUS: list[tuple[type[StoreError], int]] = [
    (AuthenticationFailed, 401),
    (ValidationError, 422),
    (SecretRefused, 422),
    (SpaceNotFound, 404),
    (NotFound, 404),
    (AccessDenied, 403),
    (QuotaExceeded, 409),
    (Conflict, 409),
    (DatabaseUnavailable, 503),
]


def error_response(exc: StoreError) -> JSONResponse:
    status = next((code for kind, code in STATUS if isinstance(exc, kind)), 400)
    body: dict[str, object] = {"error": exc.__class__.__name__, "message": str(exc)}
    if isinstance(exc, ValidationError):
        body["field"] = exc.field
    headers = {"WWW-Authenticate": 'Bearer realm="memory-mcp"'} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": "1"}
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    async def handle(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StoreError)
        return error_response(exc)

    app.add_exception_handler(StoreError, handle)


class SaveIn(BaseModel):
    content: str = Field(description="The fact to save", max_length=10000)
    category: str | None = Field(default=None, max_length=64)
    containerTag: str | None = Field(default=None, max_length=63)


class ForgetIn(BaseModel):
    content: str = Field(description="The memory (text or id) to forget", max_length=10000)
    containerTag: str | None = Field(default=None, max_length=63)


class SelectIn(BaseModel):
    space: str = Field(max_length=63)


async def authenticated_caller(request: Request) -> Caller:
    """The caller behind ``Authorization: Bearer <key>``; anything else is a 401."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        metrics.AUTH_FAILURES.labels(reason="missing_key").inc()
        raise AuthenticationFailed()
    service: MemoryService = request.app.state.service
    try:
        return await service.authenticate(token.strip())
    except AuthenticationFailed:
        metrics.AUTH_FAILURES.labels(reason="invalid_key").inc()
        raise


# Module-level aliases: FastAPI resolves string annotations against the module's globals.
Auth = Annotated[Caller, Depends(authenticated_caller)]
Tag = Annotated[str | None, Query(max_length=63, description="Space key for this call only")]
PageQ = Annotated[int, Query(ge=1)]
LimitQ = Annotated[int, Query(ge=1, le=50)]


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"])

    @router.get("/whoami", response_model=WhoAmIOut)
    async def whoami(c: Auth) -> WhoAmIOut:
        return await service.who_am_i(c)

    @router.get("/spaces", response_model=SpacesOut)
    async def spaces(c: Auth) -> SpacesOut:
        return await service.list_spaces(c)

    @router.put("/spaces/active", response_model=SelectSpaceOut)
    async def select_space(body: SelectIn, c: Auth) -> SelectSpaceOut:
        return await service.select_space(c, body.space)

    @router.get("/memories", response_model=MemoriesOut)
    async def list_memories(
        c: Auth, page: PageQ = 1, limit: LimitQ = 10, containerTag: Tag = None
    ) -> MemoriesOut:
        return await service.list_memories(c, page, limit, containerTag)

    @router.post("/memories", response_model=AddOut)
    async def save(body: SaveIn, c: Auth) -> AddOut:
        return await service.add(c, body.content, "save", body.category, body.containerTag)

    @router.post("/memories/forget", response_model=AddOut)
    async def forget(body: ForgetIn, c: Auth) -> AddOut:
        return await service.add(c, body.content, "forget", None, body.containerTag)

    @router.get("/search", response_model=SearchOut)
    async def search(
        c: Auth,
        query: Annotated[str | None, Query(max_length=2000)] = None,
        keyword: Annotated[str | None, Query(max_length=200)] = None,
        category: Annotated[str | None, Query(max_length=64)] = None,
        includeProfile: bool = True,
        containerTag: Tag = None,
        limit: LimitQ = 10,
    ) -> SearchOut:
        return await service.search(c, query, keyword, category, includeProfile, containerTag, limit)

    @router.get("/documents", response_model=DocumentsOut)
    async def documents(
        c: Auth, page: PageQ = 1, limit: LimitQ = 10, containerTag: Tag = None
    ) -> DocumentsOut:
        return await service.list_documents(c, page, limit, containerTag)

    @router.get("/documents/{document_id}", response_model=DocumentDetailOut)
    async def document(document_id: str, c: Auth) -> DocumentDetailOut:
        return await service.get_document(c, document_id)

    return router
