"""Real files of every kind through a real server: upload, extraction by the worker, content, search.

Each file is made at test time by real tools (tests/samples.py), uploaded as multipart to
POST /v1/documents, and followed through GET /v1/documents/{id} until the worker has finished. The
document's content must hold the known text, and a search must find a memory of that document
among the first five results.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import validation
from tests import samples
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, run_server

# How long a test waits for the worker; a bound on the loop, not a timed assertion (speech on a
# busy two-core machine takes a while, the first time with assembling the model).
WAIT_FOR_WORKER_S = 600


@dataclass(frozen=True)
class Kind:
    file_name: str
    make: Callable[[Path], Path]
    expected: list[str]  # must appear in the content (compared case-insensitively for speech)
    query: str  # a search that must find a memory of the document in the top 5
    media_type: str
    speech: bool = False


def _mp4(path: Path) -> Path:
    return samples.speech_mp4(path, samples.speech_wav(path.with_suffix(".wav")))


KINDS = [
    Kind(
        "runbook.pdf",
        lambda p: samples.pdf_with_text(p, samples.PDF_PAGES),
        samples.PDF_PAGES,
        "how often are the ingress certificates rotated",
        "application/pdf",
    ),
    Kind(
        "scan.pdf",
        samples.scanned_pdf,
        samples.SCAN_TEXT,
        "Heron Logistics warehouse invoice",
        "application/pdf",
    ),
    Kind(
        "storage.docx",
        samples.docx_with_table,
        [samples.DOCX_PARAGRAPH, "billing | Marta | PostgreSQL 16"],
        "how long does the archive cluster keep audit records",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    Kind(
        "cities.csv",
        samples.csv_file,
        ["A table of 45 rows and 3 columns", "city: city0031; country: Italy; population: 1031"],
        "city0031",
        "text/csv",
    ),
    Kind(
        "hinweis.png", samples.german_png, samples.GERMAN_TEXT, "Rechnung für München überfällig", "image/png"
    ),
    Kind(
        "planning.wav",
        samples.speech_wav,
        ["quarterly planning meeting", "thursday afternoon"],
        "when is the quarterly planning meeting",
        "audio/wav",
        speech=True,
    ),
    Kind(
        "planning.mp4",
        _mp4,
        ["quarterly planning meeting", "budget figures"],
        "bring the budget figures to the planning meeting",
        "video/mp4",
        speech=True,
    ),
]


@pytest.fixture
async def files_server(
    db_urls: tuple[str, str], embedder: Embedder, data_dir: Path
) -> AsyncIterator[RunningServer]:
    # One data dir for the run: the speech model is assembled under it once.
    async with run_server(db_urls[0], embedder, data_dir=data_dir) as running:
        yield running


async def writer_key(server: RunningServer, space: str = "files") -> str:
    await make_space(server.db, space)
    return await make_key(server.db, await make_user(server.db, "uma"), {space: "ReadWrite"}, space)


async def upload(http: httpx2.AsyncClient, path: Path, **fields: str) -> httpx2.Response:
    body = await asyncio.to_thread(path.read_bytes)
    return await http.post("/v1/documents", files={"file": (path.name, body)}, data=fields)


async def wait_until_finished(http: httpx2.AsyncClient, document_id: str) -> dict[str, Any]:
    """The document once its status is done or failed, with the content of every page joined."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_FOR_WORKER_S
    while True:
        answer = await http.get(f"/v1/documents/{document_id}")
        assert answer.status_code == 200, answer.text
        document: dict[str, Any] = answer.json()
        assert 0 <= document["progress"] <= 1
        if document["status"] in ("done", "failed"):
            break
        assert document["status"] in ("queued", "processing")
        assert loop.time() < deadline, f"the worker did not finish the document: {document}"
        await asyncio.sleep(0.5)
    pages = [document["content"]]
    for page in range(2, document["pages"] + 1):
        pages.append(
            (await http.get(f"/v1/documents/{document_id}", params={"page": page})).json()["content"]
        )
    document["allContent"] = "\n\n".join(pages)
    return document


@pytest.mark.parametrize("kind", KINDS, ids=[k.file_name for k in KINDS])
async def test_file_of_every_kind_is_extracted_and_found(
    files_server: RunningServer, tmp_path: Path, kind: Kind
) -> None:
    key = await writer_key(files_server)
    path = kind.make(tmp_path / kind.file_name)
    async with httpx2.AsyncClient(
        base_url=files_server.base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        answer = await upload(http, path, category="handbook")
        assert answer.status_code == 202, answer.text
        queued = answer.json()
        assert queued["status"] == "queued" and queued["mediaType"] == kind.media_type

        document = await wait_until_finished(http, queued["id"])
        assert document["status"] == "done", document.get("error")
        assert document["progress"] == 1 and document["memoryCount"] >= 1
        assert document["fileName"] == kind.file_name and document["category"] == "handbook"
        content = document["allContent"].lower() if kind.speech else document["allContent"]
        for text in kind.expected:
            assert text in content
        # The summary is sentences of the document itself.
        flat = " ".join(document["allContent"].split())
        sentences = [s if s.endswith(".") else s + "." for s in document["summary"].split(". ")]
        assert sentences and all(s.rstrip(".") in flat for s in sentences), document["summary"]

        found = await http.get(
            "/v1/search", params={"query": kind.query, "limit": 5, "includeProfile": False}
        )
        assert found.status_code == 200, found.text
        hits = found.json()["results"]
        assert queued["id"] in [hit["documentId"] for hit in hits[:5]], hits
        hit = next(h for h in hits if h["documentId"] == queued["id"])
        assert hit["category"] == "handbook" and hit["source"] is not None
        if kind.file_name == "runbook.pdf":
            assert hit["source"]["page"] == 3 and "ingress certificates" in hit["content"]
        if kind.speech:
            assert hit["source"]["startS"] is not None and hit["source"]["endS"] > hit["source"]["startS"]


async def test_a_file_that_cannot_be_read_fails_with_its_reason(
    files_server: RunningServer, tmp_path: Path
) -> None:
    key = await writer_key(files_server)
    async with httpx2.AsyncClient(
        base_url=files_server.base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        answer = await upload(http, samples.silent_wav(tmp_path / "silence.wav"))
        assert answer.status_code == 202, answer.text
        document = await wait_until_finished(http, answer.json()["id"])
        assert document["status"] == "failed" and document["error"] == "no speech found in the recording"
        assert document["memoryCount"] == 0


def _word_bomb(path: Path, paragraphs: int) -> Path:
    """A .docx of well under a megabyte whose document part inflates to about `paragraphs` x 42 bytes."""
    import zipfile

    import docx

    template = Path(docx.__file__).parent / "templates" / "default.docx"
    with zipfile.ZipFile(template) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                head, tail = data.split(b"<w:body>")
                data = head + b"<w:body>" + b"<w:p><w:r><w:t>spam spam</w:t></w:r></w:p>" * paragraphs + tail
            bomb.writestr(item.filename, data)
    return path


async def test_files_too_big_once_unpacked_or_extracted_fail_before_they_are_written(
    files_server: RunningServer, tmp_path: Path
) -> None:
    key = await writer_key(files_server)
    long_text = tmp_path / "log.txt"
    line = "The billing worker restarted after the nightly backup finished.\n"
    long_text.write_text(line * (validation.MAX_EXTRACTED_TEXT // len(line) + 1))
    bomb = _word_bomb(tmp_path / "bomb.docx", 5_000_000)
    assert bomb.stat().st_size < 2**20
    async with httpx2.AsyncClient(
        base_url=files_server.base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        for path, reason in (
            (bomb, "the Word file unpacks to 201 MB, over the limit of 200 MB"),
            (long_text, f"over the limit of {validation.MAX_EXTRACTED_TEXT:,} (about 2,500 pages)"),
        ):
            answer = await upload(http, path)
            assert answer.status_code == 202, answer.text
            document = await wait_until_finished(http, answer.json()["id"])
            assert document["status"] == "failed" and reason in document["error"], document["error"]
            assert document["memoryCount"] == 0
