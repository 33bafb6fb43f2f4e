"""REST /v1: the same operations and rules as MCP, with HTTP statuses."""

from __future__ import annotations

import gc
import re
import uuid

import httpx2

from memory_mcp.embedder.client import Embedder
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session, run_server


async def test_rest_round_trip_and_errors(server: RunningServer) -> None:
    await make_space(server.db, "docs")
    await make_space(server.db, "ro")
    await make_space(server.db, "hidden")
    key = await make_key(
        server.db, await make_user(server.db, "fay"), {"docs": "ReadWrite", "ro": "Read"}, "docs"
    )
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(base_url=server.base, headers=auth) as http:
        me = (await http.get("/v1/whoami")).json()
        assert me["user"]["displayName"] == "Fay" and me["activeSpace"] == "docs"

        saved = await http.post(
            "/v1/memories", json={"content": "REST clients can save too.", "category": "api"}
        )
        assert saved.status_code == 200 and saved.json()["status"] == "saved"
        memory = saved.json()["memory"]

        found = (await http.get("/v1/search", params={"keyword": "REST clients"})).json()
        assert [h["id"] for h in found["results"]] == [memory["id"]]
        assert found["modes"] == ["keyword"]

        listed = (await http.get("/v1/memories", params={"limit": 5})).json()
        assert listed["pagination"]["limit"] == 5 and listed["memories"][0]["id"] == memory["id"]
        doc = (await http.get(f"/v1/documents/{memory['documentId']}")).json()
        assert doc["content"] == "REST clients can save too."

        spaces = (await http.get("/v1/spaces")).json()
        assert {s["key"] for s in spaces["spaces"]} == {"docs", "ro"}
        moved = await http.put("/v1/spaces/active", json={"space": "ro"})
        assert moved.json()["activeSpace"] == "ro"

        denied = await http.post("/v1/memories", json={"content": "Not allowed here."})
        assert denied.status_code == 403 and "Read access to space 'ro'" in denied.json()["message"]
        hidden = await http.get("/v1/memories", params={"containerTag": "hidden"})
        missing = await http.get("/v1/memories", params={"containerTag": "no-such-space"})
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["error"] == missing.json()["error"] == "SpaceNotFound"
        assert (await http.get(f"/v1/documents/{uuid.uuid4()}")).status_code == 404
        bad = await http.get("/v1/documents/not-a-uuid")
        assert bad.status_code == 422 and bad.json()["field"] == "documentId"
        assert (await http.get("/v1/memories", params={"limit": 51})).status_code == 422
        empty = await http.get("/v1/search")
        assert empty.status_code == 422 and empty.json()["field"] == "query"
        secret = await http.post(
            "/v1/memories", json={"content": "key AKIAIOSFODNN7EXAMPLF for prod", "containerTag": "docs"}
        )
        assert secret.status_code == 422 and "AWS" in secret.json()["message"]

        forgot = await http.post(
            "/v1/memories/forget", json={"content": memory["id"], "containerTag": "docs"}
        )
        assert forgot.json()["status"] == "forgotten" and forgot.json()["memory"]["updatedBy"] == "Fay"


async def test_rest_names_one_memory_by_id_and_lists_only_documents(server: RunningServer) -> None:
    key = await make_key(
        server.db, await make_user(server.db), {await make_space(server.db, "ids"): "ReadWrite"}
    )
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        first = (await http.post("/v1/memories", json={"content": "Backups run nightly at 02:00."})).json()
        memory = first["memory"]
        assert (await http.get("/v1/documents")).json()["documents"] == []
        by_memory = await http.get(f"/v1/documents/{memory['id'][:8]}")
        assert by_memory.status_code == 200 and by_memory.json()["id"] == memory["documentId"]

        vague = (await http.post("/v1/memories/forget", json={"content": "backups"})).json()
        assert vague["status"] == "ambiguous" and [m["id"] for m in vague["candidates"]] == [memory["id"]]

        moved = await http.post(
            "/v1/memories", json={"content": "Backups moved to a weekly run.", "memoryId": memory["id"][:8]}
        )
        assert moved.status_code == 200 and moved.json()["status"] == "updated"
        latest = moved.json()["memory"]
        assert latest["version"] == 2 and latest["supersedesId"] == memory["id"]

        neither = await http.post("/v1/memories/forget", json={})
        assert neither.status_code == 422 and "content or memoryId" in neither.json()["message"]
        gone = await http.post("/v1/memories/forget", json={"memoryId": str(uuid.uuid4())})
        assert gone.status_code == 404
        forgot = (await http.post("/v1/memories/forget", json={"memoryId": latest["id"]})).json()
        assert forgot["status"] == "forgotten" and forgot["memory"]["id"] == latest["id"]


async def test_rest_and_mcp_share_one_implementation(server: RunningServer) -> None:
    key = await make_key(
        server.db, await make_user(server.db), {await make_space(server.db, "both"): "ReadWrite"}
    )
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        saved = (await http.post("/v1/memories", json={"content": "Saved over REST."})).json()["memory"]
    async with mcp_session(server, key) as s:
        listed = await s.ok("listMemories")
    assert listed["memories"][0] == saved


async def test_openapi_and_health(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        spec = (await http.get("/openapi.json")).json()
        assert {"/v1/whoami", "/v1/search", "/v1/memories", "/v1/documents/{document_id}"} <= set(
            spec["paths"]
        )
        assert (await http.get("/docs")).status_code == 200
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        metrics = (await http.get("/metrics")).text
        assert "memory_mcp_db_pool_size" in metrics


async def test_openapi_declares_the_bearer_key_and_describes_every_operation(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        spec = (await http.get("/openapi.json")).json()
        schemes = spec["components"]["securitySchemes"]
        ((name, scheme),) = schemes.items()
        assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                where = f"{method.upper()} {path}"
                # The upload URL of prepare-file-upload authenticates by its one-time token instead.
                wanted = None if path.startswith("/v1/uploads") else [{name: []}]
                assert operation.get("security") == wanted, where
                summary = operation.get("summary", "")
                generated = operation["operationId"].split("_v1")[0].replace("_", " ").title()
                assert summary and summary != generated and not summary.endswith("."), (where, summary)
                assert len(operation.get("description", "")) >= 40, where

        page = (await http.get("/docs")).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', page) + re.findall(r"url: '([^']+)'", page)
        assert sources and all(s.startswith("/") for s in sources), sources  # nothing from a CDN
        for source in sources:
            assert (await http.get(source)).status_code == 200, source
        assert "persistAuthorization" in page


async def test_start_up_takes_what_it_loaded_out_of_garbage_collection(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    # Full collections would otherwise walk the model and libraries every time (a ~300 ms stall).
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    async with run_server(db_urls[0], embedder) as running:
        async with httpx2.AsyncClient(base_url=running.base) as http:
            assert (await http.get("/readyz")).status_code == 200
        assert gc.get_freeze_count() > 10_000
