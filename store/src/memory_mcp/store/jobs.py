"""The extraction queue: documents waiting for a worker, claimed with ``FOR UPDATE SKIP LOCKED``.

A worker holds a job by a lease it renews while it works (the heartbeat). A worker that dies stops
renewing; once its lease has run out, the job is claimed again by whichever worker asks next, in
this process or another pod. The job row goes in the transaction that writes the document's result,
so a job is either waiting, held, or finished, never finished twice.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .audit import record
from .db import Database
from .extractors.base import Limits
from .memories import _every_space


@dataclass(frozen=True)
class Job:
    document_id: uuid.UUID
    space_id: uuid.UUID
    worker: str
    attempts: int  # claims so far, this one included
    # The space's own limits of one file when it declares them (spec.quotas), read with the claim.
    max_pdf_pages: int | None = None
    max_media_seconds: int | None = None

    def limits(self, server: Limits) -> Limits:
        """The limits this job's file is held to: the space's own where it sets them, else ``server``'s."""
        return Limits(
            max_pages=server.max_pages if self.max_pdf_pages is None else self.max_pdf_pages,
            max_media_seconds=(
                server.max_media_seconds if self.max_media_seconds is None else self.max_media_seconds
            ),
        )


def worker_name() -> str:
    """Who holds a lease: host, process and a random part (two workers of one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


async def enqueue(conn: AsyncConnection, document_id: uuid.UUID, space_id: uuid.UUID) -> None:
    """Queue a document in the caller's transaction: the job exists exactly when its document does."""
    await conn.execute(
        text("INSERT INTO document_jobs (document_id, space_id) VALUES (:d, :s)"),
        {"d": document_id, "s": space_id},
    )


# Fair across spaces: the next job is the oldest of the space with the fewest jobs being worked now
# (by any worker of any pod), so one space's queue of large files never holds another space's small
# one behind it; ``:skip`` lists spaces the claiming worker is already working for.
_CLAIM_SQL = """
    WITH next AS (
      SELECT j.document_id FROM document_jobs j
      WHERE (j.lease_until IS NULL OR j.lease_until < now()) AND NOT (j.space_id = ANY(CAST(:skip AS uuid[])))
      ORDER BY (
        SELECT count(*) FROM document_jobs b WHERE b.space_id = j.space_id AND b.lease_until >= now()
      ), j.enqueued_at, j.document_id
      LIMIT 1
      FOR UPDATE SKIP LOCKED
    ), claimed AS (
      UPDATE document_jobs j
      SET attempts = j.attempts + 1, worker = :w, claimed_at = now(),
          lease_until = now() + make_interval(secs => :lease)
      FROM next WHERE j.document_id = next.document_id
      RETURNING j.document_id, j.space_id, j.attempts
    ), started AS (
      UPDATE documents d SET status = 'processing', progress = 0, updated_at = now()
      FROM claimed WHERE d.id = claimed.document_id
    )
    SELECT c.document_id, c.space_id, c.attempts, s.max_pdf_pages, s.max_media_seconds
    FROM claimed c LEFT JOIN spaces s ON s.id = c.space_id  -- LEFT: the claim above stands even if no row came back
"""


async def claim(
    db: Database, worker: str, lease_s: float, skip_spaces: Sequence[uuid.UUID] = ()
) -> Job | None:
    """The next job nobody holds (or whose holder's lease ran out), now held by ``worker``: the oldest
    of the space with the fewest jobs being worked, leaving out ``skip_spaces``; with the space's own
    file limits."""
    async with _every_space(db) as conn:
        row = (
            await conn.execute(
                text(_CLAIM_SQL), {"w": worker, "lease": lease_s, "skip": [str(s) for s in skip_spaces]}
            )
        ).first()
    if row is None:
        return None
    return Job(
        row.document_id, row.space_id, worker, int(row.attempts), row.max_pdf_pages, row.max_media_seconds
    )


async def heartbeat(db: Database, job: Job, lease_s: float, progress: float | None = None) -> bool:
    """Renew the lease (and write the progress); False when the job is no longer this worker's."""
    async with db.transaction([job.space_id]) as conn:
        held = (
            await conn.execute(
                text(
                    "UPDATE document_jobs SET lease_until = now() + make_interval(secs => :lease) "
                    "WHERE document_id = :d AND worker = :w RETURNING 1"
                ),
                {"d": job.document_id, "w": job.worker, "lease": lease_s},
            )
        ).first()
        if held is not None and progress is not None:
            await conn.execute(
                text("UPDATE documents SET progress = :p, updated_at = now() WHERE id = :d"),
                {"p": max(0.0, min(1.0, progress)), "d": job.document_id},
            )
    return held is not None


async def release(conn: AsyncConnection, job: Job) -> bool:
    """Remove the job in the transaction that records its outcome; False if another worker holds it
    now (this one's lease ran out), and that transaction must then write nothing."""
    gone = (
        await conn.execute(
            text("DELETE FROM document_jobs WHERE document_id = :d AND worker = :w RETURNING 1"),
            {"d": job.document_id, "w": job.worker},
        )
    ).first()
    return gone is not None


async def fail(db: Database, job: Job, reason: str) -> bool:
    """Mark the document failed with ``reason`` and drop its job and file; False if no longer held."""
    async with db.transaction([job.space_id]) as conn:
        if not await release(conn, job):
            return False
        await conn.execute(
            text("UPDATE documents SET status = 'failed', error = :e, updated_at = now() WHERE id = :d"),
            {"e": reason[:1000], "d": job.document_id},
        )
        await conn.execute(text("DELETE FROM document_files WHERE document_id = :d"), {"d": job.document_id})
        await record(
            conn,
            "system",
            "document.failed",
            "document",
            str(job.document_id),
            space_id=job.space_id,
            details={"error": reason[:300]},
        )
    return True


async def queue_depth(db: Database) -> int:
    """Jobs waiting or being worked, all spaces."""
    async with _every_space(db) as conn:
        return int((await conn.execute(text("SELECT count(*) FROM document_jobs"))).scalar_one())
