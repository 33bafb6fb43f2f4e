"""REST for files: upload (with an API key, or with a one-time upload token) and forget a document.

Listing and reading documents are in rest.py beside the other reads. An upload is streamed to a
temporary file under the data dir and refused there (413, 415) before anything is stored; a
stored upload answers 202 with its queued document, the same file again 200 with its document.
"""

from __future__ import annotations

import shutil
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from memory_mcp.store import documents, identity, uploads, validation
from memory_mcp.store.access import Role
from memory_mcp.store.errors import AccessDenied
from memory_mcp.store.memories import require_write
from memory_mcp.store.models import Caller, SpaceContext

from .rest_common import Auth, ErrorResponse, Storable, Tag, authenticated_caller
from .schemas import ForgetDocumentOut, UploadOut
from .service import MemoryService
from .upload_intake import Authorise, Upload, UploadRefused, receive, work_folder

UPLOAD_PATHS = ("/v1/documents", "/v1/uploads")  # the body limit of these is the upload limit
TitleQ = Annotated[str | None, Query(max_length=validation.MAX_NAME), Storable]
CategoryQ = Annotated[str | None, Query(max_length=validation.MAX_CATEGORY), Storable]


def _refuse_readers(caller: Caller) -> None:
    """A Reader can write nowhere: say so before a byte of the file is read."""
    if caller.user.role is Role.READER:
        raise AccessDenied(f"read-only: user '{caller.user.name}' has the Reader role and cannot write")


async def _store(
    request: Request,
    service: MemoryService,
    upload: Upload,
    ctx: SpaceContext,
    title: str | None,
    category: str | None,
) -> JSONResponse:
    assert upload.media_type is not None
    stored = await documents.create_upload(
        service.db,
        ctx,
        upload.path,
        digest=upload.digest,
        size=upload.size,
        media_type=upload.media_type,
        name=upload.file_name,
        title=upload.fields.get("title", title),
        category=upload.fields.get("category", category),
    )
    for worker in getattr(request.app.state, "document_workers", ()):
        worker.wake()
    body = UploadOut.of_upload(stored.document, existing=not stored.created)
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=202 if stored.created else 200
    )


async def _receive(request: Request, service: MemoryService, authorise: Authorise | None = None) -> Upload:
    folder = work_folder(service.settings.data_dir)
    try:
        return await receive(
            request.headers.get("content-type", ""),
            request.stream(),
            folder,
            service.settings.max_upload_bytes,
            authorise=authorise,
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _refusal(exc: UploadRefused) -> ErrorResponse:
    return ErrorResponse(exc.status, str(exc), field=exc.field)


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(tags=["documents"])

    @router.post(
        "/documents",
        status_code=202,
        response_model=UploadOut,
        response_model_exclude_none=True,
        responses={200: {"model": UploadOut}, 413: {}, 415: {}},
    )
    async def upload(
        request: Request,
        c: Auth,
        containerTag: Tag = None,
        title: TitleQ = None,
        category: CategoryQ = None,
    ) -> JSONResponse:
        """Upload a file (multipart field ``file``; ``containerTag``, ``title``, ``category`` as form
        fields or query parameters). Extraction runs in the background: poll GET /v1/documents/{id}."""
        _refuse_readers(c)
        if containerTag:  # known before the body: refuse a space that is not writable before reading
            require_write(identity.resolve_space(c, containerTag))
        try:
            received = await _receive(request, service)
        except UploadRefused as exc:
            return _refusal(exc)
        try:
            tag = received.fields.get("containerTag") or containerTag
            ctx = identity.resolve_space(c, tag)
            require_write(ctx)
            return await _store(request, service, received, ctx, title, category)
        finally:
            shutil.rmtree(received.path.parent, ignore_errors=True)

    async def _token_upload(request: Request, token: str | None) -> JSONResponse:
        # The credential comes first: a key in the header and a token in the URL are checked before
        # the body is read, a token in the form as soon as the file part begins (it must come before
        # the file); each costs a request of the bound key's rate limit. Spent after the upload.
        presenter = await authenticated_caller(request) if request.headers.get("authorization") else None
        if token:
            await service.check_upload_token(token, presenter)

        async def authorise(fields: dict[str, str]) -> None:
            if token:
                return
            if not fields.get("uploadToken"):
                raise UploadRefused(
                    401,
                    "uploadToken: send the upload token before the file, or in the upload URL",
                    "uploadToken",
                )
            await service.check_upload_token(fields["uploadToken"], presenter)

        try:
            received = await _receive(request, service, authorise)
        except UploadRefused as exc:
            return _refusal(exc)
        try:
            ctx = await uploads.consume_upload_token(
                service.db, token or received.fields.get("uploadToken", ""), presenter
            )
            return await _store(request, service, received, ctx, None, None)
        finally:
            shutil.rmtree(received.path.parent, ignore_errors=True)

    @router.post("/uploads", status_code=202, response_model=UploadOut, responses={200: {"model": UploadOut}})
    async def upload_with_token(request: Request) -> JSONResponse:
        """The upload URL of ``prepare-file-upload``: the file plus the form field ``uploadToken``."""
        return await _token_upload(request, None)

    @router.post(
        "/uploads/{token}", status_code=202, response_model=UploadOut, responses={200: {"model": UploadOut}}
    )
    async def upload_with_token_in_url(token: str, request: Request) -> JSONResponse:
        """As /v1/uploads, with the token in the URL instead of the form."""
        return await _token_upload(request, token)

    @router.post(
        "/documents/{document_id}/forget", response_model=ForgetDocumentOut, response_model_exclude_none=True
    )
    async def forget(document_id: str, c: Auth) -> ForgetDocumentOut:
        """Forget a document and every memory taken from it (history is kept; audited)."""
        return await service.forget_document(c, document_id)

    return router
