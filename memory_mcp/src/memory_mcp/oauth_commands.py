"""``memory-mcp oauth clients list|revoke`` and ``memory-mcp oauth keys rotate``: the apps people
connected by OAuth, and the keys that sign their tokens. The commands parse, call
:mod:`memory_mcp.store.oauth` and print, like :mod:`memory_mcp.admin_commands`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from memory_mcp.admin_commands import AsJson, print_rows
from memory_mcp.options import DatabaseUrl, DataDir, console, fail, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.store.db import Database

oauth_app = typer.Typer(
    help="Apps connected by OAuth, and the keys that sign their tokens.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
clients_app = typer.Typer(
    help="List and revoke OAuth clients (apps).", no_args_is_help=True, rich_markup_mode=None
)
keys_app = typer.Typer(
    help="Rotate the keys that sign access tokens.", no_args_is_help=True, rich_markup_mode=None
)
ACTOR = "cli"


def register(app: typer.Typer) -> None:
    oauth_app.add_typer(clients_app, name="clients")
    oauth_app.add_typer(keys_app, name="keys")
    app.add_typer(oauth_app, name="oauth")


@dataclass(frozen=True)
class ClientRow:
    client_id: str
    name: str
    registered_by: str  # "registration" (DCR) or "metadata document" (CIMD)
    redirect_uris: str
    live_grants: int
    created_at: datetime
    revoked_at: datetime | None


@clients_app.command("list")
def clients_list(data_dir: DataDir = None, database_url: DatabaseUrl = None, as_json: AsJson = False) -> None:
    """Every app that registered or signed in, with how many grants of it are live."""
    from memory_mcp.store import oauth

    async def work(_: Settings, db: Database) -> list[ClientRow]:
        return [
            ClientRow(
                c.client_id,
                c.client_name,
                "registration" if c.kind == "dcr" else "metadata document",
                " ".join(c.redirect_uris),
                live,
                c.created_at,
                c.revoked_at,
            )
            for c, live in await oauth.list_clients(db)
        ]

    print_rows(
        on_database(data_dir, database_url, work),
        [
            ("client_id", "client id"),
            ("name", "name"),
            ("registered_by", "known by"),
            ("redirect_uris", "redirect URIs"),
            ("live_grants", "live grants"),
            ("created_at", "created"),
            ("revoked_at", "revoked"),
        ],
        as_json,
        "OAuth clients",
    )


@clients_app.command("revoke")
def clients_revoke(
    client_id: Annotated[str, typer.Argument(metavar="CLIENT_ID", help="As `oauth clients list` shows it")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an app: its tokens stop working at once and it cannot sign in again."""
    from memory_mcp.store import oauth

    async def work(_: Settings, db: Database) -> bool | None:
        if await oauth.get_client(db, client_id) is None:
            return None
        return await oauth.revoke_client(db, client_id, actor=ACTOR)

    done = on_database(data_dir, database_url, work)
    if done is None:
        raise fail(f"no OAuth client '{client_id}'")
    console.print(
        f"revoked OAuth client '{client_id}'" if done else f"OAuth client '{client_id}' was already revoked"
    )


@keys_app.command("rotate")
def keys_rotate(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """A new signing key in the database; the old ones keep verifying for one token lifetime.

    (With oauth_signing_keys_dir set, the keys are files in a Secret: rotate them there.)"""
    from memory_mcp.store import oauth_keys

    async def work(settings: Settings, db: Database) -> str:
        if settings.oauth_signing_keys_dir is not None:
            raise fail(
                "the signing keys are files (oauth_signing_keys_dir): add a new PEM file there instead"
            )
        return await oauth_keys.add_signing_key(db, retire_others=True, actor=ACTOR)

    console.print(
        f"new signing key {on_database(data_dir, database_url, work)}; older keys verify until their tokens expire"
    )


@keys_app.command("retire")
def keys_retire(
    kid: Annotated[str, typer.Argument(help="The key id (kid) to retire", show_default=False)],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Retire a signing key at once (it leaked): every token it signed is refused within seconds on
    every server, and new tokens are signed by another key. Apps sign in again or refresh."""
    from memory_mcp.store import oauth_keys

    async def work(settings: Settings, db: Database) -> bool:
        if settings.oauth_signing_keys_dir is not None:
            raise fail(
                "the signing keys are files (oauth_signing_keys_dir): remove its PEM file there instead"
            )
        return await oauth_keys.retire_signing_key(db, kid, actor=ACTOR)

    if not on_database(data_dir, database_url, work):
        raise fail(f"no signing key '{kid}'")
    console.print(f"retired signing key {kid}; the tokens it signed are refused from now on")
