"""``memory-mcp demo``: a space of sample memories and a read-only key to it, for someone who
reviews the server (a directory's reviewer, a colleague trying it) without touching real data.

Only parses, calls the store and prints, like the other administration commands. The memories go
in as an import does (``store.transfer``): checked, never twice, without vectors; the server's
backfill embeds them (keyword search finds them at once). Each run makes a new key and leaves the
earlier ones working until they expire or are revoked (``memory-mcp key revoke``).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from memory_mcp.options import DatabaseUrl, DataDir, console, on_database

if TYPE_CHECKING:
    from memory_mcp.core.settings import Settings
    from memory_mcp.store.db import Database

USER = "demo-reviewer"
USER_EMAIL = "demo-reviewer@example.com"
DEFAULT_SPACE = "demo"
DEFAULT_DAYS = 30
# A small team's notes: facts to recall, a code to find by keyword, and categories to filter by.
SAMPLES: tuple[tuple[str, str], ...] = (
    ("The Lisbon team ships the mobile app every second Thursday after the 14:00 review.", "process"),
    ("Payments run on the eu-west-1 cluster; the fallback region is eu-central-1.", "infra"),
    ("Error code PAY-4021 means the card issuer timed out; retrying after 30 seconds is safe.", "runbook"),
    ("Marta Ilves owns the search service; ask her before changing its ranking weights.", "people"),
    ("Customer exports are kept for 14 days, then deleted by the nightly cleanup job.", "policy"),
    ("The design system's primary colour is indigo #3730A3; buttons use 6 px corner radius.", "design"),
    ("On-call hands over on Mondays at 09:00 CET in the #ops-handover channel.", "process"),
    ("Staging databases are refreshed from anonymised production snapshots every Sunday night.", "infra"),
)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the command line."""
    app.command("demo")(demo)


def sample_lines() -> list[str]:
    """The samples as lines of the export format, with stable ids (a re-run recognises them)."""
    return [
        json.dumps({"type": "memory", "id": f"demo-{n}", "content": content, "category": category})
        for n, (content, category) in enumerate(SAMPLES, start=1)
    ]


def demo(
    space: Annotated[
        str, typer.Option("--space", metavar="KEY", help="The demo space's key")
    ] = DEFAULT_SPACE,
    days: Annotated[int, typer.Option("--days", min=1, max=365, help="Days until the key expires")] = (
        DEFAULT_DAYS
    ),
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a demo space with sample memories and print a new read-only (Reader) key to it."""
    from memory_mcp.store import admin, spaces, transfer, users
    from memory_mcp.store.access import Access
    from memory_mcp.store.apikeys import GrantSpec

    entries, problems = transfer.check_lines(sample_lines())
    assert not problems, problems  # the samples are this module's own

    async def work(_: Settings, db: Database) -> tuple[str, int, datetime]:
        target = await spaces.get_space(db, space)
        if target is None:
            target, _restored = await admin.create_space(
                db, space, "Memory-MCP demo", "Sample memories of a made-up team, for trying Memory-MCP"
            )
        report = await transfer.import_entries(db, target.id, target.key, entries, None, actor=admin.ACTOR)
        if await users.get_user(db, USER) is None:
            await admin.create_user(db, USER, USER_EMAIL, "Reader", "Demo reviewer")
        expires = datetime.now(UTC) + timedelta(days=days)
        name = f"{USER}-{secrets.token_hex(3)}"
        key = await admin.create_key(db, name, USER, [GrantSpec(space, Access.READ)], space, expires)
        return key, report.imported, expires

    key, added, expires = on_database(data_dir, database_url, work)
    console.print(
        f"demo space '{space}': {added} sample memories added ({len(SAMPLES) - added} already there); "
        f"a Reader key to it only, until {expires:%Y-%m-%d} (shown once):",
        highlight=False,
        soft_wrap=True,
    )
    print(key, flush=True)
