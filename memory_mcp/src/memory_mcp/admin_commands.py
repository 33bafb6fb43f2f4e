"""``memory-mcp space|user|key ...`` and ``--version``: everyday administration without YAML.

The commands only parse, call :mod:`memory_mcp.store.admin` and print; they reach the database the
way ``apply`` does (:func:`~memory_mcp.options.on_database`).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from memory_mcp.options import DatabaseUrl, DataDir, console, fail, on_database

if TYPE_CHECKING:
    from pathlib import Path

    from memory_mcp.core.settings import Settings
    from memory_mcp.store.access import Access
    from memory_mcp.store.apikeys import GrantChange
    from memory_mcp.store.db import Database

space_app = typer.Typer(help="Create, list and delete spaces.", no_args_is_help=True, rich_markup_mode=None)
user_app = typer.Typer(
    help="Create, list, deactivate and activate users.", no_args_is_help=True, rich_markup_mode=None
)
key_app = typer.Typer(
    help="Create, list, grant, ungrant and revoke API keys.", no_args_is_help=True, rich_markup_mode=None
)


class DeletionPolicy(StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


class RoleChoice(StrEnum):
    WRITER = "Writer"
    READER = "Reader"


AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


def _version(value: bool) -> None:
    if value:
        from memory_mcp.core import package_version

        print(f"memory-mcp {package_version()}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit"),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an error instead of its one line")
    ] = False,
) -> None:
    """Remote memory for AI agents over MCP."""


def register(app: typer.Typer) -> None:
    """Add ``--version`` and the ``space``, ``user`` and ``key`` groups to the command line."""
    app.callback()(_root)
    app.add_typer(space_app, name="space")
    app.add_typer(user_app, name="user")
    app.add_typer(key_app, name="key")


def _owner(value: str) -> str:
    return "cli" if value == "cli" else "apply/operator"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else ""


def print_rows(rows: Sequence[Any], columns: Sequence[tuple[str, str]], as_json: bool, title: str) -> None:
    """``rows`` (dataclasses) as JSON on stdout, or as a Rich table of ``columns`` (field, heading)."""
    if as_json:
        print(json.dumps([asdict(r) for r in rows], default=_json_value, indent=2))
        return
    table = Table(title=title, title_justify="left")
    for _, heading in columns:
        table.add_column(heading)
    for row in rows:
        table.add_row(
            *(
                _owner(row.managed_by) if field == "managed_by" else _cell(getattr(row, field))
                for field, _ in columns
            )
        )
    # Piped output gets room for every column rather than the 80 columns Rich assumes there.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _json_value(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)


# --- space --------------------------------------------------------------------------------------


@space_app.command("create")
def space_create(
    key: Annotated[str, typer.Argument(metavar="KEY", help="The space's key (its containerTag)")],
    name: Annotated[
        str | None, typer.Option("--name", metavar="TEXT", help="Display name (default: the key)")
    ] = None,
    description: Annotated[
        str, typer.Option("--description", metavar="TEXT", help="What the space holds")
    ] = "",
    deletion_policy: Annotated[
        DeletionPolicy,
        typer.Option(
            "--deletion-policy",
            help="On delete: Retain keeps the data (detached), Delete removes it",
        ),
    ] = DeletionPolicy.RETAIN,
    grant_to: Annotated[
        list[str] | None,
        typer.Option(
            "--grant-to",
            metavar="KEY[=ACCESS]",
            help="Also grant the space to this API key (access ReadWrite unless given); repeat. "
            "On a laptop: --grant-to admin-bootstrap, the key serve printed",
        ),
    ] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a space managed by the command line (and grant it to keys with --grant-to)."""
    from memory_mcp.store import admin

    grants = [_key_access(value) for value in grant_to or []]

    async def work(_: Settings, db: Database) -> tuple[bool, str | None]:
        restored = (await admin.create_space(db, key, name, description, deletion_policy.value, grants))[1]
        return restored, None if grants else await admin.bootstrap_key(db)

    restored, bootstrap = on_database(data_dir, database_url, work)
    verb = "restored retained" if restored else "created"
    console.print(f"{verb} space '{key}' (deletion policy {deletion_policy.value})", highlight=False)
    for key_name, access in grants:
        console.print(f"granted it to key '{key_name}' ({access.value})", highlight=False)
    if not grants:
        # No key can use a new space yet: say the exact command that changes that.
        where = _database_options(data_dir, database_url)
        console.print(
            f"no key can use it yet; grant it to {'the key serve printed' if bootstrap else 'a key'} with:",
            highlight=False,
        )
        console.print(f"  memory-mcp key grant {bootstrap or 'KEY'} {key}=ReadWrite{where}", highlight=False)


def _key_access(value: str) -> tuple[str, Access]:
    """``--grant-to KEY[=ACCESS]``: a key name and an access level (ReadWrite when none is given)."""
    from memory_mcp.store.access import Access, parse_access

    name, sep, access = value.partition("=")
    return name.strip(), parse_access(access.strip(), "--grant-to") if sep else Access.READ_WRITE


def _database_options(data_dir: Path | None, database_url: str | None) -> str:
    """The options that reach the same database again, for a command line printed to be run next
    (a URL's password is not repeated)."""
    if database_url is not None:
        from sqlalchemy.engine import make_url

        return f" --database-url {shlex.quote(make_url(database_url).render_as_string(hide_password=True))}"
    return f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""


@space_app.command("list")
def space_list(as_json: AsJson = False, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """List every space with its counts, deletion policy and manager."""
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> list[admin.SpaceRow]:
        return await admin.list_spaces(db)

    print_rows(
        on_database(data_dir, database_url, work),
        [
            ("key", "key"),
            ("display_name", "name"),
            ("memories", "memories"),
            ("documents", "documents"),
            ("deletion_policy", "deletion policy"),
            ("detached", "detached"),
            ("managed_by", "managed by"),
        ],
        as_json,
        "Spaces",
    )


@space_app.command("delete")
def space_delete(
    key: Annotated[str, typer.Argument(metavar="KEY", help="The space's key")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete a space by its deletion policy: Retain detaches it and keeps its data, Delete removes it."""
    from memory_mcp.store import admin

    async def check(_: Settings, db: Database) -> admin.SpaceRow:
        return await admin.space_for_deletion(db, key)

    space = on_database(data_dir, database_url, check)
    if space.deletion_policy == "Delete":
        what = f"its {space.memories} memories and {space.documents} documents are removed for good"
    else:
        what = f"it is detached; its {space.memories} memories and {space.documents} documents are kept"
    if not yes and not typer.confirm(
        f"Delete space '{key}'? Deletion policy {space.deletion_policy}: {what}."
    ):
        raise fail("nothing deleted")

    async def delete(_: Settings, db: Database) -> str:
        return await admin.delete_space(db, key)

    applied = on_database(data_dir, database_url, delete)
    if applied == "Retain":
        console.print(f"detached space '{key}'; its data is kept (creating it again restores it)")
    else:
        console.print(f"deleted space '{key}' and its data")


# --- user ---------------------------------------------------------------------------------------


@user_app.command("create")
def user_create(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The user's name (like a Kubernetes object name)")
    ],
    email: Annotated[str, typer.Option("--email", metavar="EMAIL", help="Email address (unique)")],
    role: Annotated[RoleChoice, typer.Option("--role", help="Writer or Reader")],
    display_name: Annotated[
        str | None,
        typer.Option("--display-name", metavar="TEXT", help="Name shown on memories (default: the name)"),
    ] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a user managed by the command line."""
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> None:
        await admin.create_user(db, name, email, role.value, display_name)

    on_database(data_dir, database_url, work)
    console.print(f"created user '{name}' ({role.value})", highlight=False)


@user_app.command("list")
def user_list(as_json: AsJson = False, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """List every user with their role, state, key count and manager."""
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> list[admin.UserRow]:
        return await admin.list_users(db)

    print_rows(
        on_database(data_dir, database_url, work),
        [
            ("name", "name"),
            ("email", "email"),
            ("display_name", "display name"),
            ("role", "role"),
            ("active", "active"),
            ("keys", "keys"),
            ("managed_by", "managed by"),
        ],
        as_json,
        "Users",
    )


def _set_active(name: str, active: bool, data_dir: Any, database_url: str | None) -> None:
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> bool:
        return await admin.set_user_active(db, name, active)

    changed = on_database(data_dir, database_url, work)
    state = "activated" if active else "deactivated"
    if not changed:
        console.print(f"user '{name}' was already {state}")
    elif active:
        console.print(f"activated user '{name}'")
    else:
        console.print(f"deactivated user '{name}': none of their keys work any more")


@user_app.command("deactivate")
def user_deactivate(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Deactivate a user: every one of their keys stops working at once."""
    _set_active(name, False, data_dir, database_url)


@user_app.command("activate")
def user_activate(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Activate a deactivated user again."""
    _set_active(name, True, data_dir, database_url)


# --- key ----------------------------------------------------------------------------------------


def _expiry(value: str | None) -> datetime | None:
    """``--expires``: an ISO date (midnight UTC) or date and time (UTC unless it names a zone)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"--expires: must be a date like 2027-01-31 or 2027-01-31T12:00, got {value!r}") from None
    expires_at = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if expires_at <= datetime.now(UTC):
        raise fail(f"--expires: must be in the future, got {value!r} (the key would never work)")
    return expires_at


@key_app.command("create")
def key_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The key's name")],
    user: Annotated[str, typer.Option("--user", metavar="USER", help="The user the key acts for")],
    grant: Annotated[
        list[str],
        typer.Option(
            "--grant", metavar="SPACE=ACCESS", help="A space and its access (Read, ReadWrite, ...); repeat"
        ),
    ],
    default_space: Annotated[
        str | None,
        typer.Option("--default-space", metavar="SPACE", help="The space used when a request names none"),
    ] = None,
    expires: Annotated[
        str | None, typer.Option("--expires", metavar="DATE", help="Expiry: 2027-01-31 or 2027-01-31T12:00")
    ] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key managed by the command line; the key is printed once, on stdout."""
    from memory_mcp.store import admin

    grants = [admin.parse_grant(g, i) for i, g in enumerate(grant)]
    expires_at = _expiry(expires)

    async def work(_: Settings, db: Database) -> str:
        return await admin.create_key(db, name, user, grants, default_space, expires_at)

    plaintext = on_database(data_dir, database_url, work)
    granted = ", ".join(f"{g.space}={g.access.value}" for g in grants)
    console.print(f"created key '{name}' for user '{user}' ({granted}); shown once, store it now:")
    print(plaintext, flush=True)


@key_app.command("list")
def key_list(as_json: AsJson = False, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """List every API key (never the key itself) with its user, grants, expiry and manager."""
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> list[admin.KeyRow]:
        return await admin.list_keys(db)

    print_rows(
        on_database(data_dir, database_url, work),
        [
            ("name", "name"),
            ("user", "user"),
            ("prefix", "prefix"),
            ("grants", "grants"),
            ("default_space", "default space"),
            ("expires_at", "expires"),
            ("revoked_at", "revoked"),
            ("managed_by", "managed by"),
        ],
        as_json,
        "API keys",
    )


@key_app.command("grant")
def key_grant(
    name: Annotated[str, typer.Argument(metavar="KEY", help="The key's name")],
    grants: Annotated[
        list[str],
        typer.Argument(metavar="SPACE=ACCESS", help="Spaces and their access (Read, ReadWrite, Curate)"),
    ],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Grant spaces to an existing API key (a space it holds takes the new access); its next request
    sees them. Keys of manifests are changed in their manifest instead."""
    from memory_mcp.store import admin

    specs = [admin.parse_grant(g, i) for i, g in enumerate(grants)]

    async def work(_: Settings, db: Database) -> GrantChange:
        return await admin.grant_key(db, name, specs)

    change = on_database(data_dir, database_url, work)
    if change.changed:
        _report_grants(name, change)
    else:
        console.print(f"key '{name}' already holds {_cell(change.after)}; nothing changed", highlight=False)


@key_app.command("ungrant")
def key_ungrant(
    name: Annotated[str, typer.Argument(metavar="KEY", help="The key's name")],
    spaces: Annotated[list[str], typer.Argument(metavar="SPACE", help="The spaces to take away")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Take spaces away from an API key; its next request no longer sees them."""
    from memory_mcp.store import admin

    async def work(_: Settings, db: Database) -> GrantChange:
        return await admin.ungrant_key(db, name, spaces)

    change = on_database(data_dir, database_url, work)
    if change.changed:
        _report_grants(name, change)
    else:
        named = ", ".join(f"'{s}'" for s in spaces)
        console.print(
            f"key '{name}' holds no grant on {named}; nothing changed (it holds {_cell(change.after)})",
            highlight=False,
        )


def _report_grants(name: str, change: GrantChange) -> None:
    console.print(
        f"key '{name}' now holds {_cell(change.after)} (was {_cell(change.before)}); "
        "its next request sees the change",
        highlight=False,
    )


@key_app.command("revoke")
def key_revoke(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The key's name")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an API key: it stops working at once, and so do the OAuth tokens granted from it. A key
    of a manifest stays revoked too: apply and the operator issue it a new secret only when its
    rotationGeneration goes up."""
    from memory_mcp.store import admin
    from memory_mcp.store.ownership import Owner

    async def work(_: Settings, db: Database) -> tuple[bool, Owner]:
        return await admin.revoke_key(db, name)

    revoked, owner = on_database(data_dir, database_url, work)
    console.print(f"revoked key '{name}'" if revoked else f"key '{name}' was already revoked")
    if owner is Owner.MANIFEST:
        console.print(
            f"key '{name}' is managed by apply/the operator: it stays revoked (its ApiKey reports "
            "Revoked); raise the ApiKey's spec.rotationGeneration to issue a new secret, or remove it"
        )
