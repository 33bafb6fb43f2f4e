"""``memory-mcp export`` and ``memory-mcp import``: a space to a file and back (store/transfer.py)."""

from __future__ import annotations

import contextlib
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from memory_mcp.options import DatabaseUrl, DataDir, OutputFile, console, fail, on_database, read_input

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.embedder.static import StaticModel
    from memory_mcp.store.db import Database
    from memory_mcp.store.importers import Cost
    from memory_mcp.store.importers.preview import Preview
    from memory_mcp.store.models import Space
    from memory_mcp.store.transfer import Entry, ImportReport


class Format(StrEnum):
    JSONL = "jsonl"
    MARKDOWN = "markdown"
    MEMORY_JSON = "memory-json"


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
        Format,
        typer.Option(
            "--format",
            help="jsonl (everything, to import again), markdown (to read) or memory-json (the MCP "
            "memory server's file); import --from reads each back",
        ),
    ] = Format.JSONL,
    history: Annotated[
        bool,
        typer.Option("--history", help="Also superseded versions, forgotten memories and documents"),
    ] = False,
    output: OutputFile = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Export a space's memories with who wrote them, their categories and versions."""
    from memory_mcp.store import transfer
    from memory_mcp.store.importers import memory_json

    if history and fmt is Format.MEMORY_JSON:
        raise fail("--history: memory-json holds the latest state only; export jsonl for history")
    if output is not None:
        _check_output(output)

    async def work(_: Settings, db: Database) -> int:
        found = await _space(db, space)
        # Opened once the space is found: a mistyped space leaves an earlier export as it was.
        sink = contextlib.nullcontext(sys.stdout) if output is None else output.open("w", encoding="utf-8")
        with sink as out:
            return await write(db, found, out)

    async def write(db: Database, found: Space, out: TextIO) -> int:
        count = 0
        if fmt is Format.MARKDOWN:
            records = [r async for r in transfer.export_records(db, found.id, history)]
            out.write(transfer.markdown(space, records))
            return sum(r["type"] == "memory" for r in records)
        if fmt is Format.MEMORY_JSON:  # the latest state only: the format has no history
            records = [r async for r in transfer.export_records(db, found.id, False)]
            out.writelines(memory_json.export_lines(records))
            return sum(r["type"] == "memory" for r in records)
        async for record in transfer.export_records(db, found.id, history):
            out.write(transfer.jsonl_line(record))
            count += record["type"] == "memory"
        return count

    count = on_database(data_dir, database_url, work)
    where = f" to {output}" if output is not None else ""
    console.print(f"exported {count} memories of space '{space}'{where}", highlight=False)


def _check_output(path: Path) -> None:
    """Refuse an output path that cannot be a file before any work is done."""
    if path.is_dir():
        raise fail(f"cannot write {path}: it is a folder")
    if not path.parent.is_dir():
        raise fail(f"cannot write {path}: there is no folder {path.parent}")


class Source(StrEnum):
    """What ``import --from`` reads (the names are the contract; store/importers has each format)."""

    JSONL = "jsonl"
    CHATGPT = "chatgpt"
    CLAUDE = "claude"
    MEM0 = "mem0"
    MEMORY_JSON = "memory-json"
    MARKDOWN = "markdown"


async def _author(db: Database, name: str | None) -> dict[str, str] | None:
    from memory_mcp.store import users
    from memory_mcp.store.errors import NotFound

    if name is None:
        return None
    user = await users.get_user(db, name)
    if user is None:
        raise NotFound("user", name)
    return {"name": user.name, "email": user.email}


def import_(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="PATH",
            help="The export to read: a file, a folder or a zip ('-' reads JSONL from stdin)",
        ),
    ],
    space: SpaceOption,
    source: Annotated[
        Source,
        typer.Option(
            "--from",
            help="Its format: jsonl (memory-mcp export), chatgpt, claude, mem0, memory-json "
            "(the MCP memory server's memory.json) or markdown (notes, or export --format markdown)",
        ),
    ] = Source.JSONL,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be created; change nothing")
    ] = False,
    as_user: Annotated[
        str | None,
        typer.Option(
            "--as-user",
            metavar="USER",
            help="Record this user as the author (default: the people a JSONL file names; nobody for "
            "other formats)",
        ),
    ] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="JSONL: import the good lines and report the bad ones")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, max=256, help="Memories embedded together")] = 64,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Import into a space from an export of memory-mcp or of another tool.

    Every text is checked as a save checks it (length, credentials) before anything is written;
    what cannot be imported is reported with the reason, never with its text. A re-run adds nothing twice.
    """
    from memory_mcp.store import importers, transfer

    problems: list[transfer.Problem] = []
    entries: list[Entry] = []
    if source is Source.JSONL:
        entries, problems = transfer.check_lines(read_input(path).splitlines())
        if problems and not skip_invalid:
            for problem in problems:
                console.print(f"[red]invalid:[/red] {problem}", highlight=False)
            raise fail(
                f"{len(problems)} bad line(s) in {path}; nothing imported (--skip-invalid imports the rest)"
            )

    async def work(settings: Settings, db: Database) -> ImportReport | None:
        target = await _space(db, space)
        author = await _author(db, as_user)
        if source is Source.JSONL:
            if author is not None:
                for entry in entries:
                    entry.created_by = entry.updated_by = author
        else:
            with console.status(f"reading {path}"):
                parsed = importers.parse(source.value, path, author, settings.import_budget())
            entries.extend(parsed.entries)
            problems.extend(parsed.skipped)
            if parsed.cost is not None:
                _print_cost(parsed.cost)
        if dry_run:
            _print_preview(space, await importers.preview(db, target.id, entries), problems)
            return None
        report = transfer.ImportReport(skipped=problems)
        return await _import(settings, db, target, entries, batch_size, report)

    done = on_database(data_dir, database_url, work)
    if done is None:
        return
    for problem in done.skipped:
        console.print(f"[yellow]skipped:[/yellow] {problem}", highlight=False)
    unit = "line(s)" if source is Source.JSONL else "part(s)"
    console.print(
        f"imported {done.imported} memories and {done.documents} documents into '{space}'; "
        f"{done.already} already there, {len(done.skipped)} {unit} skipped",
        highlight=False,
    )
    if done.unattributed:
        console.print(
            f"{done.unattributed} memories name people who are not users here; stored without an author"
        )


def _print_cost(cost: Cost) -> None:
    """What reading the export cost, against the import budget (MEMORY_MCP_MAX_IMPORT_*)."""
    console.print(
        f"read {cost.read_bytes:,} bytes in {cost.cpu_seconds:.2f} s of CPU, holding at most "
        f"{cost.peak_bytes:,} bytes",
        highlight=False,
    )


def _print_preview(space: str, preview: Preview, problems: list[Any]) -> None:
    """The dry run's answer: on stdout what would be created, on stderr what would be skipped."""
    out = typer.echo
    for document, count in preview.documents:
        day = f"{document.created_at:%Y-%m-%d}" if document.created_at else "today"
        out(f"document {day} {document.title!r}: {count} memories")
    for memory in preview.memories:
        day = f"{memory.created_at:%Y-%m-%d}" if memory.created_at else "today"
        first = memory.content.splitlines()[0]
        out(f"memory {day} [{memory.category or '-'}] {first[:100]}")
    for problem in problems:
        console.print(f"[yellow]would skip:[/yellow] {problem}", highlight=False)
    console.print(
        f"dry run: would import {preview.memory_count} memories and {len(preview.documents)} documents "
        f"into '{space}'; {preview.already} already there, {len(problems)} skipped; nothing was changed",
        highlight=False,
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
    """The static model for the import's third-signal vectors; without it (turned off, or not made
    on this machine yet: an import never waits for a distillation) they are left to the backfill."""
    from memory_mcp.embedder.static import StaticModelUnavailable, static_model_for

    try:
        return await static_model_for(settings, build=False)
    except StaticModelUnavailable as exc:
        console.print(f"[yellow]static vectors left to the backfill:[/yellow] {exc}", highlight=False)
        return None
