"""The document worker: every ``serve`` process claims queued files, extracts, chunks, embeds, writes.

Extraction is blocking and runs in a thread; the event loop meanwhile renews the job's lease and
writes its progress (at most once a second). Nothing of a document is visible until its last
step, one transaction with every memory (store.documents.complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from memory_mcp.core import metrics
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import BulkPolicy, Embedder, EmbedderUnavailable, embed_bulk
from memory_mcp.embedder.static import StaticModel
from memory_mcp.store import documents, extractors, jobs, pipeline
from memory_mcp.store.db import Database
from memory_mcp.store.errors import DatabaseUnavailable, StoreError, ValidationError

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 1.0  # progress is written at most this often
# Pieces of a document are near a memory's full length (about 300 tokens): 64 of them in one call
# outlasted the embedder's 10 s timeout on two busy cores, and every later piece went unembedded.
DOCUMENT_BATCH = 16
EXTRACTION_SHARE = 0.8  # of the progress bar: extraction, then embedding the rest


async def embed_batches(
    embedder: Embedder | None,
    texts: Sequence[str],
    batch_size: int,
    timeout_s: float,
    progress: Callable[[float], None] | None = None,
    *,
    bulk: BulkPolicy | None = None,
) -> list[list[float] | None]:
    """Vectors for ``texts``, ``batch_size`` (at most :data:`DOCUMENT_BATCH`) at a time; None for the
    rest once the embedder fails (the memories are written anyway and embedded later by the backfill).

    ``bulk`` (the background worker): each batch waits and retries as the policy says, and a batch
    that still fails is tried again at half the size, so a busy embedder slows a document down
    instead of leaving it unembedded; only a single text that fails gives up. A request waiting for
    its answer (a long ``add_memory``) gives up at once.
    """
    vectors: list[list[float] | None] = []
    size = max(1, min(batch_size, DOCUMENT_BATCH))
    while embedder is not None and len(vectors) < len(texts):
        batch = list(texts[len(vectors) : len(vectors) + size])
        try:
            if bulk is not None:
                vectors.extend(await embed_bulk(embedder, batch, bulk))
            else:
                async with asyncio.timeout(timeout_s * 2):  # the embedder's own timeout comes first
                    vectors.extend(await embedder.embed(batch))
        except (EmbedderUnavailable, TimeoutError) as exc:
            if bulk is None or size == 1:
                log.warning("embedding a document failed, its memories are embedded later: %s", exc)
                break
            size = max(1, size // 2)
            continue
        if progress is not None:
            progress(len(vectors) / len(texts))
    return vectors + [None] * (len(texts) - len(vectors))


class DocumentWorker:
    """One claim-extract-write loop; a process runs ``document_workers`` of them.

    A job that has run ``document_slice_s`` no longer holds the loop: it goes on, and the loop also
    takes the next job of another space (at most ``document_max_parallel`` jobs, each of its own
    space). So one space's long job (a 300-page scan) does not make another space's small file wait
    for its end.
    """

    def __init__(
        self,
        db: Database,
        embedder: Callable[[], Embedder | None],
        settings: Settings,
        static: Callable[[], StaticModel | None] = lambda: None,
    ) -> None:
        self.db = db
        self.embedder = embedder  # read at each job: the embedder may connect after start-up
        self.static = static  # likewise: the static model may still be distilling
        self.settings = settings
        self.name = jobs.worker_name()
        self.wakeup = asyncio.Event()
        self.work_dir = settings.data_dir / "documents"
        self.model_dir = settings.data_dir / "models"

    def wake(self) -> None:
        """Look at the queue now (a document was just queued by this process)."""
        self.wakeup.set()

    async def run(self) -> None:
        running: dict[asyncio.Task[None], tuple[uuid.UUID, float]] = {}  # job -> (space, started)
        try:
            while True:
                if self._may_take_another(running):
                    try:
                        metrics.DOCUMENTS_QUEUE_DEPTH.set(await jobs.queue_depth(self.db))
                        job = await jobs.claim(
                            self.db,
                            self.name,
                            self.settings.document_lease_s,
                            [space for space, _ in running.values()],
                        )
                        if job is not None:
                            task = asyncio.create_task(self.process(job))
                            running[task] = (job.space_id, time.monotonic())
                            continue
                    except DatabaseUnavailable:
                        pass  # the database logs the outage once; the next round tries again
                    except Exception:
                        log.exception("the document worker failed a round")
                await self._wait(running)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _may_take_another(self, running: dict[asyncio.Task[None], tuple[uuid.UUID, float]]) -> bool:
        """Free, or every job in hand has run past its slice and there is room for one more."""
        if len(running) >= self.settings.document_max_parallel:
            return False
        now = time.monotonic()
        return all(now - started >= self.settings.document_slice_s for _, started in running.values())

    async def _wait(self, running: dict[asyncio.Task[None], tuple[uuid.UUID, float]]) -> None:
        """Until a job ends, one in hand passes its slice, this process queues a file, or the poll."""
        timeout = self.settings.document_poll_s
        now = time.monotonic()
        # A job still inside its slice wakes the loop when the slice ends; jobs past it do not (the
        # queue was just looked at for them), or an idle queue would be polled in a tight loop.
        slice_ends = [
            started + self.settings.document_slice_s
            for _, started in running.values()
            if started + self.settings.document_slice_s > now
        ]
        if slice_ends and len(running) < self.settings.document_max_parallel:
            timeout = min(timeout, max(0.05, min(slice_ends) - now))
        self.wakeup.clear()
        woken = asyncio.create_task(self.wakeup.wait())
        try:
            await asyncio.wait([woken, *running], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        for task in [t for t in running if t.done()]:
            del running[task]
            if not task.cancelled() and task.exception() is not None:
                log.error("a document job failed outside its handler", exc_info=task.exception())

    async def process(self, job: jobs.Job) -> None:
        """Work one claimed job to its end: done, failed, or (database gone) left for its lease to run out."""
        started = time.perf_counter()
        kind = "unknown"
        outcome = "failed"
        reason = "error"
        progress = _Progress()
        beat = asyncio.create_task(self._heartbeat(job, progress))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=self.work_dir))
        try:
            if job.attempts > self.settings.document_max_attempts:
                reason = "interrupted"
                await jobs.fail(
                    self.db,
                    job,
                    f"extraction was interrupted {job.attempts - 1} times (the worker stopped each time); "
                    "the file may be too large for the memory of the server: split it and upload the parts",
                )
                return
            row = await documents.write_file(self.db, job, folder / "upload")
            media_type = str(row["media_type"])
            kind = extractors.SUPPORTED.get(media_type, "unknown")
            extracted = await asyncio.to_thread(
                extractors.extract,
                folder / "upload",
                media_type,
                language=None,
                progress=lambda f: progress.set(f * EXTRACTION_SHARE),
                model_dir=self.model_dir,
                limits=job.limits(
                    extractors.Limits(self.settings.max_pdf_pages, self.settings.max_media_seconds)
                ),
            )
            title = row["title"] if (row["metadata"] or {}).get("titleGiven") else None
            contents = await asyncio.to_thread(
                pipeline.prepare, extracted, title=title, file_name=row["file_name"]
            )
            refused = await asyncio.to_thread(documents.find_secret_in, contents.pieces)
            if refused is not None:
                raise refused
            vectors = await embed_batches(
                self.embedder(),
                [p.text for p in contents.pieces],
                self.settings.embedder_max_batch,
                self.settings.embedder_timeout_s,
                lambda f: progress.set(EXTRACTION_SHARE + f * (1 - EXTRACTION_SHARE)),
                bulk=BulkPolicy.from_settings(self.settings),
            )
            static = self.static()
            statics = (
                await asyncio.to_thread(static.vectors, [p.text for p in contents.pieces]) if static else []
            )
            made = await documents.complete(
                self.db, job, dataclasses.replace(contents, vectors=vectors, static_vectors=statics)
            )
            if made is None:
                outcome = "lost"
                log.warning(
                    "document %s was taken over by another worker; its result is dropped", job.document_id
                )
            else:
                outcome = "done"
                log.info("document %s extracted: %d memories", job.document_id, made)
        except extractors.ExtractionFailed as exc:
            reason = "extraction"
            await jobs.fail(self.db, job, str(exc))
        except ValidationError as exc:
            reason = "refused"
            await jobs.fail(self.db, job, exc.message)
        except DatabaseUnavailable:
            outcome = "interrupted"  # the lease runs out and the job is taken again
        except StoreError as exc:  # a credential in the file, a quota
            reason = "refused"
            await jobs.fail(self.db, job, str(exc))
        except Exception as exc:
            log.exception("extracting document %s failed", job.document_id)
            await jobs.fail(
                self.db, job, f"the file could not be read ({type(exc).__name__}); try another format"
            )
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            shutil.rmtree(folder, ignore_errors=True)
            metrics.DOCUMENT_JOB_DURATION.labels(kind=kind, outcome=outcome).observe(
                time.perf_counter() - started
            )
            if outcome == "failed":
                metrics.DOCUMENT_JOB_FAILURES.labels(kind=kind, reason=reason).inc()

    async def _heartbeat(self, job: jobs.Job, progress: _Progress) -> None:
        interval = min(self.settings.document_lease_s / 3, PROGRESS_INTERVAL_S)
        written = -1.0
        while True:
            await asyncio.sleep(interval)
            value = progress.value
            try:
                held = await jobs.heartbeat(
                    self.db, job, self.settings.document_lease_s, value if value != written else None
                )
            except DatabaseUnavailable:
                continue
            written = value
            if not held:
                log.warning("document %s: this worker lost its lease", job.document_id)
                return


class _Progress:
    """The latest progress, set from the extraction thread, read by the heartbeat (a float: atomic)."""

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = max(self.value, min(1.0, value))
