"""`memory-mcp audit export` as a person runs it: a real process, a real database."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

from memory_mcp.store import memories
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.store.test_memories import writer


async def test_audit_export_writes_the_events_between_two_moments(
    db: Database, db_urls: tuple[str, str]
) -> None:
    ctx = await writer(db)
    saved = (await memories.save_memory(db, ctx, "The release train leaves on Tuesdays.")).memory
    await memories.forget_memory(db, ctx, "", memory_id=str(saved.id), reason="no more trains")
    admin = Admin(db_urls[1])

    lines = [json.loads(line) for line in admin.ok("audit", "export").stdout.splitlines()]
    forgotten = [e for e in lines if e["action"] == "memory.forgotten"]
    assert len(forgotten) == 1 and forgotten[0]["targetId"] == str(saved.id)
    assert forgotten[0]["space"] == "team" and forgotten[0]["details"]["reason"] == "no more trains"
    assert [e["id"] for e in lines] == sorted(e["id"] for e in lines)  # oldest first

    table = list(csv.DictReader(io.StringIO(admin.ok("audit", "export", "--format", "csv").stdout)))
    assert [r["action"] for r in table] == [e["action"] for e in lines]
    assert json.loads(table[-1]["details"]) == lines[-1]["details"]

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert admin.ok("audit", "export", "--since", tomorrow).stdout == ""
    assert len(admin.ok("audit", "export", "--until", tomorrow).stdout.splitlines()) == len(lines)
    assert "--since: not an ISO 8601 date" in admin.refused("audit", "export", "--since", "yesterday")
    assert "--until must come after --since" in admin.refused(
        "audit", "export", "--since", tomorrow, "--until", "2020-01-01"
    )
