"""``memory-mcp review list|accept|reject``: curating a Review space from the command line.

A person curates, never a model: the command names the curator (``--as``), a user with the Writer
role whose key holds a Curate grant on the space, and each decision is recorded as theirs. The
database is reached the way ``apply`` reaches it (:func:`~memory_mcp.options.on_database`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from memory_mcp.options import DatabaseUrl, DataDir, console, fail, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.store.db import Database
    from memory_mcp.store.review import Decision

review_app = typer.Typer(
    help="List, accept and reject what was proposed in Review spaces.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

SpaceOpt = Annotated[str, typer.Option("--space", help="Space key")]
CuratorOpt = Annotated[
    str,
    typer.Option(
        "--as", help="The curator: a user name (Writer role, a key with a Curate grant on the space)"
    ),
]
Ids = Annotated[list[str] | None, typer.Argument(help="Memory ids or short ids (see 'review list')")]
AllOpt = Annotated[bool, typer.Option("--all", help="Every pending proposal of the space, oldest first")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


@review_app.command("list")
def list_proposals(
    space: SpaceOpt,
    curator: CuratorOpt,
    page: Annotated[int, typer.Option(min=1)] = 1,
    limit: Annotated[int, typer.Option(min=1, max=50)] = 50,
    as_json: AsJson = False,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Proposals waiting for a curator: proposed saves and proposed forgets."""
    from memory_mcp.store import memories, review

    async def work(_: Settings, db: Database) -> list[dict[str, Any]]:
        ctx = await review.curator_context(db, curator, space)
        review.require_curate(ctx)
        result = await memories.list_memories(db, ctx, page, limit, "proposed")
        return [
            {
                "id": str(m.id),
                "proposal": "save" if m.review == "proposed" else "forget",
                "proposedBy": m.forget_proposed_by if m.review != "proposed" else m.created_by,
                "createdAt": m.created_at.isoformat(),
                "content": m.content,
            }
            for m in result.items
        ]

    rows = on_database(data_dir, database_url, work)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print(f"Nothing waits for review in space '{space}'.")
        return
    table = Table("id", "proposal", "proposed by", "created", "content")
    for row in rows:
        text = row["content"] if len(row["content"]) <= 80 else row["content"][:77] + "..."
        table.add_row(row["id"][:8], row["proposal"], row["proposedBy"] or "", row["createdAt"][:16], text)
    Console().print(table)


def _decide(
    decision: Decision,
    space: str,
    curator: str,
    ids: list[str] | None,
    everything: bool,
    reason: str | None,
    data_dir: Any,
    database_url: str | None,
) -> None:
    from memory_mcp.store import review

    if bool(ids) == everything:
        raise fail("give the memory ids, or --all (not both)")

    async def work(_: Settings, db: Database) -> list[review.ReviewResult]:
        ctx = await review.curator_context(db, curator, space)
        wanted = [str(i) for i in await review.pending_ids(db, ctx)] if everything else list(ids or ())
        return await review.decide_many(db, ctx, wanted, decision, reason)

    results = on_database(data_dir, database_url, work)
    for result in results:
        state = "unchanged, already" if result.already else ""
        console.print(
            f"{str(result.memory.id)[:8]}: proposed {result.proposal} {state}{' ' if state else ''}{decision}",
            highlight=False,
        )
    if everything and not results:
        console.print(f"Nothing waits for review in space '{space}'.")


@review_app.command("accept")
def accept(
    space: SpaceOpt,
    curator: CuratorOpt,
    ids: Ids = None,
    everything: AllOpt = False,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Accept proposals: a proposed save goes live, a proposed forget forgets the memory."""
    _decide("accepted", space, curator, ids, everything, None, data_dir, database_url)


@review_app.command("reject")
def reject(
    space: SpaceOpt,
    curator: CuratorOpt,
    ids: Ids = None,
    everything: AllOpt = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept with the decision)")] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Reject proposals: a proposed save stays as rejected history, a proposed forget leaves the memory live."""
    _decide("rejected", space, curator, ids, everything, reason, data_dir, database_url)


def register(app: typer.Typer) -> None:
    app.add_typer(review_app, name="review")
