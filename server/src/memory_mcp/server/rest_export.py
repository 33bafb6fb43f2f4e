"""``GET /v1/spaces/{key}/export``: a space's memories as JSON lines, streamed, with Read access."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from memory_mcp.store import identity, transfer, validation

from .rest_common import Auth
from .service import MemoryService

SpaceKeyPath = Annotated[str, Path(max_length=validation.MAX_SPACE_KEY, description="The space's key")]


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

    return router
