"""REST for curators: accept or reject what was proposed in a Review space.

People curate here and on the command line; no MCP tool accepts or rejects. Proposals are listed
by ``GET /v1/memories?status=proposed``. The space is the request's ``containerTag``, else the
key's active or default space, as for every other route.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, Field

from memory_mcp.core import metrics
from memory_mcp.store import identity, review
from memory_mcp.store.models import Caller

from .rest_common import Auth, Storable, Tag
from .schemas import MemoryOut, Out
from .service import MemoryService


class RejectIn(BaseModel):
    reason: Annotated[str | None, Field(max_length=review.MAX_REASON), Storable] = None


class ReviewOut(Out):
    space: str
    proposal: Literal["save", "forget"] = Field(description="What was decided: a proposed save or forget")
    decision: Literal["accepted", "rejected"]
    already: bool = Field(description="Decided so before: nothing changed")
    message: str
    memory: MemoryOut


MemoryId = Annotated[str, Path(max_length=64, description="Memory id or short id")]


def _message(result: review.ReviewResult, space: str) -> str:
    if result.already:
        return f"Nothing changed: the proposed {result.proposal} was {result.decision} already in space '{space}'."
    if result.proposal == "forget":
        if result.decision == "accepted":
            return f"Forget accepted in space '{space}': the memory is forgotten (history is kept)."
        return f"Forget rejected in space '{space}': the memory stays live."
    if result.decision == "accepted":
        return f"Accepted in space '{space}': the memory is live and searchable."
    return f"Rejected in space '{space}': the memory is kept as rejected history."


async def decide(
    service: MemoryService,
    caller: Caller,
    memory_id: str,
    decision: review.Decision,
    reason: str | None,
    container_tag: str | None,
) -> ReviewOut:
    ctx = identity.resolve_space(caller, container_tag)
    result = await review.decide(service.db, ctx, memory_id, decision, reason)
    if not result.already:
        metrics.PROPOSALS.labels(proposal=result.proposal, state=decision).inc()
        if result.waited_s is not None:
            metrics.REVIEW_LATENCY.labels(decision=decision).observe(result.waited_s)
    return ReviewOut(
        space=ctx.space.key,
        proposal=result.proposal,
        decision=decision,
        already=result.already,
        message=_message(result, ctx.space.key),
        memory=MemoryOut.of(result.memory),
    )


def build_router(service: MemoryService) -> APIRouter:
    router = APIRouter(tags=["review"])

    @router.post("/memories/{memory_id}/accept", response_model=ReviewOut, response_model_exclude_none=True)
    async def accept(memory_id: MemoryId, c: Auth, containerTag: Tag = None) -> ReviewOut:
        """Accept the proposal on a memory (Curate grant): a proposed save goes live, a proposed
        forget forgets it. Accepting again changes nothing."""
        return await decide(service, c, memory_id, "accepted", None, containerTag)

    @router.post("/memories/{memory_id}/reject", response_model=ReviewOut, response_model_exclude_none=True)
    async def reject(
        memory_id: MemoryId,
        c: Auth,
        body: Annotated[RejectIn | None, Body()] = None,
        containerTag: Tag = None,
    ) -> ReviewOut:
        """Reject the proposal on a memory (Curate grant), with an optional reason: a proposed save
        stays as rejected history, a proposed forget leaves the memory live."""
        return await decide(service, c, memory_id, "rejected", body.reason if body else None, containerTag)

    return router
