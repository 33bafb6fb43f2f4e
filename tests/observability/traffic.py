"""Real traffic against a running server: every MCP tool, REST routes, refusals and bad keys.

The same rounds feed the scrape test, the live Prometheus test and the dashboard snapshot, so
what the dashboard shows is what these calls caused.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

# A credential the server refuses to store (an AWS access key id shape), and the refusal's name.
CREDENTIAL = "deploy key AKIAIOSFODNN7EXAMPLF for the prod account"
MISSING_SPACE = "no-such-space"
# Unrelated facts, so that rounds running side by side never read as new versions of each other.
FACTS = (
    "the billing service moved to PostgreSQL 17 in the EU region",
    "on-call handovers happen every Monday at nine, Berlin time",
    "the search team owns the GPU budget for embeddings",
    "release trains leave every second Thursday after the canary stage",
    "frontend builds are cached in the shared artifact bucket",
    "the auth gateway rotates its signing certificates monthly",
)

WIDGET_FACTS = (
    "the design review board meets in room Orion",
    "expense reports close on the 25th of each month",
    "the mobile app ships through the Thursday store review",
)


@dataclass
class TrafficLog:
    """What the traffic did, so that tests can compare it with the server's counters."""

    tool_calls: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, outcome)
    # (method, route template, status) of the REST requests
    rest_calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    searches: int = 0  # MCP and REST searches that ran (not refused)
    bad_key_requests: int = 0
    missing_key_requests: int = 0
    document_ids: set[str] = field(default_factory=set)


class _Tools:
    """Calls tools on one MCP session and records (tool, outcome) as the server names outcomes."""

    def __init__(self, client: Client, log: TrafficLog) -> None:
        self.client = client
        self.log = log

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, f"{tool} failed: {result.content}"
        assert isinstance(result.structured_content, dict)
        self.log.tool_calls[tool, "ok"] += 1
        return result.structured_content

    async def refused(self, tool: str, outcome: str, **arguments: Any) -> None:
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, f"{tool} was expected to be refused with {outcome}"
        self.log.tool_calls[tool, outcome] += 1


async def one_round(base: str, key: str, space: str, round_no: int, log: TrafficLog) -> None:
    """One pass over every tool (a save, a search, a forget, an error) and the REST routes."""
    auth = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(base_url=base, headers=auth, timeout=60) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        tools = _Tools(client, log)
        await tools.ok("whoAmI")
        await tools.ok("listSpaces")
        await tools.ok("select-space", space=space)
        text = f"Round {round_no}: {FACTS[round_no % len(FACTS)]}."
        saved = await tools.ok("add_memory", content=text, category="infra")
        assert saved["status"] == "saved", saved
        found = await tools.ok("search_memory", query="Which database does billing use?", keyword="billing")
        assert "semantic" in found["modes"], f"search fell back to full text: {found.get('fallback')}"
        log.searches += 1
        await tools.ok("listDocuments")
        document_id = saved["memory"]["documentId"]
        await tools.ok("getDocument", documentId=document_id)
        await tools.ok("listMemories")
        forgotten = await tools.ok("add_memory", action="forget", content=text)
        assert forgotten["status"] == "forgotten", forgotten
        # The widgets' launchers and the app-only tools they call.
        await tools.ok("set-active-space", space=space)
        await tools.ok("guided-save", prefill="A draft")
        widget_fact = f"Round {round_no} from the save form: {WIDGET_FACTS[round_no % len(WIDGET_FACTS)]}."
        await tools.ok("save-memory", content=widget_fact, space=space, category="widgets")
        await tools.ok("upload-file")
        await tools.ok("prepare-file-upload", containerTag=space)
        await tools.ok("memory-graph")
        await tools.ok("fetch-graph-data", limit=20)
        await tools.refused("search_memory", "SpaceNotFound", query="anything", containerTag=MISSING_SPACE)
        await tools.refused("add_memory", "SecretRefused", content=CREDENTIAL)

        await _rest(http, "GET", "/v1/whoami", log)
        await _rest(http, "GET", "/v1/search", log, params={"query": "billing database", "limit": 5})
        log.searches += 1
        await _rest(http, "GET", "/v1/memories", log, params={"limit": 5})
        await _rest(http, "GET", "/v1/documents", log)
        # Two document ids (one real, one unknown): both must count under the one route template.
        await _rest(http, "GET", f"/v1/documents/{document_id}", log, template="/v1/documents/{document_id}")
        unknown = f"/v1/documents/{uuid.uuid4()}"
        await _rest(http, "GET", unknown, log, template="/v1/documents/{document_id}", status=404)
        log.document_ids.update({document_id, unknown.rsplit("/", 1)[1]})

    async with httpx2.AsyncClient(base_url=base, timeout=30) as anonymous:
        bad = {"Authorization": f"Bearer mm_{uuid.uuid4().hex}{uuid.uuid4().hex}"}
        await _rest(anonymous, "GET", "/v1/whoami", log, status=401, headers=bad)
        await _rest(anonymous, "GET", "/v1/whoami", log, status=401)
        mcp_bad = await anonymous.post(
            "/mcp", headers=bad, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        assert mcp_bad.status_code == 401
        log.bad_key_requests += 2
        log.missing_key_requests += 1


async def _rest(
    http: httpx2.AsyncClient,
    method: str,
    path: str,
    log: TrafficLog,
    *,
    template: str | None = None,
    status: int = 200,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    response = await http.request(method, path, params=params, headers=headers)
    assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text}"
    log.rest_calls[method, template or path, str(status)] += 1


async def drive(base: str, key: str, space: str, rounds: int) -> TrafficLog:
    """Run ``rounds`` rounds of traffic one after another; returns what was done."""
    log = TrafficLog()
    for round_no in range(rounds):
        await one_round(base, key, space, round_no, log)
    return log
