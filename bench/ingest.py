"""Ingest harness: how fast files become memories, and what a large file costs the server.

In process (the extractors, chunking and the in-process embedder, no database):
  - a text PDF: pages/s of extraction alone, and of extraction + chunking + embedding;
  - scanned pages: seconds of OCR per page (rendered at 200 dpi, Tesseract eng+deu+ita);
  - speech: transcription time as a multiple of the recording's length (whisper-base int8).
End to end through a real `memory-mcp serve` (its own data dir and embedded PostgreSQL):
  - a text PDF: pages/s from the upload to status done (extraction, chunking, embedding, writing);
  - a PDF of 50 MB (photo pages with a text layer, just under the default upload limit): the
    server process's peak resident memory while it is stored, extracted and written.

    python -m bench.ingest [--pages 100] [--ocr-pages 6] [--speech-seconds 60] [--big-mb 49.9] [--no-serve]

Targets on the two-core development machine: >= 10 text-PDF pages/s end to end, <= 2 s an OCR
page, <= 0.5x real time for speech. CI never runs this; it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import psutil

from bench.common import machine, plain_encoding_seconds, serve_process
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import make_embedder
from memory_mcp.store import extractors, pipeline
from memory_mcp.store.extractors import media
from tests import samples

WORDS = [
    "billing",
    "cluster",
    "replica",
    "backup",
    "deploy",
    "freeze",
    "ingress",
    "certificate",
    "rotate",
    "latency",
    "budget",
    "quarter",
    "invoice",
    "warehouse",
    "delivery",
    "customer",
    "contract",
    "renewal",
    "storage",
    "archive",
    "audit",
    "record",
    "incident",
    "runbook",
    "owner",
    "schedule",
    "migration",
    "schema",
    "index",
    "query",
    "vacuum",
    "partition",
    "retention",
    "policy",
    "alert",
    "dashboard",
    "metric",
    "threshold",
    "capacity",
    "region",
    "failover",
    "network",
    "firewall",
    "gateway",
    "token",
    "secret",
    "review",
    "approval",
    "release",
    "version",
    "rollback",
    "canary",
    "traffic",
    "weekend",
    "shift",
    "handover",
    "report",
]


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (Tesseract): unlike the wall clock, it
    does not grow when other work shares the cores."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


LINES_PER_PAGE = 40  # about 2,800 characters a page, a dense page of a report
LINE_WORDS = 9


def sentence_lines(rng: random.Random, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(LINE_WORDS)).capitalize() + "." for _ in range(count)]


def text_pages(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"Page {n + 1}.\n" + "\n".join(sentence_lines(rng, LINES_PER_PAGE)) for n in range(count)]


def photo_pdf(path: Path, megabytes: float) -> tuple[Path, int]:
    """A PDF of about `megabytes` MB: pages of incompressible photos under a text layer."""
    from io import BytesIO

    from PIL import Image

    side = 1100
    images: list[tuple[bytes, int, int]] = []
    size = 0
    target = int(megabytes * 1_000_000) - 200_000  # room for the text and the structure
    while size < target:
        buffer = BytesIO()
        Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(buffer, "JPEG", quality=80)
        jpeg = buffer.getvalue()
        if size + len(jpeg) > target:
            break
        images.append((jpeg, side, side))
        size += len(jpeg)
    samples.pdf_with_text(path, text_pages(len(images), seed=11), images=images)
    return path, len(images)


def scanned_pages_pdf(path: Path, count: int) -> Path:
    """`count` A4 pages at 150 dpi, each a picture of 40 lines of text and no text layer."""
    rng = random.Random(3)
    pages = [
        samples.text_image(sentence_lines(rng, LINES_PER_PAGE), width=1240, size=22) for _ in range(count)
    ]
    pages[0].save(path, "PDF", resolution=150, save_all=True, append_images=pages[1:])
    return path


def speech_wav(path: Path, seconds: float) -> Path:
    # espeak-ng at 150 words a minute.
    rng = random.Random(5)
    words = int(seconds * 150 / 60)
    lines = sentence_lines(rng, max(1, words // LINE_WORDS))
    return samples.speech_wav(path, " ".join(lines))


async def in_process(args: argparse.Namespace, work: Path) -> None:
    # A generous timeout: this measures throughput, and a busy machine must not turn it into a failure.
    settings = Settings(embedder="local", embedder_timeout_s=600)
    embedder = await make_embedder(settings)
    try:
        pdf = samples.pdf_with_text(work / "text.pdf", text_pages(args.pages))
        await embedder.embed(["warm up the model"])
        cpu = cpu_seconds()
        started = time.perf_counter()
        extracted = extractors.extract(
            pdf, "application/pdf", language=None, progress=extractors.no_progress, model_dir=work
        )
        extracted_s = time.perf_counter() - started
        contents = pipeline.prepare(extracted, file_name=pdf.name)
        texts = [p.text for p in contents.pieces]
        for at in range(0, len(texts), settings.embedder_max_batch):
            await embedder.embed(texts[at : at + settings.embedder_max_batch])
        total_s = time.perf_counter() - started
        total_cpu = cpu_seconds() - cpu
        chars = sum(len(p) for p in text_pages(args.pages)) / args.pages
        precision = getattr(getattr(embedder, "model", None), "precision", None)
        mode = precision.mode if precision else "fp32"
        modes = ["fp32"] if mode == "fp32" else ["fp32", mode]
        plain = plain_encoding_seconds(texts, settings.embedder_max_batch, modes)
        rate = args.pages / total_s
        print(
            f"text PDF, {args.pages} pages of {chars:.0f} characters, {len(texts)} memories "
            f"(in process, the model in {mode}):"
        )
        print(f"  extraction alone                      {args.pages / extracted_s:8.1f} pages/s")
        print(f"  extraction + chunking + embedding     {rate:8.1f} pages/s   (target >= 10)")
        for name, seconds in plain.items():
            plain_rate = args.pages / seconds
            print(
                f"  plain {name} encoding of its pieces     {plain_rate:8.1f} pages/s   "
                f"(the pipeline: {rate / plain_rate:.2f}x, target >= 0.8x)"
            )
        print(f"  CPU time {total_cpu / args.pages:.2f} s a page ({load()})")
    finally:
        await embedder.aclose()

    single = scanned_pages_pdf(work / "single.pdf", 1)
    started = time.perf_counter()
    extractors.extract(
        single, "application/pdf", language=None, progress=extractors.no_progress, model_dir=work
    )
    single_s = time.perf_counter() - started
    scan = scanned_pages_pdf(work / "scan.pdf", args.ocr_pages)
    cpu = cpu_seconds()
    started = time.perf_counter()
    extracted = extractors.extract(
        scan, "application/pdf", language=None, progress=extractors.no_progress, model_dir=work
    )
    ocr_s = time.perf_counter() - started
    ocr_cpu = cpu_seconds() - cpu
    assert extracted.metadata["ocrPages"] == args.ocr_pages
    print(f"OCR, scanned A4 pages of {LINES_PER_PAGE} lines (200 dpi, eng+deu+ita):")
    print(f"  {ocr_s / args.ocr_pages:8.2f} s a page of a {args.ocr_pages}-page scan   (target <= 2 s)")
    print(f"  {single_s:8.2f} s for a scan of one page (one Tesseract, one core)")
    print(f"  CPU time {ocr_cpu / args.ocr_pages:.2f} s a page ({load()})")

    wav = speech_wav(work / "speech.wav", args.speech_seconds)
    duration = float(media.probe(wav)["durationSeconds"])  # type: ignore[arg-type]
    models = work / "models"
    started = time.perf_counter()
    media.model_folder(models)
    joined_s = time.perf_counter() - started
    started = time.perf_counter()
    media._model(models)
    load_s = time.perf_counter() - started
    cpu = cpu_seconds()
    started = time.perf_counter()
    extracted = extractors.extract(
        wav, "audio/wav", language="en", progress=extractors.no_progress, model_dir=models
    )
    speech_s = time.perf_counter() - started
    speech_cpu = cpu_seconds() - cpu
    print(f"speech, {duration:.0f} s of espeak-ng English (whisper-base int8, language given):")
    print(f"  first use: joining the model {joined_s:.1f} s, loading it {load_s:.1f} s")
    print(f"  transcription {speech_s:.1f} s = {speech_s / duration:.2f}x real time   (target <= 0.5x)")
    print(f"  CPU time {speech_cpu / duration:.2f} s a second of speech ({load()})")
    print(f"  {len(extracted.content.split())} words transcribed")


def wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx2.get(f"{base}/readyz").status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("the server did not become ready")
        time.sleep(0.5)


def upload_until_done(
    http: httpx2.Client, path: Path, timeout_s: float = 1800
) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    with open(path, "rb") as handle:
        answer = http.post("/v1/documents", files={"file": (path.name, handle, "application/pdf")})
    if answer.status_code == 404:
        raise RuntimeError("this server has no POST /v1/documents")
    answer.raise_for_status()
    document_id = answer.json()["id"]
    while True:
        document = http.get(f"/v1/documents/{document_id}").json()
        if document["status"] in ("done", "failed"):
            if document["status"] == "failed":
                raise RuntimeError(f"{path.name} failed: {document.get('error')}")
            return time.perf_counter() - started, document
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"{path.name} was not done after {timeout_s:.0f} s")
        time.sleep(0.1)


class PeakRss:
    """Samples a process's resident memory every 50 ms in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def end_to_end(args: argparse.Namespace, work: Path) -> None:
    pdf = samples.pdf_with_text(work / "e2e.pdf", text_pages(args.pages, seed=9))
    big, big_pages = photo_pdf(work / "big.pdf", args.big_mb)
    # As in process: a throughput figure, so a batch slowed by a busy machine must not time out
    # (the worker would then write the memories unembedded and the backfill embed them later).
    os.environ.setdefault("MEMORY_MCP_EMBEDDER_TIMEOUT_S", "600")
    with serve_process("memory-mcp-ingest-", stdout=subprocess.PIPE) as (server, data_dir, port):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, server)
        key = (data_dir / "bootstrap-key").read_text().strip()
        with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=300) as http:
            upload_until_done(http, samples.pdf_with_text(work / "warm.pdf", text_pages(2, seed=1)))
            elapsed, document = upload_until_done(http, pdf)
            print(f"text PDF, {args.pages} pages, end to end through serve (upload to done, {load()}):")
            print(
                f"  {args.pages / elapsed:8.1f} pages/s   (target >= 10)   {document['memoryCount']} memories in {elapsed:.1f} s"
            )
            before = psutil.Process(server.pid).memory_info().rss
            with PeakRss(server.pid) as rss:
                elapsed, document = upload_until_done(http, big)
            size = big.stat().st_size / 1_000_000
            print(f"PDF of {size:.1f} MB ({big_pages} photo pages with a text layer), end to end:")
            print(
                f"  server RSS {before / 2**20:.0f} MiB before, peak {rss.peak / 2**20:.0f} MiB "
                f"(+{(rss.peak - before) / 2**20:.0f} MiB); done in {elapsed:.1f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--ocr-pages", type=int, default=6)
    parser.add_argument("--speech-seconds", type=float, default=60.0)
    parser.add_argument("--big-mb", type=float, default=49.9, help="size of the large PDF in MB (10^6 bytes)")
    parser.add_argument("--no-serve", action="store_true", help="only the in-process figures")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="memory-mcp-ingest-") as folder:
        work = Path(folder)
        asyncio.run(in_process(args, work))
        if not args.no_serve:
            end_to_end(args, work)


if __name__ == "__main__":
    main()
