"""`memory-mcp import --from FORMAT` and `export --format memory-json|markdown` as real processes,
round trips through the open formats, and `POST /v1/spaces/{key}/import` over real HTTP."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import spaces
from memory_mcp.store.access import Role
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import run_server
from tests.test_transfer import fill, read_jsonl

FIXTURES = Path(__file__).parent / "fixtures" / "imports"


@pytest.fixture
def admin(db_urls: tuple[str, str]) -> Admin:
    return Admin(db_urls[1])


def latest_state(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a round trip through an open format keeps of the live memories."""
    return sorted(
        (r["content"], r["category"], r["version"], r["createdAt"], r["updatedAt"])
        for r in records
        if r["type"] == "memory" and r["status"] == "live"
    )


async def test_import_from_chatgpt_dry_run_report_and_rerun(admin: Admin, db: Database) -> None:
    await make_space(db, "mine")
    await make_user(db, "ada", Role.WRITER)
    source = str(FIXTURES / "chatgpt")

    dry = admin.ok("import", "--from", "chatgpt", source, "--space", "mine", "--dry-run")
    assert dry.stdout.splitlines() == [
        "document 2024-06-17 'Planning the Lisbon trip': 2 memories",
        "document 2024-06-20 'Cabin wifi': 1 memories",
        "document 2024-06-27 'Untitled conversation of 2024-06-27': 1 memories",
    ]
    assert (
        "would skip: conversation 'Cabin wifi' (6a1f0c2e-0000-4000-8000-000000000002), message 1 (user): "
        "looks like a password; not imported"
    ) in dry.stderr
    assert (
        "dry run: would import 4 memories and 3 documents into 'mine'; 0 already there, 3 skipped; "
        "nothing was changed"
    ) in dry.stderr
    assert await spaces.space_counts(db, "mine") == (0, 0)

    done = admin.ok("import", "--from", "chatgpt", source, "--space", "mine", "--as-user", "ada")
    assert (
        "imported 4 memories and 3 documents into 'mine'; 0 already there, 3 part(s) skipped" in done.stderr
    )
    assert "skipped: conversation 4: not a conversation (no message mapping); not imported" in done.stderr
    assert "Fj0rd" not in done.stderr + done.stdout  # the credential is named by kind, never shown
    exported = read_jsonl_text(admin.ok("export", "--space", "mine", "--history").stdout)
    memories = [r for r in exported if r["type"] == "memory"]
    assert {r["createdBy"]["name"] for r in memories} == {"ada"}
    assert {r["category"] for r in memories} == {"chatgpt"}
    assert min(r["createdAt"] for r in memories) == "2024-06-17T08:00:10+00:00"

    rerun = admin.ok("import", "--from", "chatgpt", source, "--space", "mine")
    assert "imported 0 memories and 0 documents into 'mine'; 7 already there" in rerun.stderr
    dry_again = admin.ok("import", "--from", "chatgpt", source, "--space", "mine", "--dry-run")
    assert "would import 0 memories and 0 documents into 'mine'; 7 already there" in dry_again.stderr
    assert await spaces.space_counts(db, "mine") == (4, 3)

    assert "user 'nobody' not found" in admin.refused(
        "import", "--from", "chatgpt", source, "--space", "mine", "--as-user", "nobody"
    )
    assert (
        "conversations.json holds no ChatGPT conversations (a Claude export? --from claude)"
        in admin.refused("import", "--from", "chatgpt", str(FIXTURES / "claude"), "--space", "mine")
    )


def read_jsonl_text(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_export_to_memory_json_and_markdown_and_back(
    admin: Admin, db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    await fill(db, embedder)
    await make_space(db, "again")
    original = tmp_path / "src.jsonl"
    admin.ok("export", "--space", "src", "-o", str(original))
    expected = latest_state(read_jsonl(original))
    assert len(expected) == 6 and any(version == 3 for _, _, version, _, _ in expected)

    graph = tmp_path / "memory.json"
    admin.ok("export", "--space", "src", "--format", "memory-json", "-o", str(graph))
    entities = [json.loads(line) for line in graph.read_text().splitlines()]
    assert {e["type"] for e in entities} == {"entity"}
    process = next(e for e in entities if e["name"] == "process")
    assert process["entityType"] == "process"
    assert "The team meets on Wednesdays" in process["observations"]
    done = admin.ok("import", "--from", "memory-json", str(graph), "--space", "dst")
    assert "imported 6 memories and 0 documents into 'dst'; 0 already there, 0 part(s) skipped" in done.stderr
    copy = tmp_path / "dst.jsonl"
    admin.ok("export", "--space", "dst", "-o", str(copy))
    assert latest_state(read_jsonl(copy)) == expected
    rerun = admin.ok("import", "--from", "memory-json", str(graph), "--space", "dst")
    assert "imported 0 memories and 0 documents into 'dst'; 6 already there" in rerun.stderr

    notes = tmp_path / "src.md"
    admin.ok("export", "--space", "src", "--history", "--format", "markdown", "-o", str(notes))
    done = admin.ok("import", "--from", "markdown", str(notes), "--space", "again")
    assert "imported 6 memories and 0 documents into 'again'" in done.stderr
    assert "3 superseded, forgotten or proposed memories: history is imported from JSONL only" in done.stderr
    admin.ok("export", "--space", "again", "-o", str(copy))
    assert latest_state(read_jsonl(copy)) == expected
    assert "--history: memory-json holds the latest state only" in admin.refused(
        "export", "--space", "src", "--history", "--format", "memory-json"
    )


async def test_rest_import_needs_the_curate_grant_and_reports_what_it_skipped(
    db_urls: tuple[str, str], db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    for key in ("mine", "other"):
        await make_space(db, key)
    await make_user(db, "cura", Role.WRITER)
    curator = await make_key(db, "cura", {"mine": "Curate"})
    writer = await make_key(db, "cura", {"mine": "ReadWrite"})
    archive = tmp_path / "claude-export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("conversations.json", "projects.json"):
            z.write(FIXTURES / "claude" / name, f"export/{name}")
        z.writestr("../escape.json", "[]")

    async with run_server(db_urls[0], embedder) as server:

        async def post(
            key: str, fmt: str, path: Path, file_name: str | None = None, **params: str
        ) -> httpx2.Response:
            content = path.read_bytes()  # noqa: ASYNC240 (a small fixture file)
            async with httpx2.AsyncClient(base_url=server.base, timeout=120) as http:
                return await http.post(
                    "/v1/spaces/mine/import",
                    params={"from": fmt, **params},
                    files={"file": (file_name or path.name, content)},
                    headers={"Authorization": f"Bearer {key}"},
                )

        dry = await post(curator, "claude", archive, dryRun="true")
        assert dry.status_code == 200, dry.text
        body = dry.json()
        assert (body["dryRun"], body["imported"], body["documents"], body["already"]) == (True, 5, 4, 0)
        assert await spaces.space_counts(db, "mine") == (0, 0)

        done = await post(curator, "claude", archive)
        assert done.status_code == 200, done.text
        body = done.json()
        assert (body["imported"], body["documents"], body["already"]) == (5, 4, 0)
        assert (
            "conversation 'Deploy notes' (1b7e9c40-0000-4000-8000-00000000000b), message 1 (user): looks like "
            "a connection string with an embedded password; not imported"
        ) in body["skipped"]
        assert (
            "archive member '../escape.json': its path leaves the archive (absolute, a drive or '..'); not read"
            in body["skipped"]
        )
        assert "Vx9q2LmT7r" not in done.text
        again = (await post(curator, "claude", archive)).json()
        assert (again["imported"], again["documents"], again["already"]) == (0, 0, 9)

        note = tmp_path / "Boiler.md"
        note.write_text("---\ntags: [house]\n---\nThe boiler is serviced every September by Mrs Ortiz.\n")
        single = (await post(curator, "markdown", note)).json()
        assert (single["imported"], single["documents"]) == (1, 1)
        # A file name no file system takes (over 255 bytes, a NUL) is cut and cleaned, not a 500.
        for hostile in ("é" * 200 + ".md", "Gar\x00den.md"):
            note.write_text(f"Note {len(hostile)}: the greenhouse vents open at 24 degrees.\n")
            named = await post(curator, "markdown", note, file_name=hostile)
            assert named.status_code == 200, named.text
            assert (named.json()["imported"], named.json()["documents"]) == (1, 1)

        refused = await post(writer, "claude", archive)
        assert refused.status_code == 403
        assert refused.json()["message"].startswith("importing into space 'mine' needs the Curate grant")
        async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
            hidden = await http.post(
                "/v1/spaces/other/import",
                files={"file": ("x.jsonl", b"")},
                headers={"Authorization": f"Bearer {curator}"},
            )
            assert hidden.status_code == 404 and hidden.json()["message"] == "space 'other' not found"
        wrong = await post(curator, "chatgpt", note)
        assert wrong.status_code == 422 and "Boiler.md is not valid JSON" in wrong.json()["message"]
        assert wrong.json()["error"] == "ValidationError" and wrong.json()["field"] == "file"
        unknown = await post(curator, "evernote", note)
        assert unknown.status_code == 422 and unknown.json()["field"] == "from"

        # An import may be as large as an upload, past the 1 MiB of other request bodies.
        padded = tmp_path / "conversations.json"
        padded.write_text((FIXTURES / "chatgpt" / "conversations.json").read_text() + " " * 1_500_000)
        large = await post(curator, "chatgpt", padded, dryRun="true")
        assert large.status_code == 200, large.text
        assert (large.json()["imported"], large.json()["documents"]) == (4, 3)
    async with run_server(db_urls[0], embedder, max_upload_bytes=4096) as small:
        async with httpx2.AsyncClient(base_url=small.base, timeout=30) as http:
            too_large = await http.post(
                "/v1/spaces/mine/import",
                params={"from": "chatgpt"},
                files={"file": ("conversations.json", b"[" + b" " * 8192 + b"]")},
                headers={"Authorization": f"Bearer {curator}"},
            )
        assert too_large.status_code == 413 and too_large.json()["error"] == "ContentTooLarge"
    assert await spaces.space_counts(db, "mine") == (8, 7)


def test_the_command_line_and_rest_name_the_same_formats() -> None:
    from typing import get_args

    from memory_mcp.server.rest_export import ImportFormat
    from memory_mcp.store import importers
    from memory_mcp.transfer_commands import Source

    assert set(get_args(ImportFormat)) == {s.value for s in Source} == {"jsonl", *importers.FORMATS}
