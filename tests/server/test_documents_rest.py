"""Files over real HTTP: upload, the worker in the server, reading, searching, tokens, refusals."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx2

from memory_mcp.embedder.client import Embedder
from memory_mcp.store.access import Role
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, apps_session, mcp_session, run_server

MARKDOWN = """# Runbook for the billing service

The billing service charges customers on the first day of every month.

When invoices fail, the on-call engineer restarts the ledger worker and checks the queue of
pending charges. The ledger worker keeps its state in the table called ledger_entries.
"""
CSV = "name,team,city\nAda,platform,Zurich\nGrace,compilers,Arlington\nLinus,kernel,Portland\n"


async def writer_key(server: RunningServer, space: str = "docs") -> str:
    await make_space(server.db, space)
    return await make_key(server.db, await make_user(server.db), {space: "ReadWrite"}, space)


def client(server: RunningServer, key: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx2.AsyncClient(base_url=server.base, headers=headers, timeout=60)


async def upload(
    http: httpx2.AsyncClient, name: str, body: bytes, path: str = "/v1/documents", **fields: str
) -> httpx2.Response:
    return await http.post(path, files={"file": (name, body)}, data=fields)


async def finished(http: httpx2.AsyncClient, doc_id: str) -> dict[str, Any]:
    """The document once the server's worker is done with it (polled; the test's time limit bounds it)."""
    while True:
        doc = (await http.get(f"/v1/documents/{doc_id}")).json()
        assert 0 <= doc["progress"] <= 1
        if doc["status"] in ("done", "failed"):
            return doc
        await asyncio.sleep(0.1)


async def test_a_markdown_file_is_extracted_searchable_and_listed(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        queued = await upload(http, "billing.md", MARKDOWN.encode(), category="Runbooks")
        assert queued.status_code == 202, queued.text
        body = queued.json()
        assert body["status"] == "queued" and body["progress"] == 0 and body["existing"] is False
        assert body["mediaType"] == "text/markdown" and body["fileName"] == "billing.md"

        doc = await finished(http, body["id"])
        assert doc["status"] == "done" and doc["progress"] == 1, doc
        assert doc["title"] == "Runbook for the billing service"
        assert "restarts the ledger worker" in doc["content"] and doc["memoryCount"] >= 1
        assert doc["summary"] and doc["pages"] == 1 and len(doc["memoryIds"]) == doc["memoryCount"]

        found = (await http.get("/v1/search", params={"query": "what to do when invoices fail"})).json()
        top = [h for h in found["results"][:5] if h["documentId"] == body["id"]]
        assert top and top[0]["source"]["charEnd"] > top[0]["source"]["charStart"]

        memories = (await http.get("/v1/memories")).json()["memories"]
        assert {m["documentId"] for m in memories} == {body["id"]}
        assert all(m["category"] == "runbooks" and "source" in m for m in memories)
        listed = (await http.get("/v1/documents")).json()["documents"]
        assert [d["id"] for d in listed] == [body["id"]] and listed[0]["type"] == "markdown"

    async with mcp_session(docs_server, key) as s:
        shown = await s.call("listMemories")
        assert f"doc {body['id'][:8]}" in shown.content[0].text  # type: ignore[union-attr]
        read = await s.ok("getDocument", documentId=body["id"][:8])
        assert read["status"] == "done" and "ledger_entries" in read["content"] and read["progress"] == 1
        docs = await s.call("listDocuments")
        assert "done" in docs.content[0].text and "billing.md" in docs.content[0].text  # type: ignore[union-attr]


async def test_a_csv_becomes_a_summary_and_records_with_column_names(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        queued = await upload(http, "people.csv", CSV.encode())
        assert queued.status_code == 202, queued.text
        doc = await finished(http, queued.json()["id"])
        assert doc["status"] == "done" and "Grace" in doc["content"]
        memories = (await http.get("/v1/memories", params={"limit": 50})).json()["memories"]
        contents = sorted(m["content"] for m in memories)
        assert contents[0] == (
            "A table of 3 rows and 3 columns: name (text: Ada, Grace, Linus); "
            "team (text: platform, compilers, kernel); city (text: Zurich, Arlington, Portland)."
        )
        assert "name: Grace; team: compilers; city: Arlington" in contents[1]
        assert "Grace,compilers" not in doc["content"]  # no raw rows
        found = (
            await http.get("/v1/search", params={"query": "Grace of the compilers team in Arlington"})
        ).json()
        assert any("name: Grace; team: compilers" in h["content"] for h in found["results"][:5])


async def test_the_same_file_twice_is_the_same_document(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        first = await upload(http, "a.md", MARKDOWN.encode())
        second = await upload(http, "renamed.md", MARKDOWN.encode())
        assert first.status_code == 202 and second.status_code == 200
        assert second.json()["id"] == first.json()["id"] and second.json()["existing"] is True
        assert (await http.get("/v1/documents")).json()["pagination"]["total"] == 1


async def test_a_text_file_with_an_extension_of_its_own_is_read_as_text(docs_server: RunningServer) -> None:
    """Debian's README.Debian, a LICENSE.GPL: text files whose "extension" names no format."""
    key = await writer_key(docs_server)
    text = "The service keeps its state in /var/lib/ledger.\n\nRestart it with systemctl restart ledger.\n"
    async with client(docs_server, key) as http:
        queued = await upload(http, "README.Debian", text.encode())
        assert queued.status_code == 202, queued.text
        assert queued.json()["mediaType"] == "text/plain"
        doc = await finished(http, queued.json()["id"])
        assert doc["status"] == "done" and "/var/lib/ledger" in doc["content"], doc
        refused = await upload(http, "page.html", b"<html><body><p>Restart it.</p></body></html>")
        assert refused.status_code == 415, refused.text


def uploads_left(server_dir: Path) -> list[str]:
    folder = server_dir / "uploads"
    return os.listdir(folder) if folder.exists() else []


async def test_an_unsupported_file_is_refused_with_415_and_nothing_is_stored(
    docs_server: RunningServer, tmp_path: Path
) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        refused = await upload(http, "blob.bin", bytes(range(256)) * 64)
        assert refused.status_code == 415
        assert (
            refused.json()["error"] == "UnsupportedMediaType" and "upload text" in refused.json()["message"]
        )
        not_multipart = await http.post(
            "/v1/documents", content=b"hello", headers={"Content-Type": "text/plain"}
        )
        assert not_multipart.status_code == 415
        assert (await http.get("/v1/documents")).json()["pagination"]["total"] == 0
    assert uploads_left(tmp_path) == []


async def test_a_file_over_the_limit_is_refused_with_413_and_nothing_is_stored(
    db_urls: tuple[str, str], embedder: Embedder, tmp_path: Path
) -> None:
    async with run_server(db_urls[0], embedder, data_dir=tmp_path, max_upload_bytes=2048) as server:
        key = await writer_key(server)
        async with client(server, key) as http:
            too_big = await upload(http, "big.txt", b"All work and no play. " * 500)
            assert too_big.status_code == 413 and "2048 bytes" in too_big.json()["message"]
            fits = await upload(http, "small.txt", b"A small file that fits.")
            assert fits.status_code == 202
            assert (await http.get("/v1/documents")).json()["pagination"]["total"] == 1
    assert uploads_left(tmp_path) == []


async def test_readers_get_403_and_a_space_without_a_grant_looks_missing(docs_server: RunningServer) -> None:
    await make_space(docs_server.db, "docs")
    await make_space(docs_server.db, "hidden")
    reader = await make_key(
        docs_server.db, await make_user(docs_server.db, role=Role.READER), {"docs": "ReadWrite"}, "docs"
    )
    read_grant = await make_key(docs_server.db, await make_user(docs_server.db), {"docs": "Read"}, "docs")
    async with client(docs_server, reader) as http:
        denied = await upload(http, "a.md", MARKDOWN.encode())
        assert denied.status_code == 403 and "Reader role" in denied.json()["message"]
        assert (await http.get("/v1/documents")).status_code == 200  # Read is enough to see
    async with client(docs_server, read_grant) as http:
        denied = await upload(http, "a.md", MARKDOWN.encode(), containerTag="docs")
        assert denied.status_code == 403 and "Read access" in denied.json()["message"]
        hidden = await upload(http, "a.md", MARKDOWN.encode(), containerTag="hidden")
        missing = await upload(http, "a.md", MARKDOWN.encode(), containerTag="nowhere")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["error"] == missing.json()["error"] == "SpaceNotFound"
        assert hidden.json()["message"].replace("hidden", "X") == missing.json()["message"].replace(
            "nowhere", "X"
        )


async def test_the_upload_token_works_once_for_its_key_only(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    other = await make_key(docs_server.db, await make_user(docs_server.db), {"docs": "ReadWrite"}, "docs")
    async with apps_session(docs_server, key) as s:
        listed = await s.client.list_tools()
        tool = next(t for t in listed.tools if t.name == "prepare-file-upload")
        assert tool.meta == {"ui": {"visibility": ["app"]}}
        grants = [await s.ok("prepare-file-upload") for _ in range(3)]
    url = grants[0]["uploadUrl"]
    assert url == f"{docs_server.base}/v1/uploads"
    async with client(docs_server, None) as anonymous:
        used = await upload(
            anonymous, "a.md", MARKDOWN.encode(), path=url, uploadToken=grants[0]["uploadToken"]
        )
        assert used.status_code == 202 and used.json()["status"] == "queued"
        again = await upload(
            anonymous, "b.md", b"Another file.", path=url, uploadToken=grants[0]["uploadToken"]
        )
        assert again.status_code == 401
        in_url = await upload(
            anonymous, "c.md", b"Token in the URL.", path=f"{url}/{grants[1]['uploadToken']}"
        )
        assert in_url.status_code == 202
    async with client(docs_server, other) as someone_else:
        refused = await upload(
            someone_else, "d.md", b"Not yours.", path=url, uploadToken=grants[2]["uploadToken"]
        )
        assert refused.status_code == 401
    async with client(docs_server, key) as owner:
        own = await upload(owner, "d.md", b"Yours.", path=url, uploadToken=grants[2]["uploadToken"])
        assert own.status_code == 202
        assert (await owner.get("/v1/documents")).json()["pagination"]["total"] == 3


async def test_a_long_add_memory_becomes_one_document_of_several_memories(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    content = "\n\n".join(
        " ".join(
            f"Section {p} point {s}: the deployment of service {p}-{s} needs review {s}." for s in range(14)
        )
        for p in range(10)
    )
    assert 9_000 < len(content) <= 12_000
    async with mcp_session(docs_server, key) as s:
        saved = await s.ok("add_memory", content=content, category="design")
        doc = saved["document"]
        assert saved["status"] == "saved" and saved["embedded"] is True and doc["memoryCount"] > 4
        listed = await s.ok("listMemories", limit=50)
        assert len(listed["memories"]) == doc["memoryCount"]
        assert {m["documentId"] for m in listed["memories"]} == {doc["id"]}
        assert all(len(m["content"]) <= 2000 and m["category"] == "design" for m in listed["memories"])
        again = await s.ok("add_memory", content=content)
        assert again["status"] == "already_exists" and again["document"]["id"] == doc["id"]
        refused = await s.error("add_memory", content=content + " ghp_" + "a1B2" * 9)
        assert "refused" in refused and "looks like" in refused


async def test_forgetting_a_document_over_rest(docs_server: RunningServer) -> None:
    key = await writer_key(docs_server)
    async with client(docs_server, key) as http:
        doc = await finished(http, (await upload(http, "billing.md", MARKDOWN.encode())).json()["id"])
        forgot = await http.post(f"/v1/documents/{doc['id']}/forget")
        assert forgot.status_code == 200 and forgot.json()["status"] == "forgotten"
        assert forgot.json()["memoriesForgotten"] == doc["memoryCount"]
        assert (await http.get("/v1/memories")).json()["memories"] == []
        gone = (await http.get("/v1/memories", params={"status": "forgotten"})).json()["memories"]
        assert {m["documentId"] for m in gone} == {doc["id"]}
        again = await upload(http, "billing.md", MARKDOWN.encode())
        assert again.status_code == 202 and again.json()["id"] != doc["id"]  # forgotten: a new document
