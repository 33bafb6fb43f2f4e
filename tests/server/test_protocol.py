"""The MCP transport as strict clients see it: headers that stay the size they are, no streams that
hang, spec error codes without echoes, truthful capabilities and a lean ``tools/list``."""

from __future__ import annotations

import itertools
import json
import logging
import signal
import socket
import time
import uuid
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory_mcp.core import package_version
from memory_mcp.store.db import Database
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import APP_ONLY_TOOLS, RunningServer, serve_process
from tests.server.test_listing import HINTS, TOOLS_LIST_BUDGET

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
_ids = itertools.count(1)


def modern(method: str, params: dict[str, Any] | None = None, **capabilities: Any) -> dict[str, Any]:
    """A 2026-07-28 request body: every request carries its envelope in ``params._meta``."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "protocol-test", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**(params or {}), "_meta": meta}}


def modern_headers(key: str, body: dict[str, Any]) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": body["method"],
    }
    name = body["params"].get("name") or body["params"].get("uri")
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def legacy_headers(key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": LEGACY,
    }


async def reader_key(server: RunningServer) -> str:
    space = await make_space(server.db)
    return await make_key(server.db, await make_user(server.db), {space: "Read"}, space)


# --- defect: response headers must not pile up over the life of the process ----------------------

REQUESTS_PER_KIND = 1000


async def test_response_headers_stay_the_same_over_thousands_of_requests_of_every_kind(
    server: RunningServer,
) -> None:
    key = await reader_key(server)
    listen = {"notifications": {"toolsListChanged": True}}
    kinds: dict[str, Any] = {
        "modern JSON": lambda: ("POST", modern("ping"), None),
        "modern listen (an SSE answer where served)": lambda: (
            "POST",
            modern("subscriptions/listen", listen),
            None,
        ),
        "legacy JSON": lambda: ("POST", {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/list"}, LEGACY),
        "GET stream": lambda: ("GET", None, LEGACY),
    }
    first: dict[str, tuple[int, int]] = {}
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        for _ in range(REQUESTS_PER_KIND):
            for kind, make in kinds.items():
                method, body, version = make()
                headers = legacy_headers(key) if version else modern_headers(key, body)
                request_id = uuid.uuid4().hex
                headers["X-Request-Id"] = request_id
                async with http.stream(method, "/mcp", json=body, headers=headers) as response:
                    items = response.headers.multi_items()
                    # Only this request's id, once: never another request's.
                    assert [v for k, v in items if k == "x-request-id"] == [request_id], kind
                    shape = (len(items), sum(len(k) + len(v) for k, v in items))
                    assert first.setdefault(kind, shape) == shape, (kind, first[kind], shape)
    assert first["modern JSON"][0] < 12


# --- defect: GET /mcp and subscriptions/listen held streams that never carried anything ---------


async def test_mcp_allows_post_only_and_serves_no_listen_stream(server: RunningServer) -> None:
    key = await reader_key(server)
    async with httpx2.AsyncClient(base_url=server.base, timeout=10) as http:
        for method in ("GET", "DELETE", "PUT"):
            refused = await http.request(method, "/mcp", headers=legacy_headers(key))
            assert refused.status_code == 405, method
            assert refused.headers["allow"] == "POST"
            assert refused.json()["error"] == "MethodNotAllowed"
        body = modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        listen = await http.post("/mcp", json=body, headers=modern_headers(key, body))
        assert listen.headers["content-type"] == "application/json"
        assert listen.json()["error"]["code"] == -32601
        # The capabilities no longer claim change notifications that would need a listen stream.
        body = modern("server/discover")
        found = (await http.post("/mcp", json=body, headers=modern_headers(key, body))).json()["result"]
        assert found["capabilities"]["tools"].get("listChanged") in (None, False)
        assert found["capabilities"].get("resources", {}).get("subscribe") in (None, False)
        assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["version"] == package_version() != ""


async def test_sigterm_ends_serve_within_five_seconds_while_clients_hold_connections(
    db_urls: tuple[str, str],
) -> None:
    key = await key_on(db_urls[0])
    listen = modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    listen_body = json.dumps(listen).encode()
    listen_head = "".join(f"{k}: {v}\r\n" for k, v in modern_headers(key, listen).items())
    with serve_process(db_urls[0]) as served:
        host, port = served.base.removeprefix("http://").rsplit(":", 1)
        held = []
        for request in (
            # What held shutdown for 90 s: a client with a valid key on a GET or listen stream.
            f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
            "Accept: text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n".encode(),
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n{listen_head}"
            f"Content-Length: {len(listen_body)}\r\n\r\n".encode()
            + listen_body,
            f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode(),  # then idle on keep-alive
        ):
            conn = socket.create_connection((host, int(port)), timeout=20)
            conn.sendall(request)
            assert conn.recv(4096).startswith(b"HTTP/1.1 ")
            held.append(conn)
        started = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=60)
        elapsed = time.monotonic() - started
        for conn in held:
            conn.close()
    assert elapsed < 5, f"serve took {elapsed:.1f} s to exit after SIGTERM"


async def key_on(database_url: str) -> str:
    """A reader's key on the database a ``serve`` process will use."""
    setup = Database(database_url, pool_size=1)
    try:
        space = await make_space(setup)
        return await make_key(setup, await make_user(setup), {space: "Read"}, space)
    finally:
        await setup.close()


# --- defect: IPv6 binds, and the version in serverInfo ----------------------------------------


@pytest.mark.parametrize("host", ["::1", "::"])
async def test_serve_on_ipv6_answers_a_real_client_with_the_package_version(
    db_urls: tuple[str, str], host: str
) -> None:
    key = await key_on(db_urls[0])
    with serve_process(db_urls[0], host=host) as served:
        assert served.base.startswith("http://[::1]:")
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
            Client(streamable_http_client(f"{served.base}/mcp", http_client=http)) as client,
        ):
            assert client.server_info.version == package_version() != ""
            tools = await client.list_tools()
            assert "search_memory" in {tool.name for tool in tools.tools}


# --- defect: error codes of the spec, without echoes, library links or tracebacks ---------------

ECHO = "ZQX-echo"  # in every rejected input; never in an answer


def _legacy(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}


PROTOCOL_ERRORS = [
    # (what, method, params, JSON-RPC code)
    ("unknown tool", "tools/call", {"name": f"nope-{ECHO}", "arguments": {}}, -32602),
    ("unknown prompt", "prompts/get", {"name": f"nope-{ECHO}"}, -32602),
    ("unknown resource", "resources/read", {"uri": f"memory-mcp://{ECHO}"}, -32602),
    ("malformed params", "tools/call", {"name": "search_memory", "arguments": ECHO}, -32602),
    ("unknown method", f"nope/{ECHO}", {}, -32601),
]


async def test_errors_carry_the_spec_codes_and_never_the_input(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    key = await reader_key(server)
    answers: list[str] = []
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        for what, method, params, code in PROTOCOL_ERRORS:
            legacy = await http.post("/mcp", json=_legacy(method, params), headers=legacy_headers(key))
            body = modern(method, params)
            headers = modern_headers(key, body)
            if method.startswith("nope/"):
                headers["Mcp-Method"] = method
            current = await http.post("/mcp", json=body, headers=headers)
            for era, answer in (("legacy", legacy), ("modern", current)):
                assert answer.json()["error"]["code"] == code, (what, era, answer.text)
                answers.append(answer.text)
        # Invalid arguments, a typo among them, are a tool execution error the model can act on.
        for arguments, problem in (
            ({"limit": ECHO}, "limit: must be an integer"),
            ({"query": "x", f"quey{ECHO}": "x"}, "arguments: 1 unknown; this tool takes query, keyword,"),
        ):
            body = modern("tools/call", {"name": "search_memory", "arguments": arguments})
            result = (await http.post("/mcp", json=body, headers=modern_headers(key, body))).json()["result"]
            assert result["isError"] is True and problem in result["content"][0]["text"]
            answers.append(json.dumps(result))
        # The envelope: not JSON, a batch, a malformed message. Both eras answer alike.
        for content, code in (
            (b'{"jsonrpc": "2.0", ' + ECHO.encode(), -32700),
            (json.dumps([_legacy("ping", {"x": ECHO})] * 2).encode(), -32600),
            (json.dumps({"jsonrpc": "2.0", "id": 1, "method": 5, "params": {"x": ECHO}}).encode(), -32600),
        ):
            for headers in (legacy_headers(key), modern_headers(key, modern("ping"))):
                answer = await http.post("/mcp", content=content, headers=headers)
                assert answer.status_code == 400
                assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": answer.json()["error"]}
                assert answer.json()["error"]["code"] == code, answer.text
                answers.append(answer.text)
    for text in answers:
        assert ECHO not in text and "pydantic" not in text, text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


# --- defects: truthful annotations; app-only tools only for MCP Apps clients; a lean tools/list ----

APPS = {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}
APP_ONLY = APP_ONLY_TOOLS


async def tools_listed(http: httpx2.AsyncClient, key: str, **capabilities: Any) -> list[dict[str, Any]]:
    body = modern("tools/list", **capabilities)
    answer = await http.post("/mcp", json=body, headers=modern_headers(key, body))
    tools: list[dict[str, Any]] = answer.json()["result"]["tools"]
    return tools


async def test_tools_list_fits_the_client_and_every_annotation_tells_the_truth(server: RunningServer) -> None:
    key = await reader_key(server)
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        plain = await tools_listed(http, key)
        with_apps = await tools_listed(http, key, **APPS)
        legacy = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=legacy_headers(key)
        )
    assert {t["name"] for t in with_apps} == set(HINTS)
    assert {t["name"] for t in plain} == set(HINTS) - APP_ONLY
    # A handshake-era request carries no capabilities (they went with `initialize`, which a stateless
    # server does not keep): it gets every tool, widgets' data included, so its widgets still show.
    legacy_tools = legacy.json()["result"]["tools"]
    assert {t["name"] for t in legacy_tools} == set(HINTS)
    assert all("ui" in t["_meta"] for t in legacy_tools if t["name"] in {"select-space", "upload-file"})
    size = len(json.dumps(plain, separators=(",", ":")))
    assert size <= TOOLS_LIST_BUDGET, size
    for tool in with_apps:
        hints = tool["annotations"]
        names = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
        assert tuple(hints.get(name) for name in names) == HINTS[tool["name"]], tool["name"]
        # A typo in an argument name is refused, not silently ignored.
        assert tool["inputSchema"]["additionalProperties"] is False, tool["name"]
