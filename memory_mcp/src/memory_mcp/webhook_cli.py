"""``memory-mcp webhook add|list|remove|dead-letters|replay``: a space's events sent to a URL.

Deliveries follow the Standard Webhooks scheme (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``), signed with the secret ``add`` prints once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from memory_mcp.options import DatabaseUrl, DataDir, console, fail, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.store.db import Database

webhook_app = typer.Typer(
    help="Send a space's events (memory saved, forgotten, expired...) to a URL.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

ACTOR = "cli"
Space = Annotated[str, typer.Argument(metavar="SPACE", help="Space key")]
Url = Annotated[str, typer.Argument(metavar="URL", help="The receiver: https on a public address")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


@webhook_app.command("add")
def add(space: Space, url: Url, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Send the space's events to URL from now on; prints the signing secret once."""
    from memory_mcp.server.webhook_sender import ReceiverRefused, check_receiver
    from memory_mcp.store import webhooks

    async def work(settings: Settings, db: Database) -> str:
        try:
            await check_receiver(url, settings.oauth_cimd_allow_loopback)
        except ReceiverRefused as exc:
            raise fail(str(exc)) from None
        _, secret = await webhooks.add_webhook(db, space, url, ACTOR)
        return secret

    secret = on_database(data_dir, database_url, work)
    console.print(f"webhook added to space '{space}'; its signing secret (shown once):", highlight=False)
    print(secret)


@webhook_app.command("list")
def list_hooks(
    space: Annotated[str | None, typer.Argument(metavar="[SPACE]", help="Only this space")] = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """The webhooks, with the events waiting for each and its dead letters."""
    from memory_mcp.store import webhooks

    async def work(_: Settings, db: Database) -> list[webhooks.Webhook]:
        return await webhooks.list_webhooks(db, space)

    hooks = on_database(data_dir, database_url, work)
    rows: list[dict[str, Any]] = [
        {
            "space": h.space_key,
            "url": h.url,
            "pending": h.pending,
            "attempts": h.attempts,
            "deadLetters": h.dead_letters,
            # Who keeps it: "manifest" (a Space resource's spec.webhooks, the operator) or "cli".
            "managedBy": h.managed_by.value,
        }
        for h in hooks
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("space", "url", "pending", "attempts", "dead letters", "managed by")
    for r in rows:
        table.add_row(
            r["space"], r["url"], str(r["pending"]), str(r["attempts"]), str(r["deadLetters"]), r["managedBy"]
        )
    console.print(table)


@webhook_app.command("remove")
def remove(space: Space, url: Url, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Stop sending the space's events to URL (its dead letters go with it)."""
    from memory_mcp.store import webhooks

    async def work(_: Settings, db: Database) -> None:
        await webhooks.remove_webhook(db, space, url, ACTOR)

    on_database(data_dir, database_url, work)
    console.print(f"webhook removed from space '{space}'", highlight=False)


@webhook_app.command("dead-letters")
def dead(
    space: Annotated[str | None, typer.Argument(metavar="[SPACE]", help="Only this space")] = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Events a receiver did not take after every retry; `replay ID` sends one again."""
    from memory_mcp.store import webhooks

    async def work(_: Settings, db: Database) -> list[webhooks.DeadLetter]:
        return await webhooks.dead_letters(db, space)

    letters = on_database(data_dir, database_url, work)
    rows: list[dict[str, Any]] = [
        {
            "id": d.id,
            "space": d.space_key,
            "url": d.url,
            "event": d.event_id,
            "type": d.action,
            "attempts": d.attempts,
            "error": d.error,
            "failedAt": d.failed_at.isoformat(),
        }
        for d in letters
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("id", "space", "type", "attempts", "error", "failed")
    for r in rows:
        table.add_row(str(r["id"]), r["space"], r["type"], str(r["attempts"]), r["error"], r["failedAt"][:19])
    console.print(table)


@webhook_app.command("replay")
def replay(
    dead_letter: Annotated[int, typer.Argument(metavar="ID", help="A dead letter's id (see dead-letters)")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Send a dead-lettered event again now; it leaves the list once the receiver takes it."""
    from memory_mcp.server.webhook_sender import ReceiverRefused, sender
    from memory_mcp.store import webhooks

    async def work(settings: Settings, db: Database) -> None:
        try:
            await webhooks.replay(
                db, dead_letter, sender(settings.oauth_cimd_allow_loopback), datetime.now(UTC)
            )
        except ReceiverRefused as exc:
            raise fail(f"not delivered: {exc}") from None

    on_database(data_dir, database_url, work)
    console.print(f"dead letter {dead_letter} delivered", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")
