"""Documents from long texts and files: chunking, the queue (a worker killed mid-job), tokens, forget."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.server.documents_worker import DocumentWorker
from memory_mcp.store import audit, chunking, documents, identity, jobs, memories, pipeline, uploads
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AccessDenied, UploadTokenRefused
from memory_mcp.store.extractors import Section
from memory_mcp.store.models import SpaceContext
from memory_mcp.store.summary import summarize, title_for
from memory_mcp.store.validation import MAX_CONTENT
from tests.factories import caller_for, make_space


async def writer(db: Database, access: Access = Access.READ_WRITE) -> SpaceContext:
    space = await make_space(db)
    caller = await caller_for(db, grants={space: access}, default=space)
    return identity.resolve_space(caller, None)


def long_text(paragraphs: int = 12) -> str:
    """Paragraphs of distinct sentences, about 10,000 characters in all."""
    return "\n\n".join(
        " ".join(
            f"Paragraph {p} sentence {s} says that team {p * 7 + s} ships release {p}.{s} on day {s + p}."
            for s in range(12)
        )
        for p in range(paragraphs)
    )


# --- chunking and summaries --------------------------------------------------------------------


def test_pieces_are_stretches_of_the_content_within_one_memory() -> None:
    body = long_text()
    giant = "word " * 900  # a paragraph without sentence ends
    content, pieces = chunking.chunk([Section(body), Section(giant.strip(), page=2)])
    assert len(pieces) > 5
    for piece in pieces:
        assert content[piece.start : piece.end] == piece.text
        assert 0 < len(piece.text) <= MAX_CONTENT
    # Cut at paragraph or sentence ends: every piece of the first section ends a sentence.
    assert all(p.text.endswith(".") for p in pieces if p.page is None)
    assert {p.page for p in pieces} == {None, 2}
    ranges = chunking.pages(content, pieces)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(content)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_separate_sections_are_never_merged() -> None:
    rows = [Section(f"name,team\nrow{i},t{i}", separate=True) for i in range(3)]
    _, pieces = chunking.chunk([Section("Intro."), *rows])
    assert [p.text for p in pieces] == ["Intro.", *(r.text for r in rows)]


def test_summary_picks_sentences_of_the_document_and_the_title_its_heading() -> None:
    content = (
        "# Deploy guide\n\nThe deploy pipeline builds the image. The deploy pipeline then runs the tests. "
        "Lunch is at noon. The deploy pipeline finally promotes the image to production."
    )
    summary = summarize(content, sentences=2)
    assert "deploy pipeline" in summary and "Lunch" not in summary
    assert title_for(content, given=None, heading=None, file_name=None) == "Deploy guide"
    assert title_for(content, given=None, heading=None, file_name="notes.md") == "notes.md"
    assert title_for(content, given="Mine", heading="H", file_name="f") == "Mine"


def test_the_summary_of_a_hard_wrapped_manual_is_its_prose_not_its_listings() -> None:
    """PDF text comes as lines: a title page, wrapped paragraphs with words split at line ends, and
    reference listings that repeat the document's most frequent words."""
    listing = "\n".join(
        f"[Function] int ledger_{name}_entry (const ledger_node * root, char * error_{name})\n"
        f"root: the ledger node the entry is added to, or NULL for a new ledger."
        for name in ("add", "find", "drop", "copy", "merge", "split")
    )
    content = (
        "Ledgerkit\nA double-entry ledger library for small shops\nfor version 2.3, 4 March 2026\n"
        "Jane Doe\n\n"
        "This manual is for Ledgerkit 2.3, a library that keeps double-entry ledgers for small shops\n"
        "and checks every posting against the balance rules before it is written, so that no manip-\n"
        "ulation of a ledger node can leave the books unbalanced.\n\n"
        f"{listing}\n\n"
        "Each ledger keeps its entries in the order they were posted. A ledger node holds one entry\n"
        "and the running balance of the ledger after it.\n"
    )
    summary = summarize(content)
    assert summary.startswith("This manual is for Ledgerkit 2.3, a library that keeps double-entry ledgers")
    assert "no manipulation of a ledger node" in summary  # the line break inside a word is gone
    assert "[Function]" not in summary and "_entry" not in summary and "Jane Doe" not in summary


def test_the_summary_of_a_readme_leaves_out_badges_links_and_code() -> None:
    content = (
        "# tidyq\n\n"
        "[![build](https://ci.example.com/tidyq.svg)](https://ci.example.com/tidyq) "
        "[![pypi](https://img.example.com/v/tidyq.svg)](https://pypi.example.com/p/tidyq)\n\n"
        "tidyq is a small job queue for [PostgreSQL](https://www.postgresql.org) that runs jobs "
        "in the order they were queued.\n\n"
        "```python\nfrom tidyq import Queue\nQueue(dsn).put(job)  # queue a job for the queue\n```\n\n"
        "A job that fails is tried again later, with a longer wait each time. "
        "See https://docs.example.com/tidyq for the queue's settings.\n\n"
        "| setting | default |\n|---|---|\n| queue retries | 5 |\n"
    )
    summary = summarize(content)
    assert summary.startswith("tidyq is a small job queue for PostgreSQL that runs jobs in the order")
    assert "A job that fails is tried again later" in summary
    for markup in ("](", "http", "![", "```", "import", "|"):
        assert markup not in summary, markup


def test_a_text_without_sentences_is_summarised_by_its_beginning() -> None:
    rows = "name,team\nada,core\nbob,billing"
    assert summarize(rows) == "name,team ada,core bob,billing"
    # Text no pattern can finish (a line of base64, runs of brackets): linear work, the beginning.
    for blob in ("QUJD" * 50_000, "[" * 200_000, "[a](" * 50_000, "<a" * 100_000, "x@" * 100_000):
        assert summarize(blob) == blob[:597] + "..."


# --- long texts ----------------------------------------------------------------------------------


async def test_long_text_becomes_one_document_of_several_memories(db: Database, embedder: Embedder) -> None:
    ctx = await writer(db)
    content = long_text()
    assert 9000 < len(content) < 11000
    prepared = pipeline.prepare_text(content)
    vectors = await embedder.embed([p.text for p in prepared.pieces])
    stored, made = await documents.save_text(db, ctx, "notes", dataclasses.replace(prepared, vectors=vectors))
    assert stored.created and made == len(prepared.pieces) > 1
    doc = await documents.get_document(db, ctx.caller, stored.document.id)
    assert doc.source == "text" and doc.memory_count == made and doc.status == "done"
    listed = (await memories.list_memories(db, ctx, limit=50)).items
    assert len(listed) == made and {m.document_id for m in listed} == {doc.id}
    assert all(m.category == "notes" and m.has_embedding for m in listed)
    for m in listed:
        assert m.char_start is not None and m.char_end is not None
        assert content[m.char_start : m.char_end] == m.content
    again, count = await documents.save_text(db, ctx, "notes", prepared)
    assert not again.created and again.document.id == doc.id and count == made


# --- files and the queue ---------------------------------------------------------------------------


async def queue_file(
    db: Database, ctx: SpaceContext, tmp_path: Path, body: str, name: str = "notes.md"
) -> uuid.UUID:
    path = tmp_path / name
    path.write_text(body)
    stored = await documents.create_upload(
        db,
        ctx,
        path,
        digest=memories.content_hash(body),
        size=path.stat().st_size,
        media_type="text/markdown",
        name=name,
    )
    assert stored.created
    return stored.document.id


CLAIM_AND_HANG = """
import asyncio, sys
from memory_mcp.store import jobs
from memory_mcp.store.db import Database

async def main():
    db = Database(sys.argv[1], pool_size=1)
    job = await jobs.claim(db, "doomed-worker", float(sys.argv[2]))
    print(job.document_id if job else "none", flush=True)
    await asyncio.sleep(3600)  # "extracting" until killed

asyncio.run(main())
"""


async def test_a_job_whose_worker_was_killed_is_finished_by_another(
    db: Database, db_urls: tuple[str, str], embedder: Embedder, tmp_path: Path
) -> None:
    ctx = await writer(db)
    body = "# Incident log\n\n" + "\n\n".join(
        f"Incident {i} was resolved by rotating disk {i}." for i in range(8)
    )
    doc_id = await queue_file(db, ctx, tmp_path, body)
    queued = await documents.get_document(db, ctx.caller, doc_id)
    assert queued.status == "queued" and queued.progress == 0

    # A real worker process claims the job, then dies without a word (SIGKILL).
    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLAIM_AND_HANG, db_urls[0], "1", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert doomed.stdout is not None
        claimed = await doomed.stdout.readline()
        assert claimed.decode().strip() == str(doc_id)
        assert (await documents.get_document(db, ctx.caller, doc_id)).status == "processing"
    finally:
        doomed.kill()
        await doomed.wait()

    # Another worker takes the job once the dead one's lease has run out, and finishes it.
    settings = Settings(data_dir=tmp_path / "data", document_lease_s=1, document_poll_s=0.1)
    worker = DocumentWorker(db, lambda: embedder, settings)
    job = None
    for _ in range(200):
        job = await jobs.claim(db, worker.name, settings.document_lease_s)
        if job is not None:
            break
        await asyncio.sleep(0.05)
    assert job is not None and job.document_id == doc_id and job.attempts == 2
    await worker.process(job)
    done = await documents.get_document(db, ctx.caller, doc_id)
    assert done.status == "done" and done.progress == 1 and done.memory_count >= 1
    assert done.title == "Incident log" and "rotating disk 7" in (done.content or "")
    assert await jobs.queue_depth(db) == 0

    # The dead worker's result, were it to arrive now, is refused and writes nothing.
    late = jobs.Job(doc_id, ctx.space.id, "doomed-worker", 1)
    prepared = pipeline.prepare_text("A late and different result.")
    assert await documents.complete(db, late, prepared) is None
    assert (await documents.get_document(db, ctx.caller, doc_id)).memory_count == done.memory_count


async def test_progress_is_written_while_a_job_is_held(db: Database, tmp_path: Path) -> None:
    ctx = await writer(db)
    doc_id = await queue_file(db, ctx, tmp_path, "# Title\n\nSome text to extract.")
    job = await jobs.claim(db, "w1", 30)
    assert job is not None
    assert await jobs.heartbeat(db, job, 30, 0.5)
    assert (await documents.get_document(db, ctx.caller, doc_id)).progress == 0.5
    assert await jobs.claim(db, "w2", 30) is None  # held: nobody else takes it
    assert not await jobs.heartbeat(db, dataclasses.replace(job, worker="w2"), 30, 0.9)
    assert await jobs.fail(db, job, "the file is encrypted")
    failed = await documents.get_document(db, ctx.caller, doc_id)
    assert failed.status == "failed" and failed.error == "the file is encrypted"


async def test_a_job_interrupted_too_often_fails_with_a_reason(
    db: Database, tmp_path: Path, embedder: Embedder
) -> None:
    ctx = await writer(db)
    doc_id = await queue_file(db, ctx, tmp_path, "Some text.")
    settings = Settings(data_dir=tmp_path / "data", document_max_attempts=1)
    worker = DocumentWorker(db, lambda: embedder, settings)
    job = await jobs.claim(db, worker.name, 30)
    assert job is not None
    await worker.process(dataclasses.replace(job, attempts=2))
    failed = await documents.get_document(db, ctx.caller, doc_id)
    assert failed.status == "failed" and "interrupted 1 times" in (failed.error or "")


async def test_the_same_file_in_the_same_space_is_the_same_document(db: Database, tmp_path: Path) -> None:
    ctx = await writer(db)
    first = await queue_file(db, ctx, tmp_path, "Same bytes.")
    path = tmp_path / "copy.md"
    path.write_text("Same bytes.")
    again = await documents.create_upload(
        db,
        ctx,
        path,
        digest=memories.content_hash("Same bytes."),
        size=11,
        media_type="text/markdown",
        name="copy.md",
    )
    assert not again.created and again.document.id == first
    other = await writer(db)
    elsewhere = await documents.create_upload(
        db,
        other,
        path,
        digest=memories.content_hash("Same bytes."),
        size=11,
        media_type="text/markdown",
        name="c.md",
    )
    assert elsewhere.created and elsewhere.document.id != first


# --- forget -------------------------------------------------------------------------------------


async def test_forgetting_a_document_forgets_its_memories_keeps_history_and_audits(db: Database) -> None:
    ctx = await writer(db)
    prepared = pipeline.prepare_text(long_text(4))
    stored, made = await documents.save_text(db, ctx, None, prepared)
    result = await documents.forget_document(db, ctx.caller, memories.short_id(stored.document.id))
    assert not result.already and result.memories_forgotten == made
    assert (await memories.list_memories(db, ctx)).total == 0
    forgotten = await memories.list_memories(db, ctx, status="forgotten", limit=50)
    assert forgotten.total == made and {m.document_id for m in forgotten.items} == {stored.document.id}
    listed = (await documents.list_documents(db, ctx)).items
    assert listed[0].id == stored.document.id and listed[0].forgotten_at is not None
    events = await audit.list_events(db, action="document.forgotten")
    assert [e.target_id for e in events] == [str(stored.document.id)]
    assert events[0].details == {"memories": made}
    again = await documents.forget_document(db, ctx.caller, stored.document.id)
    assert again.already and again.memories_forgotten == 0
    reader = await caller_for(db, grants={ctx.space.key: Access.READ})
    with pytest.raises(AccessDenied):
        await documents.forget_document(db, reader, stored.document.id)


# --- upload tokens ------------------------------------------------------------------------------


async def test_an_upload_token_works_once_for_its_key_and_space(db: Database) -> None:
    ctx = await writer(db)
    token, expires_at = await uploads.create_upload_token(db, ctx)
    async with db.transaction() as conn:
        ttl = (await conn.execute(text("SELECT :e - now()"), {"e": expires_at})).scalar_one()
    assert 0 < ttl.total_seconds() <= uploads.MAX_TOKEN_TTL_S

    stranger = await caller_for(db, grants={ctx.space.key: Access.READ_WRITE})
    with pytest.raises(UploadTokenRefused):
        await uploads.consume_upload_token(db, token, presenter=stranger)
    used = await uploads.consume_upload_token(db, token, presenter=ctx.caller)
    assert used.space.id == ctx.space.id and used.caller.key.id == ctx.caller.key.id
    with pytest.raises(UploadTokenRefused):
        await uploads.consume_upload_token(db, token)

    expiring, _ = await uploads.create_upload_token(db, ctx)
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE upload_tokens SET expires_at = now() - interval '1 second'"))
    with pytest.raises(UploadTokenRefused):
        await uploads.consume_upload_token(db, expiring)


async def test_a_read_grant_gets_no_upload_token(db: Database) -> None:
    ctx = await writer(db, Access.READ)
    with pytest.raises(AccessDenied):
        await uploads.create_upload_token(db, ctx)
