"""`memory-mcp export` / `import` as real processes, and `GET /v1/spaces/{key}/export` over real HTTP."""

from __future__ import annotations

import json
import os
import random
import re
import string
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import documents, identity, memories, pipeline, spaces
from memory_mcp.store.access import Role
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import run_server

FACTS = [
    ("Ada prefers tabs over spaces in Python files", "preferences"),
    ("The deploy window is Tuesday 10:00 to 12:00 UTC", "process"),
    ("Bob owns the billing service", "people"),
    ("Postgres runs with 16 GB of shared buffers", None),
    ("Line one of a note\nand its second line", "notes"),
]


TOKEN = "".join(random.Random(7).choices(string.ascii_letters + string.digits, k=36))


@pytest.fixture
def admin(db_urls: tuple[str, str]) -> Admin:
    return Admin(db_urls[1])


async def fill(db: Database, embedder: Embedder) -> None:
    """Space 'src': memories by two people, one restated twice (a chain of three), one forgotten."""
    await make_space(db, "src")
    await make_space(db, "dst")
    await make_space(db, "other")
    for name in ("ada", "bob"):
        await make_user(db, name, Role.WRITER)
    ada = await identity.authenticate(db, await make_key(db, "ada", {"src": "ReadWrite"}))
    bob = await identity.authenticate(db, await make_key(db, "bob", {"src": "ReadWrite"}))
    for i, (content, category) in enumerate(FACTS):
        ctx = identity.resolve_space(ada if i % 2 == 0 else bob, "src")
        await memories.save_memory(db, ctx, content, category, (await embedder.embed([content]))[0])
    ctx = identity.resolve_space(ada, "src")
    first = await memories.save_memory(db, ctx, "The team meets on Mondays", "process")
    second = await memories.save_memory(
        db, identity.resolve_space(bob, "src"), "The team meets on Tuesdays", supersedes_id=first.memory.id
    )
    await memories.save_memory(db, ctx, "The team meets on Wednesdays", supersedes_id=second.memory.id)
    await memories.save_memory(db, ctx, "A fact that was wrong", "notes")
    forgotten = await memories.forget_memory(db, ctx, "A fact that was wrong")
    assert forgotten.forgotten is not None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def comparable(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without what a new space renumbers: ids become the content they point at."""
    records = list(records)
    content = {r["id"]: r["content"] for r in records}
    out = []
    for r in records:
        r = dict(r)
        r["supersedes"] = content.get(r.pop("supersedes") or "")
        r.pop("id")
        r.pop("document")
        out.append(r)
    return sorted(out, key=lambda r: (r["createdAt"], r["content"]))


async def test_round_trip_gives_the_same_memories(
    admin: Admin, db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    await fill(db, embedder)
    first = tmp_path / "src.jsonl"
    done = admin.ok("export", "--space", "src", "-o", str(first))
    assert "exported 6 memories of space 'src'" in done.stderr
    exported = read_jsonl(first)
    assert {r["status"] for r in exported} == {"live"} and len(exported) == 6
    tabs = next(r for r in exported if r["content"].startswith("Ada prefers tabs"))
    assert tabs["category"] == "preferences"
    assert tabs["createdBy"] == {"name": "ada", "email": "ada@example.com", "displayName": "Ada"}
    latest = next(r for r in exported if r["content"] == "The team meets on Wednesdays")
    assert latest["version"] == 3 and latest["category"] == "process"

    imported = admin.ok("import", str(first), "--space", "dst")
    assert "imported 6 memories and 0 documents into 'dst'; 0 already there" in imported.stderr
    again = tmp_path / "dst.jsonl"
    admin.ok("export", "--space", "dst", "-o", str(again))
    assert comparable(read_jsonl(again)) == comparable(exported)
    # Embedded on the way in: search finds them by meaning.
    assert await memories.count_missing_embeddings(db) == 4  # only the four saved without a vector in src

    rerun = admin.ok("import", str(first), "--space", "dst")
    assert "imported 0 memories and 0 documents into 'dst'; 6 already there" in rerun.stderr
    assert await spaces.space_counts(db, "dst") == (6, 0)  # memories on their own: no documents


async def test_history_round_trip_keeps_versions_and_forgotten_memories(
    admin: Admin, db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    await fill(db, embedder)
    first = tmp_path / "src.jsonl"
    admin.ok("export", "--space", "src", "--history", "-o", str(first))
    exported = read_jsonl(first)
    statuses = sorted(r["status"] for r in exported)
    assert statuses == ["forgotten", *["live"] * 6, "superseded", "superseded"]
    chain = {r["content"]: r for r in exported if r["content"].startswith("The team meets")}
    assert chain["The team meets on Tuesdays"]["supersedes"] == chain["The team meets on Mondays"]["id"]
    assert chain["The team meets on Tuesdays"]["createdBy"]["name"] == "bob"

    admin.ok("import", str(first), "--space", "dst")
    again = tmp_path / "dst.jsonl"
    admin.ok("export", "--space", "dst", "--history", "-o", str(again))
    assert comparable(read_jsonl(again)) == comparable(exported)
    rerun = admin.ok("import", str(first), "--space", "dst")
    assert "imported 0 memories" in rerun.stderr and "9 already there" in rerun.stderr

    markdown = admin.ok("export", "--space", "dst", "--history", "--format", "markdown").stdout
    assert markdown.startswith("# Space dst\n")
    assert "## process" in markdown and "## uncategorised" in markdown
    assert "- The team meets on Wednesdays  \n" in markdown
    assert "version 3" in markdown and "forgotten" in markdown and "by Bob" in markdown
    assert markdown.index("## notes") < markdown.index("## people") < markdown.index("## preferences")


def bad_file(path: Path) -> None:
    good = {"type": "memory", "id": "a", "content": "A good memory", "createdAt": "2026-01-01T00:00:00+00:00"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({"type": "memory", "id": "b", "content": f"token ghp_{TOKEN}"}),
        json.dumps({"type": "memory", "id": "c", "content": "fine", "status": "archived"}),
        json.dumps({"type": "memory", "id": "d", "content": "   "}),
        json.dumps({**good, "id": "e", "content": "Another good one"}),
        json.dumps({"type": "memory", "id": "a", "content": "same id again"}),
        json.dumps(["a list"]),
    ]
    path.write_text("\n".join(lines) + "\n")


async def test_a_bad_file_is_refused_naming_every_bad_line(
    admin: Admin, db: Database, tmp_path: Path
) -> None:
    await make_space(db, "dst")
    path = tmp_path / "bad.jsonl"
    bad_file(path)
    refused = admin.run("import", str(path), "--space", "dst")
    assert refused.returncode == 1
    named = re.findall(r"invalid:\W*(line \d+):", refused.stderr)
    assert named == [f"line {n}" for n in (2, 3, 4, 5, 7, 8)], refused.stderr
    assert "line 3: content: looks like" in refused.stderr
    assert TOKEN not in refused.stderr  # the credential is not repeated back
    assert "line 4: status: must be one of live, superseded" in refused.stderr
    assert "line 7: id: repeats the memory of line 1" in refused.stderr
    assert "6 bad line(s)" in refused.stderr and "nothing imported" in refused.stderr
    assert await spaces.space_counts(db, "dst") == (0, 0)

    skipped = admin.ok("import", str(path), "--space", "dst", "--skip-invalid")
    assert "imported 2 memories" in skipped.stderr and "6 line(s) skipped" in skipped.stderr
    assert "skipped: line 5: content: must not be empty" in skipped.stderr
    assert await spaces.space_counts(db, "dst") == (2, 0)
    assert "space 'nowhere' not found" in admin.refused(
        "import", str(path), "--space", "nowhere", "--skip-invalid"
    )

    # Read from a pipe with no terminal width at all, every message is still one line.
    long_key = "a-space-whose-key-is-long-enough-to-pass-eighty-columns-alone"
    await make_space(db, long_key)
    done = admin.run("import", str(path), "--space", long_key, "--skip-invalid", columns=None)
    assert done.returncode == 0, done.stderr
    summary = f"imported 2 memories and 0 documents into '{long_key}'; 0 already there, 6 line(s) skipped"
    assert summary in done.stderr.splitlines()


async def test_rest_export_streams_the_jsonl_with_read_access(
    db_urls: tuple[str, str], db: Database, embedder: Embedder, admin: Admin
) -> None:
    await fill(db, embedder)
    await make_user(db, "reader", Role.READER)
    key = await make_key(db, "reader", {"src": "Read"})
    async with run_server(db_urls[0], embedder) as server:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(base_url=server.base, headers=headers, timeout=30) as http:
            answer = await http.get("/v1/spaces/src/export")
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"].startswith("application/x-ndjson")
            lines = answer.text.splitlines()
            assert lines == admin.ok("export", "--space", "src").stdout.splitlines()
            history = await http.get("/v1/spaces/src/export", params={"history": "true"})
            assert len(history.text.splitlines()) == 9

            hidden = await http.get("/v1/spaces/other/export")  # exists, but no grant
            absent = await http.get("/v1/spaces/never-made/export")
            assert (hidden.status_code, absent.status_code) == (404, 404)
            assert hidden.json() == {**absent.json(), "message": "space 'other' not found"}
            unauthenticated = await http.get("/v1/spaces/src/export", headers={"Authorization": ""})
            assert unauthenticated.status_code == 401


async def test_documents_and_their_memories_survive_a_history_round_trip(
    admin: Admin, db: Database, embedder: Embedder, tmp_path: Path
) -> None:
    await make_space(db, "src")
    await make_space(db, "dst")
    await make_user(db, "ada", Role.WRITER)
    ctx = identity.resolve_space(
        await identity.authenticate(db, await make_key(db, "ada", {"src": "ReadWrite"})), "src"
    )
    paragraphs = [
        f"Section {i}. "
        + " ".join(f"The runbook step {i}.{j} restarts the billing worker {j} times." for j in range(12))
        for i in range(12)
    ]
    prepared = pipeline.prepare_text("\n\n".join(paragraphs))
    stored, made = await documents.save_text(db, ctx, "runbooks", prepared)
    assert made > 1

    first = tmp_path / "src.jsonl"
    admin.ok("export", "--space", "src", "--history", "-o", str(first))
    exported = read_jsonl(first)
    (document,) = [r for r in exported if r["type"] == "document"]
    assert exported[0]["type"] == "document"  # before its memories
    assert (document["title"], document["source"], document["category"]) == (
        stored.document.title,
        "text",
        "runbooks",
    )
    pieces = [r for r in exported if r["type"] == "memory"]
    assert len(pieces) == made and {r["document"] for r in pieces} == {document["id"]}
    assert all(r["charEnd"] > r["charStart"] >= 0 for r in pieces)

    imported = admin.ok("import", str(first), "--space", "dst")
    assert f"imported {made} memories and 1 documents into 'dst'" in imported.stderr
    again = tmp_path / "dst.jsonl"
    admin.ok("export", "--space", "dst", "--history", "-o", str(again))
    records = read_jsonl(again)
    (copy,) = [r for r in records if r["type"] == "document"]
    assert {k: v for k, v in copy.items() if k != "id"} == {k: v for k, v in document.items() if k != "id"}
    copied = [r for r in records if r["type"] == "memory"]
    assert {r["document"] for r in copied} == {copy["id"]}
    assert comparable(copied) == comparable(pieces)
    markdown = admin.ok("export", "--space", "dst", "--format", "markdown").stdout
    assert f"## runbooks\n\n### {stored.document.title}\n" in markdown
    rerun = admin.ok("import", str(first), "--space", "dst")
    assert f"imported 0 memories and 0 documents into 'dst'; {made + 1} already there" in rerun.stderr


@contextmanager
def every_core_busy() -> Iterator[None]:
    """One process spinning per core for as long as the block runs."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


async def test_an_import_finishes_while_other_processes_keep_every_core_busy(
    admin: Admin, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bulk work waits for the embedder: with every core spinning in other processes and the
    interactive timeout far below what one batch of 64 takes, the import still lands in full,
    every memory with both of its vectors."""
    await make_space(db, "dst")
    count = 96  # two batches
    source = tmp_path / "many.jsonl"
    source.write_text(
        "".join(
            json.dumps(
                {
                    "type": "memory",
                    "id": f"m{i}",
                    "content": f"Fact {i}: the service number {i} is owned by team {i % 7} and deployed weekly.",
                    "status": "live",
                    "version": 1,
                }
            )
            + "\n"
            for i in range(count)
        )
    )
    monkeypatch.setenv("MEMORY_MCP_EMBEDDER_TIMEOUT_S", "0.05")
    with every_core_busy():
        # The whole command, model loading included, runs at a fraction of its usual speed.
        done = admin.ok("import", str(source), "--space", "dst", "--batch-size", "64", timeout=1200)
    assert f"imported {count} memories and 0 documents into 'dst'" in done.stderr
    assert await spaces.space_counts(db, "dst") == (count, 0)
    assert await memories.count_missing_embeddings(db) == 0
    assert await memories.count_missing_embeddings(db, "static_embedding") == 0
