"""What every command shares: the console, settings from options, errors, and the database to use."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError as SettingsError
from rich.console import Console
from rich.markup import escape

from memory_mcp.core.settings import Settings

if TYPE_CHECKING:
    from memory_mcp.store.db import Database

# Messages stay one line each when stderr is a pipe or a file (Rich would cut them at 80 columns),
# so that scripts and logs can match them.
console = Console(stderr=True, soft_wrap=True)

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", metavar="DIR", help="Folder of the embedded PostgreSQL (default: per-user data dir)"
    ),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", metavar="URL", help="postgresql:// URL of an external server instead"),
]
OutputFile = Annotated[
    Path | None,
    typer.Option("-o", "--output", metavar="FILE", help="Write to this file (default: stdout)"),
]

T = TypeVar("T")


def load_settings(**overrides: Any) -> Settings:
    """Settings from MEMORY_MCP_* variables, with command-line options on top; clear errors."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except SettingsError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            console.print(f"[red]invalid setting {field}:[/red] {err['msg']}")
        raise typer.Exit(2) from None


def fail(message: str) -> typer.Exit:
    """``error: <message>`` on one line of stderr; raise what it returns to exit with code 1."""
    console.print(f"[red]error:[/red] {escape(' '.join(message.split()))}", highlight=False)
    return typer.Exit(1)


def database_settings(data_dir: Path | None, database_url: str | None) -> Settings:
    """The settings of a command that works on an existing database.

    Only ``serve`` creates a data dir: anywhere else a missing one is a mistyped path, and going on
    would set up an empty database there and answer from it (no spaces, nothing to embed).
    """
    settings = load_settings(data_dir=data_dir, database_url=database_url)
    if new_data_dir(settings):
        where = settings.data_dir.expanduser().resolve()
        raise fail(
            f"no data dir at {where}: run `memory-mcp serve --data-dir {where}` first, or check the path"
        )
    return settings


def new_data_dir(settings: Settings) -> bool:
    """Whether these settings name the embedded PostgreSQL of a data dir that holds none yet."""
    from memory_mcp.store.embedded import EmbeddedPostgres

    return settings.database_url is None and not EmbeddedPostgres(settings.data_dir).pgdata.is_dir()


def read_input(path: Path) -> str:
    """The text of a file a command reads (``-``: stdin), or a refusal that names the file."""
    import sys

    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise fail(f"cannot read {path}: not UTF-8 text") from None


def on_database(
    data_dir: Path | None,
    database_url: str | None,
    work: Callable[[Settings, Database], Awaitable[T]],
    pool_size: int = 2,
) -> T:
    """Run ``work`` on the database a command names, the way ``apply`` reaches it.

    With a data dir that is the embedded PostgreSQL there, also while a ``serve`` on the same dir
    runs (the server is shared and outlives this command); the schema is brought to head first.
    A data dir must exist (:func:`database_settings`).
    """
    from memory_mcp.core.database import prepare_database

    settings = database_settings(data_dir, database_url)
    prepared = prepare_database(settings)

    async def run() -> T:
        db = prepared.open(pool_size)
        try:
            return await work(settings, db)
        finally:
            await db.close()

    try:
        return asyncio.run(run())
    finally:
        prepared.stop()


def _value_label(param: Any, ctx: Any) -> str:
    """What an option's value is called in help: its metavar, its choices, else its name."""
    if param.metavar is not None:
        return str(param.metavar)
    if param.type_descriptor.is_choice:
        return str(param.display_type(ctx)).strip("<>")
    return str(param.name or "value").upper()


def plain_help() -> None:
    """Help that names values as people do (``--port PORT``, ``--format jsonl|markdown``), not with
    their Python types: typer labels every value ``<str>``, ``<int>``, ``<int range>`` or ``<path>``.

    Options take their metavar, else their choices, else their name; arguments show their name alone.
    """
    from typer.core import TyperArgument, TyperOption

    TyperOption.display_type_rich = _value_label  # type: ignore[method-assign,assignment]
    TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]
