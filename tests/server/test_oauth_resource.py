"""/mcp and /v1 as an OAuth protected resource: metadata, the 401 challenge, one bearer parser for
REST and MCP, and discovery that never spends the failed-authentication budget of real callers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store.access import Access
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, run_server

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
async def limited(db_urls: tuple[str, str], embedder: Embedder) -> AsyncIterator[RunningServer]:
    async with run_server(db_urls[0], embedder, auth_failure_limit=3) as running:
        yield running


async def _key(server: RunningServer) -> str:
    await make_space(server.db, "notes")
    return await make_key(server.db, await make_user(server.db), {"notes": Access.READ_WRITE}, "notes")


def _mcp(http: httpx2.AsyncClient, authorization: str | None, url: str = "/mcp") -> Any:
    headers = dict(MCP_HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    return http.post(url, json=INITIALIZE, headers=headers)


def _rest(http: httpx2.AsyncClient, authorization: str | None) -> Any:
    return http.get(
        "/v1/spaces", headers={"Authorization": authorization} if authorization is not None else {}
    )


async def test_metadata_names_this_resource_and_its_authorization_server(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        mcp = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        root = (await http.get("/.well-known/oauth-protected-resource")).json()
        issuer = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert mcp["resource"] == f"{server.base}/mcp"
    assert root["resource"] == server.base
    for document in (mcp, root):
        assert document["authorization_servers"] == [f"{server.base}/"]
        assert document["scopes_supported"] == ["memory"]
        assert document["bearer_methods_supported"] == ["header"]
    assert issuer["issuer"] == f"{server.base}/"
    assert issuer["revocation_endpoint"] == f"{server.base}/revoke"
    assert issuer["registration_endpoint"] == f"{server.base}/register"
    assert issuer["client_id_metadata_document_supported"] is True
    assert issuer["code_challenge_methods_supported"] == ["S256"]
    assert issuer["authorization_response_iss_parameter_supported"] is True


async def test_a_public_url_is_the_resource_behind_an_ingress(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    async with (
        run_server(db_urls[0], embedder, public_url="https://memory.example.com/") as running,
        httpx2.AsyncClient(base_url=running.base) as http,
    ):
        mcp = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        refused = await _mcp(http, None)
        # A tunnel to a loopback server hands requests on with the public host name: still served.
        key = await _key(running)
        tunnelled = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Host": "memory.example.com", "Authorization": f"Bearer {key}"},
        )
    assert tunnelled.status_code == 200, tunnelled.text
    assert mcp["resource"] == "https://memory.example.com/mcp"
    assert mcp["authorization_servers"] == ["https://memory.example.com/"]
    assert (
        refused.headers["www-authenticate"]
        == 'Bearer resource_metadata="https://memory.example.com/.well-known/oauth-protected-resource/mcp", scope="memory"'
    )


async def test_every_401_points_at_the_metadata_and_says_invalid_token_only_when_one_was_sent(
    server: RunningServer,
) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        mcp_none, mcp_bad = await _mcp(http, None), await _mcp(http, "Bearer mmk_0123456789_wrong")
        rest_none, rest_bad = await _rest(http, None), await _rest(http, "Bearer mmk_0123456789_wrong")
    prm = f"{server.base}/.well-known/oauth-protected-resource"
    assert [r.status_code for r in (mcp_none, mcp_bad, rest_none, rest_bad)] == [401] * 4
    assert mcp_none.headers["www-authenticate"] == f'Bearer resource_metadata="{prm}/mcp", scope="memory"'
    assert mcp_bad.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{prm}/mcp", scope="memory"'
    )
    assert rest_none.headers["www-authenticate"] == f'Bearer resource_metadata="{prm}", scope="memory"'
    assert rest_bad.headers["www-authenticate"].startswith('Bearer error="invalid_token", ')
    assert mcp_bad.json()["error"] == rest_bad.json()["error"] == "AuthenticationFailed"


async def _raw(base: str, method: str, path: str, authorization: str, body: bytes = b"") -> tuple[int, str]:
    """One request written byte for byte: HTTP client libraries refuse to send a header value
    with trailing whitespace, which is exactly what this must send. Returns (status, challenge)."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: {authorization}\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + body)
    await writer.drain()
    answer = (await reader.read()).decode("latin-1")
    writer.close()
    status = int(answer.split(" ", 2)[1])
    challenge = next(
        (
            line.split(":", 1)[1].strip()
            for line in answer.split("\r\n")
            if line.lower().startswith("www-authenticate:")
        ),
        "",
    )
    return status, challenge


@pytest.mark.parametrize(
    "shape",
    [
        "Bearer  {key}",
        "Bearer   {key}",
        "Bearer\t{key}",
        "Basic {key}",
        "{key}",
        "Bearer {key},x",
        "Bearer",
        "Bearer {key} x",
    ],
)
async def test_rest_and_mcp_refuse_a_malformed_bearer_alike(server: RunningServer, shape: str) -> None:
    key = await _key(server)
    header = shape.format(key=key)
    mcp = await _raw(server.base, "POST", "/mcp", header, json.dumps(INITIALIZE).encode())
    rest = await _raw(server.base, "GET", "/v1/spaces", header)
    assert (mcp[0], rest[0]) == (401, 401)
    assert mcp[1].startswith('Bearer error="invalid_token"') and rest[1].startswith(
        'Bearer error="invalid_token"'
    )


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_rest_and_mcp_take_the_same_well_formed_bearer(server: RunningServer, scheme: str) -> None:
    key = await _key(server)
    async with httpx2.AsyncClient(base_url=server.base) as http:
        mcp, rest = await _mcp(http, f"{scheme} {key}"), await _rest(http, f"{scheme} {key}")
    assert (mcp.status_code, rest.status_code) == (200, 200), (mcp.text, rest.text)


async def test_a_key_in_the_query_string_is_not_a_credential(server: RunningServer) -> None:
    key = await _key(server)
    async with httpx2.AsyncClient(base_url=server.base) as http:
        mcp = await _mcp(http, None, url=f"/mcp?access_token={key}")
        rest = await http.get("/v1/spaces", params={"access_token": key})
    assert (mcp.status_code, rest.status_code) == (401, 401)


async def test_requests_without_credentials_do_not_spend_the_throttle_budget(limited: RunningServer) -> None:
    key = await _key(limited)
    async with httpx2.AsyncClient(base_url=limited.base) as http:
        discovery = [(await _mcp(http, None)).status_code for _ in range(10)]
        discovery += [(await _rest(http, None)).status_code for _ in range(10)]
        wrong = [(await _rest(http, "Bearer mmk_0123456789_wrong")).status_code for _ in range(4)]
        still = await _mcp(http, None)
        valid = await _rest(http, f"Bearer {key}")
    assert discovery == [401] * 20  # each with its challenge: none turned into a 429
    assert wrong == [401, 401, 401, 429]  # the budget was whole when the first wrong key came
    assert still.status_code == 401 and "resource_metadata" in still.headers["www-authenticate"]
    assert valid.status_code == 200


async def test_trailing_whitespace_never_reaches_either_parser(server: RunningServer) -> None:
    """HTTP itself drops whitespace around a header value (RFC 9110 §5.5): the server hands both
    REST and MCP the same bytes, so they answer alike."""
    key = await _key(server)
    mcp = await _raw(server.base, "POST", "/mcp", f"Bearer {key} \t", json.dumps(INITIALIZE).encode())
    rest = await _raw(server.base, "GET", "/v1/spaces", f"Bearer {key} \t")
    assert mcp[0] == rest[0] == 200
