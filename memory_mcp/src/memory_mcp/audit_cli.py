"""``memory-mcp audit export``: the audit events (who changed access, keys, spaces; what was
forgotten or expired) for a SIEM or an archive, as JSON lines or CSV."""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from memory_mcp.options import DatabaseUrl, DataDir, OutputFile, console, fail, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.store.db import Database

audit_app = typer.Typer(
    help="The audit events, for a SIEM or an archive.", no_args_is_help=True, rich_markup_mode=None
)

COLUMNS = ("id", "at", "actor", "action", "space", "targetType", "targetId", "details")


class Format(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"


def _moment(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 date or time (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise fail(
            f"{option}: not an ISO 8601 date or time (e.g. 2026-12-01 or 2026-12-01T08:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@audit_app.command("export")
def export(
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="DATE", help="From this date or time (ISO 8601, inclusive)"),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="DATE", help="Up to this date or time (ISO 8601, exclusive)"),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="jsonl (one event a line) or csv")] = Format.JSONL,
    output: OutputFile = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Write the audit events between two moments, oldest first."""
    from memory_mcp.store import audit

    start, end = _moment(since, "--since"), _moment(until, "--until")
    if start and end and end <= start:
        raise fail("--until must come after --since")
    if output is not None and (output.is_dir() or not output.parent.is_dir()):
        raise fail(
            f"cannot write {output}: {'it is a folder' if output.is_dir() else 'its folder does not exist'}"
        )

    async def work(_: Settings, db: Database) -> int:
        sink = (
            contextlib.nullcontext(sys.stdout)
            if output is None
            else output.open("w", encoding="utf-8", newline="")
        )
        with sink as out:
            return await write(db, out)

    async def write(db: Database, out: TextIO) -> int:
        count = 0
        writer = csv.DictWriter(out, COLUMNS) if fmt is Format.CSV else None
        if writer is not None:
            writer.writeheader()
        async for event in audit.export_events(db, start, end):
            if writer is not None:
                writer.writerow({**event, "details": json.dumps(event["details"], ensure_ascii=False)})
            else:
                out.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
            count += 1
        return count

    count = on_database(data_dir, database_url, work)
    where = f" to {output}" if output is not None else ""
    console.print(f"exported {count} audit events{where}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")
