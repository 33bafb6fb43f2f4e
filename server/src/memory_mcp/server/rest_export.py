"""A space to a file and back over REST: ``GET /v1/spaces/{key}/export`` (JSON lines, streamed, with
Read access) and ``POST /v1/spaces/{key}/import`` (a file of any format ``memory-mcp import`` reads,
with the Curate grant)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from memory_mcp.embedder.client import EmbedderUnavailable
from memory_mcp.store import identity, importers, transfer, validation
from memory_mcp.store.access import Role
from memory_mcp.store.documents import file_name as stored_file_name
from memory_mcp.store.errors import AccessDenied, ValidationError
from memory_mcp.store.models import Caller, SpaceContext

from .rest_common import Auth, ErrorResponse
from .schemas import Out
from .service import MemoryService
from .upload_intake import UploadRefused, receive, work_folder

SpaceKeyPath = Annotated[str, Path(max_length=validation.MAX_SPACE_KEY, description="The space's key")]
IMPORT_PATHS = ("/v1/spaces/*/import",)  # the body limit of these is the upload limit
ImportFormat = Literal["jsonl", "chatgpt", "claude", "mem0", "memory-json", "markdown"]


class ImportCostOut(Out):
    readBytes: int = Field(description="Bytes of the export read (inflated, for a zip)")
    peakBytes: int = Field(
        description="The most the reading held at once: its records and the item being read"
    )
    cpuSeconds: float = Field(description="CPU time of the reading")


class ImportOut(Out):
    space: str
    format: str
    dryRun: bool = Field(description="Nothing was written: the counts say what would be")
    imported: int = Field(description="Memories added (or that would be)")
    documents: int = Field(description="Documents added (or that would be)")
    already: int = Field(description="Memories and documents there from an earlier import: not added again")
    skipped: list[str] = Field(description="What was left out and why (never the text itself)")
    cost: ImportCostOut | None = Field(
        default=None,
        description="What reading another tool's export cost, against the server's import budget "
        "(not given for jsonl)",
    )
    message: str


def _upload_type(name: str | None, head: bytes) -> str:
    """Any file: the format's parser decides whether it can read it (422 when it cannot)."""
    return "application/zip" if head.startswith(b"PK\x03\x04") else "application/octet-stream"


_NAME_BYTES = 200  # under the 255 bytes a name may take on common file systems


def _named(path: FilePath, name: str | None) -> FilePath:
    """The received file under its own base name (a single Markdown note's name is its title): the
    name as an upload's is stored (no path, no control characters), cut to what a file system takes."""
    base = (stored_file_name(name) or "").lstrip(".")
    base = base.encode()[:_NAME_BYTES].decode("utf-8", "ignore")
    if not base:
        return path
    target = path.with_name(base)
    path.rename(target)
    return target


def _records(
    fmt: str, path: FilePath, author: Mapping[str, Any], budget: importers.Budget
) -> tuple[list[transfer.Entry], list[Any], importers.Cost | None]:
    """The file's records, written by ``author``, and what reading them cost; a JSONL line that is
    not right is skipped and named."""
    if fmt != "jsonl":
        parsed = importers.parse(fmt, path, author, budget)
        return parsed.entries, list(parsed.skipped), parsed.cost
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValidationError("file", "must be UTF-8 JSON lines (memory-mcp export)") from None
    entries, problems = transfer.check_lines(lines)
    for entry in entries:  # over REST the importing user is the author: no one else is named
        entry.created_by = entry.updated_by = author
    return entries, list(problems), None


def _require_curate(caller: Caller, ctx: SpaceContext) -> None:
    if not ctx.can_curate or caller.user.role is Role.READER:
        raise AccessDenied(
            f"importing into space '{ctx.space.key}' needs the Curate grant there: imported memories "
            "go live without review"
        )


def build_router(service: MemoryService) -> APIRouter:
    """Included by :func:`.rest.build_router`, under its ``/v1``."""
    router = APIRouter(tags=["memory"])

    @router.get(
        "/spaces/{key}/export",
        summary="Export a space as JSON lines",
        description=(
            "Every live memory of the space, one JSON object a line, in the format `memory-mcp import` "
            "reads; with `history=true` also superseded versions, forgotten memories and documents. "
            "Needs Read access; a space without a grant answers 404 like one that does not exist."
        ),
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}}}},
    )
    async def export_space(
        key: SpaceKeyPath,
        c: Auth,
        history: Annotated[bool, Query(description="Include history and documents")] = False,
    ) -> StreamingResponse:
        ctx = identity.resolve_space(c, key, "key")

        async def lines() -> AsyncIterator[str]:
            async for record in transfer.export_records(service.db, ctx.space.id, history):
                yield transfer.jsonl_line(record)

        return StreamingResponse(
            lines(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{ctx.space.key}.jsonl"'},
        )

    @router.post(
        "/spaces/{key}/import",
        summary="Import an export of memory-mcp or of another tool",
        description=(
            "Multipart: the export as the field `file` (a JSON, JSONL or Markdown file, or a zip such as "
            "ChatGPT's export). `from` names its format: `jsonl` (memory-mcp's export), `chatgpt`, "
            "`claude`, `mem0`, `memory-json` (the MCP memory server's memory.json) or `markdown`. "
            "Every text is checked as a save checks it; what is left out is listed in `skipped` with "
            "the reason, never its text. The caller is the author of everything imported; dates are "
            "the export's. A second import of the same file adds nothing. Needs the Curate grant "
            "(imported memories go live without review); a space without a grant answers 404."
        ),
        response_model=ImportOut,
        responses={403: {}, 404: {}, 413: {}, 415: {}, 422: {}, 503: {}},
    )
    async def import_space(
        request: Request,
        key: SpaceKeyPath,
        c: Auth,
        fmt: Annotated[ImportFormat, Query(alias="from", description="The export's format")] = "jsonl",
        dryRun: Annotated[bool, Query(description="Say what would be imported; write nothing")] = False,
    ) -> ImportOut | ErrorResponse:
        ctx = identity.resolve_space(c, key, "key")
        _require_curate(c, ctx)  # before a byte of the file is read
        folder = work_folder(service.settings.data_dir)
        try:
            try:
                received = await receive(
                    request.headers.get("content-type", ""),
                    request.stream(),
                    folder,
                    service.settings.max_upload_bytes,
                    _upload_type,
                )
            except UploadRefused as exc:
                return ErrorResponse(exc.status, str(exc), field=exc.field)
            path = _named(received.path, received.file_name)
            author = {"name": c.user.name, "email": c.user.email}
            budget = service.settings.import_budget()
            # A thread of its own: the reading's CPU budget is that thread's time.
            entries, skipped, cost = await asyncio.to_thread(_records, fmt, path, author, budget)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if dryRun:
            preview = await importers.preview(service.db, ctx.space.id, entries)
            counts = (preview.memory_count, len(preview.documents), preview.already)
        else:
            embed = service.embedder.embed if service.embedder is not None else None
            try:
                report = await transfer.import_entries(
                    service.db,
                    ctx.space.id,
                    ctx.space.key,
                    entries,
                    embed,
                    actor=f"user:{c.user.name}",
                    report=transfer.ImportReport(skipped=skipped),
                )
            except EmbedderUnavailable:
                return ErrorResponse(
                    503,
                    "the embedder is unavailable; what was imported so far stays, send the file again "
                    "later to import the rest",
                )
            counts = (report.imported, report.documents, report.already)
        verb = "would import" if dryRun else "imported"
        return ImportOut(
            space=ctx.space.key,
            format=fmt,
            dryRun=dryRun,
            imported=counts[0],
            documents=counts[1],
            already=counts[2],
            skipped=[str(s) for s in skipped],
            cost=None
            if cost is None
            else ImportCostOut(
                readBytes=cost.read_bytes, peakBytes=cost.peak_bytes, cpuSeconds=cost.cpu_seconds
            ),
            message=(
                f"{verb} {counts[0]} memories and {counts[1]} documents into '{ctx.space.key}'; "
                f"{counts[2]} already there, {len(skipped)} skipped"
            ),
        )

    return router
