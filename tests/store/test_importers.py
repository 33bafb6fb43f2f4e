"""Each format's parser on small exports written from the formats' public descriptions
(tests/fixtures/imports), and what they become in a real space."""

from __future__ import annotations

import io
import json
import shutil
import stat
import uuid
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import importers, spaces, transfer, validation
from memory_mcp.store.db import Database
from memory_mcp.store.errors import ValidationError
from memory_mcp.store.transfer import Entry
from tests.factories import make_space

FIXTURES = Path(__file__).parent.parent / "fixtures" / "imports"
ADA = {"name": "ada", "email": "ada@example.com"}


def memories_of(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.kind == "memory"]


def documents_of(entries: list[Entry]) -> dict[str, Entry]:
    return {e.file_id: e for e in entries if e.kind == "document"}


def check_places(entries: list[Entry]) -> None:
    """Every memory of a document is the stretch of the document's text its offsets name."""
    documents = documents_of(entries)
    for m in memories_of(entries):
        if m.document is not None:
            text = documents[m.document].content
            assert text[m.position["char_start"] : m.position["char_end"]] == m.content


def skipped(parsed: importers.Parsed) -> list[str]:
    return [str(p) for p in parsed.skipped]


async def space_id_of(db: Database, key: str) -> uuid.UUID:
    found = await spaces.get_space(db, key)
    assert found is not None
    return found.id


def test_chatgpt_conversations_become_documents_and_the_users_turns_memories() -> None:
    parsed = importers.parse("chatgpt", FIXTURES / "chatgpt", ADA)
    documents = documents_of(parsed.entries)
    assert [d.title for d in documents.values()] == [
        "Planning the Lisbon trip",
        "Cabin wifi",
        "Untitled conversation of 2024-06-27",
    ]
    lisbon = next(d for d in documents.values() if d.title == "Planning the Lisbon trip")
    assert lisbon.created_at == datetime(2024, 6, 17, 8, 0, tzinfo=UTC)
    assert lisbon.updated_at == datetime(2024, 6, 17, 8, 10, tzinfo=UTC)
    # The branch the user last saw, in order; the edited-away turn, the hidden system message and
    # the assistant's tool call are not in it.
    assert lisbon.content.startswith("## You\n\nI am planning a week in Lisbon")
    assert "## ChatGPT\n\nLisbon in October is lovely." in lisbon.content
    assert "150 euros" not in lisbon.content and "search(" not in lisbon.content
    assert "thanks!" in lisbon.content  # a short turn stays in the document
    texts = [m.content for m in memories_of(parsed.entries) if m.document == lisbon.file_id]
    assert texts == [
        "I am planning a week in Lisbon in October with my partner. We are both vegetarian and we do not "
        "like crowded tourist spots.",
        "Yes please. Our budget is 120 euros a day for the two of us, and we will travel by train from Porto.",
    ]
    first = memories_of(parsed.entries)[0]
    assert first.created_at == datetime(2024, 6, 17, 8, 0, 10, tzinfo=UTC)
    assert (first.category, first.created_by) == ("chatgpt", ADA)
    check_places(parsed.entries)

    report = skipped(parsed)
    assert (
        "conversation 'Cabin wifi' (6a1f0c2e-0000-4000-8000-000000000002), message 1 (user): "
        "looks like a password; not imported"
    ) in report
    assert "conversation 4: not a conversation (no message mapping); not imported" in report
    assert any("1 turn(s) of fewer than 3 words" in line for line in report)
    assert not any("Fj0rd" in e.content for e in parsed.entries)  # not in the memory, nor the document
    assert not any("Fj0rd" in line for line in report)
    cabin = next(d for d in documents.values() if d.title == "Cabin wifi")
    assert "sleeps six people" in cabin.content and "asset_pointer" not in cabin.content


def test_chatgpt_reads_the_export_zip(tmp_path: Path) -> None:
    archive = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(FIXTURES / "chatgpt" / "conversations.json", "conversations.json")
        z.writestr("chat.html", "<html></html>")
        z.writestr("user.json", "{}")
    from_zip = importers.parse("chatgpt", archive, ADA)
    from_folder = importers.parse("chatgpt", FIXTURES / "chatgpt", ADA)
    assert [(e.file_id, e.content) for e in from_zip.entries] == [
        (e.file_id, e.content) for e in from_folder.entries
    ]


def test_claude_conversations_and_projects() -> None:
    parsed = importers.parse("claude", FIXTURES / "claude", ADA)
    documents = {d.title: d for d in documents_of(parsed.entries).values()}
    assert set(documents) == {"Garden irrigation", "Deploy notes", "Project: Household", "repairs.md"}
    garden = documents["Garden irrigation"]
    assert garden.created_at == datetime(2025, 3, 2, 9, 15, tzinfo=UTC)
    # The attachment is read in the document, after the turn it came with, and is no memory.
    assert "### Attachment: layout.txt\n\nBed A: tomatoes" in garden.content
    texts = {m.content: m for m in memories_of(parsed.entries)}
    assert "Bed A: tomatoes\nBed B: beans" not in texts
    # Text from content blocks when the message's own text is empty.
    timer = texts[
        "The timer should run before 7 in the morning because the afternoon sun is strong on the south side."
    ]
    assert timer.created_at == datetime(2025, 3, 2, 9, 20, tzinfo=UTC) and timer.category == "claude"
    instructions = next(t for t in texts if t.startswith("Answer in English"))
    assert texts[instructions].document == documents["Project: Household"].file_id
    repairs = documents["repairs.md"]
    assert repairs.file_name == "repairs.md" and repairs.created_at == datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
    assert any(m.document == repairs.file_id for m in texts.values())
    check_places(parsed.entries)
    assert (
        "conversation 'Deploy notes' (1b7e9c40-0000-4000-8000-00000000000b), message 1 (user): looks like "
        "a connection string with an embedded password; not imported"
    ) in skipped(parsed)
    assert "Vx9q2LmT7r" not in repr(parsed)

    # One file given alone is read by its content.
    projects = importers.parse("claude", FIXTURES / "claude" / "projects.json", ADA)
    assert {d.title for d in documents_of(projects.entries).values()} == {"Project: Household", "repairs.md"}


def test_mem0_memories_by_owner_with_categories_and_dates() -> None:
    parsed = importers.parse("mem0", FIXTURES / "mem0" / "memories.json", ADA)
    documents = {d.title: d for d in documents_of(parsed.entries).values()}
    assert set(documents) == {"mem0: user alice", "mem0: user alice, agent travel-bot"}
    texts = {m.content: m for m in memories_of(parsed.entries)}
    assert set(texts) == {
        "Is allergic to peanuts",
        "Prefers window seats on flights",
        "Books hotels close to the main station",
    }
    peanuts = texts["Is allergic to peanuts"]
    assert peanuts.category == "health"
    assert peanuts.created_at == datetime.fromisoformat("2024-07-20T01:30:02.128486-07:00")
    seats = texts["Prefers window seats on flights"]
    assert seats.category == "travel"  # the first of its categories
    assert seats.updated_at == datetime.fromisoformat("2024-08-01T10:00:00-07:00")
    # No zone given: read as UTC.
    assert texts["Books hotels close to the main station"].created_at == datetime(2024, 7, 22, 9, tzinfo=UTC)
    report = skipped(parsed)
    assert "memory 5: no 'memory' text; not imported" in report
    assert any(line.startswith("memory 3c90c3cc-0d44-4b50-8888-8dd25736052d: looks like") for line in report)
    assert "sk-live" not in " ".join(report)
    check_places(parsed.entries)


def test_memory_json_entities_observations_and_relations() -> None:
    parsed = importers.parse("memory-json", FIXTURES / "memory-json" / "memory.json", ADA)
    texts = {m.content: m for m in memories_of(parsed.entries)}
    assert texts["John_Smith: Speaks fluent Spanish"].category == "person"
    assert texts["Anthropic: Based in San Francisco"].category == "organization"
    relation = texts["John_Smith works at Anthropic"]
    assert relation.category == "relation" and relation.document is None
    assert {d.title for d in documents_of(parsed.entries).values()} == {"John_Smith", "Anthropic"}
    assert skipped(parsed) == [
        "line 4: not valid JSON (Expecting property name enclosed in double quotes); not imported",
        "line 5: a relation needs from, relationType and to; not imported",
    ]
    check_places(parsed.entries)


def test_markdown_vault_notes_with_front_matter() -> None:
    parsed = importers.parse("markdown", FIXTURES / "markdown" / "vault", ADA)
    documents = {d.file_name: d for d in documents_of(parsed.entries).values()}
    # Hidden folders and other files are not read.
    assert set(documents) == {"Daily 2025-03-01.md", "Reading list.md", "projects/heat-pump.md"}
    reading = documents["Reading list.md"]
    assert reading.title == "Books to read in 2025" and reading.category == "reading"
    assert reading.created_at == datetime(2025, 1, 3, tzinfo=UTC)
    assert reading.updated_at == datetime.fromisoformat("2025-02-14T18:30:00+01:00")
    assert not reading.content.startswith("---")  # the front matter is not text
    assert documents["projects/heat-pump.md"].category == "house"
    assert documents["Daily 2025-03-01.md"].title == "Saturday"  # its first heading
    assert {m.category for m in memories_of(parsed.entries) if m.document == reading.file_id} == {"reading"}
    assert skipped(parsed) == ["file secrets.md: looks like a password; not imported"]
    check_places(parsed.entries)


def write_zip(path: Path, members: dict[str, bytes], link: str | None = None) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        if link is not None:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, "/etc/passwd")


def test_archives_refuse_path_tricks_links_and_bombs(tmp_path: Path) -> None:
    note = b"# Kept\n\nA note that is fine to import."
    tricks = tmp_path / "vault.zip"
    write_zip(
        tricks,
        {"vault/ok.md": note, "../outside.md": note, "/etc/abs.md": note, "C:/win.md": note},
        link="vault/link.md",
    )
    parsed = importers.parse("markdown", tricks, ADA)
    assert [d.file_name for d in documents_of(parsed.entries).values()] == ["vault/ok.md"]
    report = skipped(parsed)
    for name in ("../outside.md", "/etc/abs.md", "C:/win.md"):
        assert (
            f"archive member {name!r}: its path leaves the archive (absolute, a drive or '..'); not read"
            in report
        )
    assert "archive member 'vault/link.md': a symbolic link; not followed" in report

    bomb = tmp_path / "bomb.zip"
    write_zip(bomb, {"conversations.json": b"[" + b" " * (validation.MAX_ARCHIVE_RATIO * 64 * 1024) + b"]"})
    with pytest.raises(ValidationError, match="refused as a likely zip bomb"):
        importers.parse("chatgpt", bomb, ADA)


def test_an_input_that_is_not_the_format_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"no conversations\.json in it"):
        importers.parse("chatgpt", FIXTURES / "markdown" / "vault", ADA)
    not_json = tmp_path / "conversations.json"
    not_json.write_text("{not json")
    with pytest.raises(
        ValidationError,
        match=r"conversations.json is not valid JSON \(Expecting property name enclosed in double quotes at byte 1\)",
    ):
        importers.parse("chatgpt", not_json, ADA)
    not_json.write_text('{"a": 1}')
    with pytest.raises(ValidationError, match="must be a list of conversations"):
        importers.parse("chatgpt", not_json, ADA)
    latin1 = tmp_path / "latin1.md"
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    assert skipped(importers.parse("markdown", latin1)) == [
        "file latin1.md: not imported: latin1.md is not UTF-8 text"
    ]


async def test_an_import_writes_them_dated_and_a_rerun_adds_nothing(
    db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    space = await make_space(db, "mine")
    space_id = await space_id_of(db, space)
    parsed = importers.parse("chatgpt", FIXTURES / "chatgpt")
    preview = await importers.preview(db, space_id, parsed.entries)
    assert (len(preview.documents), preview.memory_count, preview.already) == (3, 4, 0)
    report = await transfer.import_entries(db, space_id, space, parsed.entries, embedder.embed)
    assert (report.documents, report.imported, report.already) == (3, 4, 0)
    again = importers.parse("chatgpt", FIXTURES / "chatgpt")
    preview = await importers.preview(db, space_id, again.entries)
    assert (len(preview.documents), preview.memory_count, preview.already) == (0, 0, 7)
    rerun = await transfer.import_entries(db, space_id, space, again.entries, embedder.embed)
    assert (rerun.documents, rerun.imported, rerun.already) == (0, 0, 7)
    records = [r async for r in transfer.export_records(db, space_id, history=True)]
    lisbon = next(r for r in records if r["type"] == "document" and r["title"] == "Planning the Lisbon trip")
    assert lisbon["createdAt"] == "2024-06-17T08:00:00+00:00"
    pieces = [r for r in records if r["type"] == "memory" and r["document"] == lisbon["id"]]
    assert sorted(r["createdAt"] for r in pieces) == [
        "2024-06-17T08:00:10+00:00",
        "2024-06-17T08:01:10+00:00",
    ]


def test_the_zip_of_a_folder_reads_like_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "vault"
    shutil.copytree(FIXTURES / "markdown" / "vault", folder)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(tmp_path).as_posix())
    (tmp_path / "vault.zip").write_bytes(archive.getvalue())
    zipped = importers.parse("markdown", tmp_path / "vault.zip")
    plain = importers.parse("markdown", folder)
    assert [e.content for e in zipped.entries] == [e.content for e in plain.entries]
    assert json.dumps(skipped(zipped)).replace("vault/", "") == json.dumps(skipped(plain))


def test_mem0_and_memory_json_read_alike_in_every_shape_they_come_in(tmp_path: Path) -> None:
    """Read a value at a time, each shape of a format gives the same records: mem0's object (pretty
    or on one line), its bare list and its JSON lines; memory.json's lines and its early
    whole-graph object."""
    mem0 = json.loads((FIXTURES / "mem0" / "memories.json").read_text())
    items = mem0["results"]
    shapes = {
        "compact.json": json.dumps(mem0),
        "list.json": json.dumps(items, indent=2),
        "lines.jsonl": "".join(json.dumps(item) + "\n" for item in items),
    }
    expected = importers.parse("mem0", FIXTURES / "mem0" / "memories.json", ADA)
    for name, text in shapes.items():
        (tmp_path / name).write_text(text)
        parsed = importers.parse("mem0", tmp_path / name, ADA)
        assert [e.content for e in parsed.entries] == [e.content for e in expected.entries], name

    lines = [
        json.loads(line)
        for line in (FIXTURES / "memory-json" / "memory.json").read_text().splitlines()
        if line.startswith('{"')
    ]
    graph = {
        "entities": [item for item in lines if item["type"] == "entity"],
        "relations": [item for item in lines if item["type"] == "relation"],
    }
    (tmp_path / "memory.json").write_text(json.dumps(graph))
    whole = importers.parse("memory-json", tmp_path / "memory.json", ADA)
    (tmp_path / "memory.json").write_text(
        "".join(json.dumps(item) + "\n" for item in [*graph["entities"], *graph["relations"]])
    )
    by_line = importers.parse("memory-json", tmp_path / "memory.json", ADA)
    assert sorted(e.content for e in whole.entries) == sorted(e.content for e in by_line.entries)
    assert len(whole.entries) >= 4
