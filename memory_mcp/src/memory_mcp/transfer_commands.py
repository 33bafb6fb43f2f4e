"""``memory-mcp export`` and ``memory-mcp import``: a space to a file and back (store/transfer.py)."""

from __future__ import annotations

import asyncio
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memory_mcp.options import DatabaseUrl, DataDir, console, fail, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.embedder.static import StaticModel
    from memory_mcp.store.db import Database
    from memory_mcp.store.models import Space
    from memory_mcp.store.transfer import Entry, ImportReport


class Format(StrEnum):
    JSONL = "jsonl"
    MARKDOWN = "markdown"


SpaceOption = Annotated[str, typer.Option("--space", metavar="KEY", help="The space's key")]


def register(app: typer.Typer) -> None:
    """Add ``export`` and ``import`` to the command line."""
    app.command("export")(export)
    app.command("import")(import_)


async def _space(db: Database, key: str) -> Space:
    from memory_mcp.store import spaces
    from memory_mcp.store.errors import SpaceNotFound

    space = await spaces.get_space(db, key)
    if space is None:
        raise SpaceNotFound(key)
    return space


def export(
    space: SpaceOption,
    fmt: Annotated[
        Format, typer.Option("--format", help="jsonl (to import again) or markdown (to read)")
    ] = Format.JSONL,
    history: Annotated[
        bool,
        typer.Option("--history", help="Also superseded versions, forgotten memories and documents"),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", metavar="FILE", help="Write to this file (default: stdout)"),
    ] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Export a space's memories with who wrote them, their categories and versions."""
    from memory_mcp.store import transfer

    out = sys.stdout if output is None else output.open("w", encoding="utf-8")

    async def work(_: Settings, db: Database) -> int:
        found = await _space(db, space)
        count = 0
        if fmt is Format.MARKDOWN:
            records = [r async for r in transfer.export_records(db, found.id, history)]
            out.write(transfer.markdown(space, records))
            return sum(r["type"] == "memory" for r in records)
        async for record in transfer.export_records(db, found.id, history):
            out.write(transfer.jsonl_line(record))
            count += record["type"] == "memory"
        return count

    try:
        count = on_database(data_dir, database_url, work)
    finally:
        if output is not None:
            out.close()
    where = f" to {output}" if output is not None else ""
    console.print(f"exported {count} memories of space '{space}'{where}", highlight=False)


def _read_lines(path: Path) -> list[str]:
    try:
        return (sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def import_(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="A JSONL file from memory-mcp export ('-' reads stdin)")
    ],
    space: SpaceOption,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Import the good lines and report the bad ones")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, max=256, help="Memories embedded together")] = 64,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Import an export's JSONL into a space; every line is checked first, a re-run adds nothing twice."""
    from memory_mcp.store import transfer

    entries, problems = transfer.check_lines(_read_lines(file))
    if problems and not skip_invalid:
        for problem in problems:
            console.print(f"[red]invalid:[/red] {problem}", highlight=False)
        raise fail(
            f"{len(problems)} bad line(s) in {file}; nothing imported (--skip-invalid imports the rest)"
        )
    report = transfer.ImportReport(skipped=problems)

    async def work(settings: Settings, db: Database) -> ImportReport:
        target = await _space(db, space)
        return await _import(settings, db, target, entries, batch_size, report)

    done = on_database(data_dir, database_url, work)
    for problem in done.skipped:
        console.print(f"[yellow]skipped:[/yellow] {problem}", highlight=False)
    console.print(
        f"imported {done.imported} memories and {done.documents} documents into '{space}'; "
        f"{done.already} already there, {len(done.skipped)} line(s) skipped",
        highlight=False,
    )
    if done.unattributed:
        console.print(
            f"{done.unattributed} memories name people who are not users here; stored without an author"
        )


async def _import(
    settings: Settings, db: Database, target: Space, entries: list[Entry], batch_size: int, report: Any
) -> ImportReport:
    from rich.progress import Progress

    from memory_mcp.embedder.client import BulkPolicy, EmbedderUnavailable, embed_bulk, make_embedder
    from memory_mcp.store import transfer

    embedder = await make_embedder(settings)
    policy = BulkPolicy.from_settings(settings)
    static = await _static_model(settings)

    async def embed(texts: list[str]) -> list[list[float]]:
        return await embed_bulk(embedder, texts, policy)

    try:
        await db.check_ready(embedder.dim)
        with Progress(console=console) as progress:
            task = progress.add_task("importing", total=sum(e.kind == "memory" for e in entries))
            return await transfer.import_entries(
                db,
                target.id,
                target.key,
                entries,
                embed,
                batch_size=batch_size,
                progress=lambda n: progress.advance(task, n),
                report=report,
                static=static.vectors if static is not None else None,
            )
    except EmbedderUnavailable as exc:
        raise fail(
            f"the embedder is unavailable ({exc}) after {policy.attempts} attempts; what was imported "
            "stays, and running the same import again adds the rest"
        ) from None
    finally:
        await embedder.aclose()


async def _static_model(settings: Settings) -> StaticModel | None:
    """The static model for the import's third-signal vectors; without it (turned off, or it cannot
    be distilled here) they are left to the server's backfill."""
    from memory_mcp.embedder.static import StaticModelUnavailable, load_static_model

    if not settings.static_embedding:
        return None
    try:
        return await asyncio.to_thread(load_static_model, settings.static_embedding_cache_dir)
    except StaticModelUnavailable as exc:
        console.print(f"[yellow]static vectors left to the backfill:[/yellow] {exc}", highlight=False)
        return None
